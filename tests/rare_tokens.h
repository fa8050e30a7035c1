/* tests/rare_tokens.h — issue 52's rare-token shard, shared by tests/test_adamw8bit_drift.c and
 * bench/bench_q8_drift.c: a 512-token vocabulary whose tokens 0..255 follow a Markov chain (4
 * successors each, p = .6 .2 .1 .1) and whose tokens 256..511 appear exactly once each, at random
 * places (never the last token, which is no window's input). With n = steps * B * T + 1 tokens and
 * windows of T, one epoch is the run: each rare token is the input of exactly one step. */
#pragma once
#include "../common/util.h"
#include "../data/shard.h"
#include <stdint.h>
#include <stdlib.h>

#define RARE_VOCAB 512
#define RARE_FIRST 256   /* tokens RARE_FIRST..RARE_VOCAB-1 appear once each */

static inline void rare_token_shard(const char *path, int64_t n) {
    uint32_t *tok = mallocCheck(n * sizeof(uint32_t)), succ[RARE_FIRST][4];
    Rng r;
    rng_seed(&r, 52);
    for (int a = 0; a < RARE_FIRST; a++) for (int j = 0; j < 4; j++) succ[a][j] = (uint32_t)(rng_u64(&r) % RARE_FIRST);
    tok[0] = 0;
    for (int64_t i = 1; i < n; i++) {
        float u = rng_uniform(&r);
        tok[i] = succ[tok[i - 1]][u < 0.6f ? 0 : u < 0.8f ? 1 : u < 0.9f ? 2 : 3];
    }
    for (int t = RARE_FIRST; t < RARE_VOCAB; t++) {   /* at a place holding a chain token */
        int64_t at;
        do at = (int64_t)(rng_u64(&r) % (uint64_t)(n - 1)); while (tok[at] >= RARE_FIRST);
        tok[at] = (uint32_t)t;
    }
    shard_write(path, tok, n, RARE_VOCAB);
    free(tok);
}
