/* parallel/schedule.h — a training step as data: for each pipeline stage, the
 * list of actions its ranks run, in order.
 *
 * The idea: how a step interleaves micro-batches, moves activations between
 * stages and overlaps the gradient reduction with the backward is decided
 * once, by a builder, into a plain list; one executor (parallel/executor.h)
 * runs that list on the model, and `build/train schedule` prints and checks
 * the very same list without a model. A pipeline builder (1F1B, GPipe,
 * interleaved 1F1B) lays out forwards, backwards and the send/receive that
 * join stages (zb1, the zero-bubble ZB-H1, splits each backward into B, the
 * input gradients the previous stage waits for, and W, the weight gradients
 * nobody waits for, and places W in the bubbles; zbv, ZB-V, does the same over
 * two chunks a stage in V order); the data-parallel pass then
 * splits the last backward (zb1: the last W) of each
 * chunk where a bucket of gradients becomes complete and starts that bucket's
 * reduction right there, so it runs while the backward goes on.
 *
 * Consecutive SEND/RECV actions form one group that is posted together (an
 * NCCL group, MPI's nonblocking calls), so their order within the group cannot
 * deadlock; posting never blocks. An ACT_WAIT finishes one message where its
 * data is first needed: a receive just before the compute that reads it, a
 * send just before its buffer is written again (the pair's backward, or the
 * next pair to take its activation slot), so a stage runs on while its sends
 * wait for a busy neighbour. schedule_check proves by simulation that every
 * wait returns: with each message done once both sides posted it (MPI), and
 * with each stage's groups done one after another in posting order in each
 * of NCCL's lanes (comm_p2p_lane), which can only be later. A message between two chunks of
 * the same stage (zbv's turn at the bottom of the V) is a copy at the send. */
#pragma once
#include <stddef.h>
#include <stdio.h>

enum { PP_1F1B, PP_GPIPE, PP_INTERLEAVED, PP_ZB1, PP_ZBV };   /* config key pp_schedule: 1f1b|gpipe|interleaved|zb1|zbv */
/* config key zb1_memory: what a zb1 stage may hold, from a micro-batch's forward to its W. 1f1b: stage st 1F1B's own p - st
 * (each stage idle (p-1)(F+B)); busiest: every stage 1F1B's busiest stage's p (ZB-H1's formula, (p-1)(F+B-W) idle). */
enum { ZB1_MEMORY_1F1B, ZB1_MEMORY_BUSIEST };

typedef enum {
    ACT_FORWARD,      /* mb, chunk: [embedding], the chunk's layers, [head, loss and the head's backward];
                       * to > 0 (zero=3): only forward steps [from, to) (model_forward_chunk_steps) */
    ACT_BACKWARD,     /* mb, chunk, steps [from, to) of the chunk's backward (model_backward_chunk) */
    ACT_BACKWARD_INPUT,  /* zb1: mb, chunk, steps [from, to) of B, the backward's input gradients (model_backward_input_chunk) */
    ACT_BACKWARD_WEIGHT, /* zb1: mb, chunk, steps [from, to) of W, its weight gradients (model_backward_weight_chunk) */
    ACT_SEND_ACT,     /* mb, chunk: the chunk's output to the stage that runs the next chunk */
    ACT_RECV_ACT,     /* mb, chunk: the chunk's input from the stage that runs the previous chunk */
    ACT_SEND_GRAD,    /* mb, chunk: d(chunk input) to the stage of the previous chunk */
    ACT_RECV_GRAD,    /* mb, chunk: d(chunk output) from the stage of the next chunk */
    ACT_REDUCE,       /* bucket: start the data-parallel reduction of a bucket of gradients */
    ACT_REDUCE_WAIT,  /* bucket: its reduction is done */
    ACT_OPTIMIZER,    /* global-norm clip and the update */
    ACT_GATHER,       /* bucket: ZeRO-1/2 — start the all-gather of the updated weights; ZeRO-3 — of a unit's weights into its place */
    ACT_GATHER_WAIT,  /* bucket: the gathered weights are in place */
    ACT_FREE,         /* bucket: ZeRO-3 — its unit's gathered weights are not used again until the next gather */
    ACT_WAIT,         /* mb, chunk, msg: the send or receive of kind msg of (mb, chunk) is done (its data there, its buffer free) */
    ACT_KINDS
} ActionKind;
extern const char *const action_names[ACT_KINDS];
/* A forward, backward, B or W: work on the model (the kinds before the sends and receives). */
static inline int action_is_compute(ActionKind k) { return k <= ACT_BACKWARD_WEIGHT; }
/* The action that writes weight gradients in this schedule's backward: W when it splits the backward, else the backward. */
static inline int schedule_splits_backward(int kind) { return kind == PP_ZB1 || kind == PP_ZBV; }
/* The config key's word for a schedule kind. */
static inline const char *schedule_name(int kind) {
    static const char *const names[] = {"1f1b", "gpipe", "interleaved", "zb1", "zbv"};
    return kind >= 0 && kind <= PP_ZBV ? names[kind] : "?";
}
/* Chunks a stage runs: interleaved's pp_virtual, zbv's 2, else 1. */
static inline int schedule_chunks(int kind, int pp_virtual) { return kind == PP_INTERLEAVED ? pp_virtual : kind == PP_ZBV ? 2 : 1; }
/* The model's virtual stage (its chunks in forward order, parallel/partition.h) that chunk c of stage st holds:
 * c*p + st (interleaved), zbv's V: st going down, 2p-1-st coming back; and the stage of virtual stage vs. */
static inline int schedule_virtual_stage(int kind, int p, int st, int c) { return kind == PP_ZBV && c == 1 ? 2 * p - 1 - st : c * p + st; }
static inline int schedule_stage_of(int kind, int p, int vs) { return kind == PP_ZBV && vs >= p ? 2 * p - 1 - vs : vs % p; }

typedef struct {
    ActionKind kind;
    int mb, chunk;      /* micro-batch, and this stage's chunk (model/llama.h) */
    int from, to;       /* ACT_BACKWARD: backward steps [from, to) */
    int bucket;         /* ACT_REDUCE, ACT_GATHER and their waits */
    int peer;           /* SEND/RECV: the pipeline stage at the other end */
    int slot;           /* the activation slot of (mb, chunk) on this stage */
    int keep;           /* split backward, on B and W: the store of what W reads (model/llama.h WKeep), held from B to W */
    int frees_slot;     /* 1: the slot is free after this action */
    int msg;            /* ACT_WAIT: the kind of the message (ACT_SEND_ACT .. ACT_RECV_GRAD) it finishes */
    int dest_slot;      /* a send to this stage itself (zbv's turn): the receiving (mb, chunk)'s slot, copied into at the send */
    /* zero=2/3, on ACT_FORWARD and ACT_BACKWARD (-1: none): the bucket whose gathered weights it reads (zero=3), and
     * the bucket whose gradient it writes — its place opened first, with the sum of earlier micro-batches when accumulate */
    int reads, writes, accumulate;
} Action;

typedef struct {
    int kind;           /* PP_* */
    int stages;         /* p: pipeline stages */
    int micro_batches;  /* m: micro-batches per step (per data-parallel rank) */
    int chunks;         /* v: chunks per stage (1 unless interleaved) */
    int forward_only;   /* evaluation: no backward, no optimizer */
    int split;          /* the backward runs as B and W (schedule_splits_backward) */
    int *steps;         /* (stages * chunks) backward steps of each chunk (model_backward_steps) */
    Action **list;      /* (stages) each stage's actions */
    int *n, *cap;       /* (stages) */
    int *slots;         /* (stages) activation slots each stage needs: its most micro-batches in flight */
    int *keeps;         /* (stages) split: W stores each stage needs, its most (micro-batch, chunk)s between B and W at once */
    int zero;           /* 2 or 3: schedule_add_zero made the data-parallel part */
    int waits;          /* schedule_assign_slots placed the waits */
    int zb_cap;         /* zb1/zbv: the micro-batches a stage may hold that their order was found with (parallel/schedule_zb.c) */
    int zb1_memory;     /* zb1: ZB1_MEMORY_1F1B or ZB1_MEMORY_BUSIEST (config key zb1_memory) */
    int *fsteps;        /* (stages * chunks) zero=3: forward steps of each chunk (model_forward_steps); else NULL */
    int *n_buckets;     /* (stages) zero=2/3 */
    int **place;        /* (stages) x (n_buckets) zero=2/3: the place (parallel/ddp.h DDP_PLACE_*) of each bucket */
    size_t **elements;  /* (stages) x (n_buckets) zero=2/3: its unit's parameters */
} Schedule;

/* The pipeline part of a step: p stages, m micro-batches, v chunks per stage;
 * steps (p*v, stage-major) gives each chunk's backward steps. Dies in words on
 * a layout the schedule cannot run (m < p; interleaved with m not a multiple of p).
 * PP_ZB1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", ZB-H1): 1F1B's
 * warm-up and order with each backward split into B and W, the W's put off into
 * the time a stage would wait; zb1_memory (ZB1_MEMORY_*) bounds what each stage
 * holds until its W. PP_ZBV (ZB-V): two chunks a stage in V order; both orders
 * from parallel/schedule_zb.c; v is 2 for zbv.
 * Then schedule_assign_slots places the slots and the waits. */
void schedule_build(Schedule *s, int kind, int p, int m, int v, const int *steps, int zb1_memory);
/* Forwards only (evaluation): every micro-batch through every chunk, with its sends and receives; kind gives
 * the chunks' places (zbv's V; interleaved with v chunks; else one). */
void schedule_build_forward(Schedule *s, int kind, int p, int m, int v);
/* The data-parallel pass for one stage: units_done[k] = (chunk, step) after
 * which bucket k's gradients are complete (step -1: the chunk's forward).
 * Splits the last backward of those chunks there and inserts ACT_REDUCE,
 * then the waits, the optimizer and (zero) the all-gathers at the end. With
 * no buckets it only appends the optimizer. */
typedef struct { int chunk, step; } BucketReady;
void schedule_add_data_parallel(Schedule *s, int stage, const BucketReady *ready, int n_buckets, int zero);
/* ZeRO-2/3's data-parallel pass for one stage, instead of
 * schedule_add_data_parallel (docs/zero.md): each bucket is one unit. Every
 * backward is cut into its steps (zero=3: every forward too); the action that
 * writes a bucket's gradient is followed by its ACT_REDUCE, whose wait comes
 * just before the next writer of the same place (or before the optimizer).
 * zero=3: before each action that reads a unit's weights, ACT_GATHER_WAIT,
 * with the gather started one use ahead — before the previous use's compute —
 * when the place is free by then; ACT_FREE after the last use of a gather.
 * zero=2 ends with ZeRO-1's all-gather of the updated weights; zero=3 needs
 * none (the next step gathers from the shards). Also for forward-only
 * (evaluation) schedules: gathers and frees only. */
typedef struct {
    int n_buckets;
    const int *place;            /* (n_buckets) DDP_PLACE_* */
    const size_t *elements;      /* (n_buckets) */
    int max_steps;               /* the row length of the tables below (chunks rows) */
    const int *forward_steps;    /* (chunks) */
    const int *forward_reads;    /* forward step j of chunk c: the bucket whose weights it reads */
    const int *backward_reads;   /* backward step j: the bucket whose weights it reads, -1: none (the embedding's) */
    const int *backward_writes;  /* backward step j: the bucket whose gradient it writes */
    int head_bucket;             /* the head's bucket on this stage (its gradient is written by the forward), -1: none */
} ZeroUnits;
void schedule_add_zero(Schedule *s, int stage, const ZeroUnits *z, int zero);
/* Gives each (micro-batch, chunk) of each stage a slot from its first action
 * to its last (a receive from the stage itself: from the send that copies into
 * it) and records the most each stage holds at once; a split backward also a W
 * store (keep) from its first B to its last W, and the most at once. Then
 * places each message's ACT_WAIT. Once a schedule: last, after the other passes. */
void schedule_assign_slots(Schedule *s);
void schedule_free(Schedule *s);

/* Action lists are sound: every send meets its receive in the same order on
 * the same pair of stages, every action finds what it needs done (and waited
 * for) before it, no send's buffer is written before its wait, and every wait
 * returns when run (a simulation with forward = 1 and backward = 2 time units
 * a chunk; B = W = 1 where it is split), both as MPI runs the messages and as
 * NCCL's lanes do. Returns 0, or -1 with the first problem in words
 * in err. Fills the simulated timeline's figures (MPI's). */
typedef struct {
    double makespan;        /* simulated step time (forward of a chunk = 1) */
    double makespan_fifo, bubble_fifo;   /* the same on NCCL (each lane's groups one after another, comm_p2p_lane) */
    size_t *gathered_high;  /* (stages) zero=3: the most parameters held gathered at once (in flight or ready) */
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
/* The same with a second schedule drawn under it at the same time scale (the zero-bubble ones beside 1F1B); b NULL: alone. */
int schedule_write_svg_beside(const Schedule *s, const ScheduleSim *sim, const char *title, const Schedule *b, const ScheduleSim *bsim,
                              const char *btitle, const char *path);
/* ZeRO-2/3: per stage, its reductions and (zero=3) gathers, frees, how many weight reads were gathered a compute
 * ahead and the most parameters held gathered at once (x param_bytes, the compute dtype's size). Nothing otherwise. */
void schedule_print_zero(const Schedule *s, const ScheduleSim *sim, size_t param_bytes, FILE *out);
/* Every stage's whole action list, a line per compute with what prepares and follows it. */
void schedule_print_actions(const Schedule *s, FILE *out);
/* The textbook bubble of the schedule: (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1) — idle over step time;
 * zb1 (ZB-H1 with F = B = W): (p-1)/(3m+p-1), each stage idle (p-1)(F+B-W) of m(F+B+W) + (p-1)(F+B-W);
 * zbv (ZB-V, F = B = W a chunk): (p-1)/(6m+p-1), each stage idle only the p-1 chunk-forwards the V takes to fill
 * (the paper's (p-1)(F+B-2W) = 0 beyond them). */
double schedule_bubble_formula(const Schedule *s);
