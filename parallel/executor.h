/* parallel/executor.h — runs one stage's action list (parallel/schedule.h) on
 * the model, the communicator and data parallelism.
 *
 * The idea: the executor has no opinion about order. It walks the list: a
 * forward or backward calls the model on the action's slot, a run of
 * consecutive sends and receives becomes one posted-together group, a bucket
 * action starts or finishes a reduction, the optimizer action calls back into
 * the trainer; a wait finishes one message of a group posted before. It keeps a log of what it ran and when (seconds from the start
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

/* Where the last run's time went, from the device's own clock (events on its
 * stream; the host clock on a CPU). The pieces and the run's span add up. */
typedef struct {
    double span_s;              /* from the first action's start to the last's end */
    double compute_s;           /* forwards and backwards, less the blocking collectives inside them */
    double exposed_s;           /* communication the compute waited for: starting and waiting for buckets and gathers, the tp sums */
    double bubble_s;            /* posting sends and receives between pipeline stages and waiting for them: mostly for a neighbour */
    double optimizer_s;
    double other_s;             /* anything else (none today) */
    double comm_busy_s;         /* the transport's account: every collective in flight, hidden or not */
} ExecSplit;

typedef struct {
    Model *model;
    const Comm *comm;
    Ddp *ddp;
    void (*optimizer)(void *ctx);   /* ACT_OPTIMIZER */
    void *ctx;
    ExecEvent *log;             /* the last run's actions, in order */
    int n_log, cap_log;
    ExecSplit split;            /* the last run's time */
    void **events;              /* (2 * cap_events) a start and an end event per action */
    int cap_events;
    CommHandle *handles;        /* (4 x table_mb x table_chunks) the run's messages in flight: a send/recv kind, micro-batch, chunk */
    size_t cap_handles;
    int table_mb, table_chunks;
} Executor;

/* Runs actions[0..n) of this stage for one step whose micro-batch k is
 * ids/targets + k*B*T (host). dloss: the loss gradient per token (0: no
 * backward). Returns the sum of the per-token losses this stage computed (the
 * stage holding the head; 0 elsewhere), read back once the step's work is
 * done (model_take_losses): nothing in the step waits for them. */
double executor_run(Executor *e, const Action *actions, int n, const int *ids, const int *targets, int B, int T, float dloss);
void executor_free(Executor *e);
