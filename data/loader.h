/* data/loader.h — gives each data-parallel rank its own micro-batches of token windows.
 *
 * The idea: the shards (any number, any size, 64-bit offsets) are cut into
 * samples of T+1 tokens starting at multiples of T (inputs = first T, targets =
 * the next T). Each epoch visits every sample once in an order shuffled from
 * (seed, epoch). A call to loader_next takes the next dp_size * B positions of
 * that order: rank r gets positions r*B .. r*B+B-1 of them, so ranks never see
 * the same sample in a step. The position is just (epoch, cursor): saving and
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
/* Fill ids and targets, each (B,T) int32. Fails on a chunk that fails its
 * checksum (data/shard.h) or a token id not below vocab_size. */
int loader_try_next(Loader *l, int *ids, int *targets, char *err, size_t err_size);
void loader_next(Loader *l, int *ids, int *targets);
void loader_reset(Loader *l);
LoaderState loader_get_state(const Loader *l);
/* A saved position (from a checkpoint): epoch >= 0 and cursor >= 0; a cursor
 * past these shards' samples (the data changed) starts the next epoch. */
int loader_try_set_state(Loader *l, LoaderState s, char *err, size_t err_size);
void loader_set_state(Loader *l, LoaderState s);
/* The largest vocab_size recorded in the shards' headers (0 if none records one). */
int loader_header_vocab(const Loader *l);
