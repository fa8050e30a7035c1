/* parallel/ddp.h — data parallelism: gradients reduced in buckets while the
 * backward still runs, and ZeRO-1.
 *
 * The idea (PyTorch DDP's, llm.c's ZeRO-1): the parameter buffer is cut, from
 * its end backwards, into buckets of whole units (model/llama.h) of about
 * bucket_mb; the backward completes the units in that order, so the reduction
 * of a bucket starts as soon as its last unit is done (the schedule's
 * ACT_REDUCE, parallel/schedule.h) and runs while the backward goes on. Only
 * the last micro-batch of a step reduces: earlier ones just accumulate.
 *
 * zero=1: every bucket is cut into dp pieces, one per data-parallel rank.
 * Instead of an all-reduce, a reduce-scatter leaves each rank the sum of its
 * own pieces; the rank keeps the fp32 master weights and the optimizer state
 * of its pieces only (the shard), updates them, and an all-gather of the
 * updated compute-dtype weights gives every rank the whole model again.
 *
 * zero=2 (docs/zero.md): every unit is a bucket of its own, and no rank keeps
 * a whole gradient buffer. A unit's gradient is written into a PLACE — one for
 * the embedding, one for the head, two for the layers, taken in turn — and
 * reduce-scattered from there into the rank's fp32 gradient shard as soon as
 * the action that writes it ends, every micro-batch (the schedule's
 * ACT_REDUCE after the action; its wait comes before the place's next
 * writer). A later micro-batch opens the place with this rank's piece holding
 * the sum so far, so the reduce-scatter accumulates. zero=3 also keeps no
 * weights: before each forward and backward step that reads a unit, its
 * weights are all-gathered from the dp ranks' shards into the unit's place
 * (ACT_GATHER, one unit ahead of its use; ACT_GATHER_WAIT just before it) and
 * released after its last use (ACT_FREE). */
#pragma once
#include "../model/llama.h"
#include "schedule.h"

typedef struct {
    size_t offset, count;       /* elements of the parameter buffer: whole units */
    BucketReady ready;          /* the unit that completes last: where its reduction starts */
    size_t *counts;             /* (dp) zero=1: each rank's piece, back to back from offset */
    size_t piece_offset;        /* zero=1: where this rank's piece starts in the model's buffer */
    size_t shard_at;            /* zero=1: where it sits in the shard buffers */
    int unit, place;            /* zero=2/3: the one unit it holds, and the place (DDP_PLACE_*) of its gradient and gathered weights */
    CommHandle reduce, gather;  /* in flight */
} Bucket;

/* zero=2/3: the places units run in (a rank's units never need more at once: the schedule frees a place before reusing it) */
enum { DDP_PLACE_EMBEDDING, DDP_PLACE_HEAD, DDP_PLACE_LAYER_EVEN, DDP_PLACE_LAYER_ODD, DDP_PLACES };

/* Where a piece boundary may fall (train/optimizer.h's optimizer_cut). */
typedef size_t (*CutRule)(const void *ctx, size_t offset);

typedef struct {
    double bucket_mb;           /* fp32 gradients per bucket */
    int zero;                   /* ZeRO stage 1, 2 or 3 (only with more than one data-parallel rank) */
    int compute_dtype_wire;     /* grad_reduce_dtype=bf16: send the gradients in the compute dtype (bf16), half the bytes */
    CutRule cut;                /* zero: where pieces may be cut */
    const void *cut_ctx;
} DdpOptions;

typedef struct {
    const Comm *comm;
    Model *model;               /* NULL for a plan */
    int zero;
    size_t n_params;            /* the model's buffer */
    int n_buckets;
    Bucket *buckets;            /* buckets[0] ends the buffer: the backward completes it first */
    size_t shard_n;             /* zero=1: elements this rank updates; else n_params */
    float *grad_shard;          /* (shard_n) zero=1: the reduced gradients of my pieces */
    float *master_shard;        /* (shard_n) zero=1: their fp32 master weights */
    void *compute_shard;        /* (shard_n) zero=1 with a compute dtype other than fp32: the updated copy to gather */
    int wire;                   /* the gradients travel in the compute dtype (grad_reduce_dtype=bf16) */
    void *wire_buf;             /* (n_params) wire: the gradients cast down, reduced in place */
    void *wire_shard;           /* (shard_n) wire and zero=1: my reduced pieces, before they are cast up */
    /* zero=2/3: the places, views of one allocation */
    size_t place_count[DDP_PLACES];   /* elements of the largest unit each place takes */
    size_t place_span[DDP_PLACES];    /* zero=3: bytes of its weights place (a unit starts at its alignment mod 256 in a whole copy) */
    int *bucket_of_unit;        /* (n_units) */
    void *place_memory;         /* the allocation */
    float *grad_place[DDP_PLACES];    /* (place_count) fp32 gradients of the unit being written */
    char *weight_place[DDP_PLACES];   /* (place_span bytes) zero=3: the gathered compute-dtype weights */
    int poison;                 /* CPU: a released place is filled with NaN, so a use after ACT_FREE fails the tests */
} Ddp;

/* Buckets (and zero=1 pieces) for the model's layout m; nothing allocated. */
void ddp_plan(Ddp *d, const Model *m, const Comm *comm, const DdpOptions *o);
/* The plan, and its buffers on m's backend (zero=1 shards, the wire copy). */
void ddp_create(Ddp *d, Model *m, const Comm *comm, const DdpOptions *o);
void ddp_free(Ddp *d);
/* Bytes of those buffers (the memory plan), the zero=2/3 places included; and of the places alone. */
size_t ddp_buffer_bytes(const Ddp *d, const Backend *be);
size_t ddp_place_bytes(const Ddp *d);
/* Schedule actions. */
void ddp_reduce_start(Ddp *d, int b);
void ddp_reduce_wait(Ddp *d, int b);
void ddp_gather_start(Ddp *d, int b);
void ddp_gather_wait(Ddp *d, int b);
/* zero=2/3: before the action that writes bucket b's gradient (its one unit):
 * its place zeroed and, accumulate (a later micro-batch), my piece of it set to
 * the sum so far, which the reduce-scatter then adds to. */
void ddp_open_grads(Ddp *d, int b, int accumulate);
/* zero=3: bucket b's gathered weights are not needed until gathered again. */
void ddp_release(Ddp *d, int b);
/* zero=2/3: the place of unit u (DDP_PLACE_*), from the model's layout. */
int ddp_unit_place(const Model *m, int u);
/* zero=1: the master shard (and its compute-dtype copy) from the model's fp32
 * values on the host (n_params), after init or resume. */
void ddp_load_master(Ddp *d, const float *host);
/* zero=1: data-parallel rank r's view — its pieces back to back, as its shards
 * and optimizer hold them — to and from a host array laid out like the model's buffer. */
size_t ddp_view_size(const Ddp *d, int r);
void ddp_view_to_full(const Ddp *d, int r, const float *view, float *full);
void ddp_full_to_view(const Ddp *d, int r, const float *full, float *view);
