/* parallel/executor.h — runs one stage's action list (parallel/schedule.h) on
 * the model, the communicator and data parallelism.
 *
 * The idea: the executor has no opinion about order. It walks the list: a
 * forward or backward calls the model on the action's slot, a run of
 * consecutive sends and receives becomes one posted-together group, a bucket
 * action starts or finishes a reduction, the optimizer action calls back into
 * the trainer. It keeps a log of what it ran and when (seconds from the start
 * of the step), which the tests read to see that a bucket's reduction really
 * started while the backward still had layers to go. */
#pragma once
#include "schedule.h"
#include "ddp.h"

typedef struct {
    ActionKind kind;
    int mb, chunk, bucket, from, to;
    double start, end;          /* seconds since the step began */
} ExecEvent;

typedef struct {
    Model *model;
    const Comm *comm;
    Ddp *ddp;
    void (*optimizer)(void *ctx);   /* ACT_OPTIMIZER */
    void *ctx;
    ExecEvent *log;             /* the last run's actions, in order */
    int n_log, cap_log;
    double busy_s;              /* the last run: seconds in forward and backward */
    double comm_s;              /* the last run: seconds in sends, receives and waits */
} Executor;

/* Runs actions[0..n) of this stage for one step whose micro-batch k is
 * ids/targets + k*B*T (host). dloss: the loss gradient per token (0: no
 * backward). Returns the sum of the per-token losses this stage computed (the
 * stage holding the head; 0 elsewhere). */
double executor_run(Executor *e, const Action *actions, int n, const int *ids, const int *targets, int B, int T, float dloss);
void executor_free(Executor *e);
