/* data/loader.h — gives each data-parallel rank its own micro-batches of token windows.
 *
 * The idea: the shards (any number, any size, 64-bit offsets) are cut into
 * samples of T+1 tokens starting at multiples of T (inputs = first T, targets =
 * the next T). Each epoch visits every sample once in an order shuffled from
 * (seed, epoch). A step of k micro-batches on each of dp_size ranks takes the
 * next k * dp_size * B positions of that order — micro-batch j of rank r gets
 * positions j*dp_size*B + r*B .. +B-1 of them — so ranks never see the same
 * sample, and every layout with the same k * dp_size trains a step on the
 * same set of samples (an epoch ends where a whole step no longer fits, for
 * every layout alike). The position is just (epoch, cursor): saving and
 * restoring it resumes the exact data stream. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "shard.h"

typedef struct { int64_t epoch, cursor; } LoaderState;

typedef struct {
    Shard *shards;
    int n_shards;
    int64_t *first_sample;  /* (n_shards+1) global index of each shard's first sample */
    int64_t n_samples;
    int B, T, dp_rank, dp_size, shuffle;
    uint64_t seed;
    int vocab_size;         /* tokens must be below this */
    int64_t *order;         /* (n_samples) this epoch's permutation */
    LoaderState state;
    int64_t order_epoch;    /* the epoch `order` was built for */
} Loader;

/* pattern: one path, a glob, or a comma-separated list of either. Fails in words
 * on a missing or bad shard, or when the shards hold fewer than dp_size*B samples.
 * (The x_try_y / x_y pairs: common/util.h.) */
int loader_try_open(Loader *l, const char *pattern, int B, int T, int dp_rank, int dp_size, uint64_t seed, int shuffle,
                    int vocab_size, char *err, size_t err_size);
void loader_open(Loader *l, const char *pattern, int B, int T, int dp_rank, int dp_size, uint64_t seed, int shuffle, int vocab_size);
void loader_close(Loader *l);
/* The next step's k micro-batches of this rank: ids and targets, each (k,B,T) int32. Fails on a step
 * larger than the shards, a chunk that fails its checksum (data/shard.h) or a token id not below vocab_size. */
int loader_try_next_step(Loader *l, int k, int *ids, int *targets, char *err, size_t err_size);
void loader_next_step(Loader *l, int k, int *ids, int *targets);
/* One micro-batch: loader_next_step(l, 1, ...). */
int loader_try_next(Loader *l, int *ids, int *targets, char *err, size_t err_size);
void loader_next(Loader *l, int *ids, int *targets);
/* B samples at positions [position, position+B) of the current epoch's order, any rank (evaluation). */
int loader_try_fetch(Loader *l, int64_t position, int *ids, int *targets, char *err, size_t err_size);
void loader_fetch(Loader *l, int64_t position, int *ids, int *targets);
void loader_reset(Loader *l);
LoaderState loader_get_state(const Loader *l);
/* A saved position (from a checkpoint): epoch >= 0 and cursor >= 0; a cursor
 * past these shards' samples (the data changed) starts the next epoch. */
int loader_try_set_state(Loader *l, LoaderState s, char *err, size_t err_size);
void loader_set_state(Loader *l, LoaderState s);
/* The largest vocab_size recorded in the shards' headers (0 if none records one). */
int loader_header_vocab(const Loader *l);
