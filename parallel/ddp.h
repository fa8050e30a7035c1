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
 * updated compute-dtype weights gives every rank the whole model again. */
#pragma once
#include "../model/llama.h"
#include "schedule.h"

typedef struct {
    size_t offset, count;       /* elements of the parameter buffer: whole units */
    BucketReady ready;          /* the unit that completes last: where its reduction starts */
    size_t *counts;             /* (dp) zero=1: each rank's piece, back to back from offset */
    size_t piece_offset;        /* zero=1: where this rank's piece starts in the model's buffer */
    size_t shard_at;            /* zero=1: where it sits in the shard buffers */
    CommHandle reduce, gather;  /* in flight */
} Bucket;

/* Where a piece boundary may fall (train/optimizer.h's optimizer_cut). */
typedef size_t (*CutRule)(const void *ctx, size_t offset);

typedef struct {
    double bucket_mb;           /* fp32 gradients per bucket */
    int zero;                   /* ZeRO-1 (only with more than one data-parallel rank) */
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
} Ddp;

/* Buckets (and zero=1 pieces) for the model's layout m; nothing allocated. */
void ddp_plan(Ddp *d, const Model *m, const Comm *comm, const DdpOptions *o);
/* The plan, and its buffers on m's backend (zero=1 shards, the wire copy). */
void ddp_create(Ddp *d, Model *m, const Comm *comm, const DdpOptions *o);
void ddp_free(Ddp *d);
/* Bytes of those buffers (the memory plan). */
size_t ddp_buffer_bytes(const Ddp *d, const Backend *be);
/* Schedule actions. */
void ddp_reduce_start(Ddp *d, int b);
void ddp_reduce_wait(Ddp *d, int b);
void ddp_gather_start(Ddp *d, int b);
void ddp_gather_wait(Ddp *d, int b);
/* zero=1: the master shard (and its compute-dtype copy) from the model's fp32
 * values on the host (n_params), after init or resume. */
void ddp_load_master(Ddp *d, const float *host);
/* zero=1: data-parallel rank r's view — its pieces back to back, as its shards
 * and optimizer hold them — to and from a host array laid out like the model's buffer. */
size_t ddp_view_size(const Ddp *d, int r);
void ddp_view_to_full(const Ddp *d, int r, const float *view, float *full);
void ddp_full_to_view(const Ddp *d, int r, const float *full, float *view);
