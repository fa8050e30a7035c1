/* parallel/schedule.h — a training step as data: for each pipeline stage, the
 * list of actions its ranks run, in order.
 *
 * The idea: how a step interleaves micro-batches, moves activations between
 * stages and overlaps the gradient reduction with the backward is decided
 * once, by a builder, into a plain list; one executor (parallel/executor.h)
 * runs that list on the model, and `build/train schedule` prints and checks
 * the very same list without a model. A pipeline builder (1F1B, GPipe,
 * interleaved 1F1B) lays out forwards, backwards and the send/receive that
 * join stages; the data-parallel pass then splits the last backward of each
 * chunk where a bucket of gradients becomes complete and starts that bucket's
 * reduction right there, so it runs while the backward goes on.
 *
 * Consecutive SEND/RECV actions form one group that is posted together and
 * completes together (an NCCL group, MPI's nonblocking calls and one wait), so
 * their order within the group cannot deadlock; schedule_check proves that
 * the groups of all stages complete, by simulation. */
#pragma once
#include <stddef.h>
#include <stdio.h>

enum { PP_1F1B, PP_GPIPE, PP_INTERLEAVED };   /* config key pp_schedule: 1f1b|gpipe|interleaved */

typedef enum {
    ACT_FORWARD,      /* mb, chunk: [embedding], the chunk's layers, [head, loss and the head's backward] */
    ACT_BACKWARD,     /* mb, chunk, steps [from, to) of the chunk's backward (model_backward_chunk) */
    ACT_SEND_ACT,     /* mb, chunk: the chunk's output to the stage that runs the next chunk */
    ACT_RECV_ACT,     /* mb, chunk: the chunk's input from the stage that runs the previous chunk */
    ACT_SEND_GRAD,    /* mb, chunk: d(chunk input) to the stage of the previous chunk */
    ACT_RECV_GRAD,    /* mb, chunk: d(chunk output) from the stage of the next chunk */
    ACT_REDUCE,       /* bucket: start the data-parallel reduction of a bucket of gradients */
    ACT_REDUCE_WAIT,  /* bucket: its reduction is done */
    ACT_OPTIMIZER,    /* global-norm clip and the update */
    ACT_GATHER,       /* bucket: ZeRO-1 — start the all-gather of the updated weights */
    ACT_GATHER_WAIT,  /* bucket: the gathered weights are in place */
    ACT_KINDS
} ActionKind;
extern const char *const action_names[ACT_KINDS];

typedef struct {
    ActionKind kind;
    int mb, chunk;      /* micro-batch, and this stage's chunk (model/llama.h) */
    int from, to;       /* ACT_BACKWARD: backward steps [from, to) */
    int bucket;         /* ACT_REDUCE, ACT_GATHER and their waits */
    int peer;           /* SEND/RECV: the pipeline stage at the other end */
    int slot;           /* the activation slot of (mb, chunk) on this stage */
    int frees_slot;     /* 1: the slot is free after this action */
} Action;

typedef struct {
    int kind;           /* PP_* */
    int stages;         /* p: pipeline stages */
    int micro_batches;  /* m: micro-batches per step (per data-parallel rank) */
    int chunks;         /* v: chunks per stage (1 unless interleaved) */
    int forward_only;   /* evaluation: no backward, no optimizer */
    int *steps;         /* (stages * chunks) backward steps of each chunk (model_backward_steps) */
    Action **list;      /* (stages) each stage's actions */
    int *n, *cap;       /* (stages) */
    int *slots;         /* (stages) activation slots each stage needs: its most micro-batches in flight */
} Schedule;

/* The pipeline part of a step: p stages, m micro-batches, v chunks per stage;
 * steps (p*v, stage-major) gives each chunk's backward steps. Dies in words on
 * a layout the schedule cannot run (m < p; interleaved with m not a multiple of p). */
void schedule_build(Schedule *s, int kind, int p, int m, int v, const int *steps);
/* Forwards only (evaluation): every micro-batch through every chunk, with its sends and receives. */
void schedule_build_forward(Schedule *s, int p, int m, int v);
/* The data-parallel pass for one stage: units_done[k] = (chunk, step) after
 * which bucket k's gradients are complete (step -1: the chunk's forward).
 * Splits the last backward of those chunks there and inserts ACT_REDUCE,
 * then the waits, the optimizer and (zero) the all-gathers at the end. With
 * no buckets it only appends the optimizer. */
typedef struct { int chunk, step; } BucketReady;
void schedule_add_data_parallel(Schedule *s, int stage, const BucketReady *ready, int n_buckets, int zero);
/* Gives each (micro-batch, chunk) of each stage a slot from its first action
 * to its last and records the most each stage holds at once. */
void schedule_assign_slots(Schedule *s);
void schedule_free(Schedule *s);

/* Action lists are sound: every send meets its receive in the same order on
 * the same pair of stages, every action finds what it needs done before it,
 * and the groups complete without deadlock when run (a simulation with
 * forward = 1 and backward = 2 time units a chunk). Returns 0, or -1 with the
 * first problem in words in err. Fills the simulated timeline's figures. */
typedef struct {
    double makespan;        /* simulated step time (forward of a chunk = 1) */
    double bubble;          /* mean over stages of idle / makespan */
    double *busy, *idle;    /* (stages) */
    double *start, *end;    /* (stages * max actions) simulated times of each action */
    int max_actions;
} ScheduleSim;
int schedule_check(const Schedule *s, ScheduleSim *sim, char *err, size_t err_size);
void schedule_sim_free(ScheduleSim *sim);
/* Each stage's timeline as text columns (a forward one column, a backward
 * two) and where its bucket reductions start; and the same as an SVG picture
 * (returns -1 if the file cannot be written). From schedule_check's times. */
void schedule_print(const Schedule *s, const ScheduleSim *sim, FILE *out);
int schedule_write_svg(const Schedule *s, const ScheduleSim *sim, const char *path, const char *title);
/* The textbook bubble of the schedule: (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1) — idle over step time. */
double schedule_bubble_formula(const Schedule *s);
