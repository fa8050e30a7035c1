/* data/loader.c — shard discovery (glob / comma list), per-epoch shuffle, disjoint
 * per-rank sampling, resumable position. */
#include "loader.h"
#include "../common/util.h"
#include <glob.h>
#include <stdlib.h>
#include <string.h>

static void add_paths(char ***paths, int *n, const char *pattern) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0))
        die("no token shard matches '%s'\n  hint: run `build/train prepare` first, or point train_data/val_data at your .bin shards", pattern);
    if (rc != 0) die("cannot expand '%s'", pattern);
    *paths = realloc(*paths, sizeof(char *) * (*n + g.gl_pathc));
    for (size_t i = 0; i < g.gl_pathc; i++) (*paths)[(*n)++] = strdup(g.gl_pathv[i]);   /* glob sorts */
    globfree(&g);
}

void loader_open(Loader *l, const char *pattern, int B, int T, int dp_rank, int dp_size, uint64_t seed, int shuffle, int vocab_size) {
    memset(l, 0, sizeof *l);
    char **paths = NULL;
    int n = 0;
    char *list = strdup(pattern);
    for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) add_paths(&paths, &n, p);
    free(list);
    if (n == 0) die("no token shards given (empty train_data/val_data)");
    l->n_shards = n;
    l->shards = callocCheck(n, sizeof(Shard));
    l->first_sample = callocCheck(n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        shard_open(&l->shards[i], paths[i]);
        int64_t samples = l->shards[i].n_tokens > T ? (l->shards[i].n_tokens - 1) / T : 0;
        l->first_sample[i + 1] = l->first_sample[i] + samples;
        free(paths[i]);
    }
    free(paths);
    l->n_samples = l->first_sample[n];
    l->B = B; l->T = T; l->dp_rank = dp_rank; l->dp_size = dp_size;
    l->seed = seed; l->shuffle = shuffle; l->vocab_size = vocab_size;
    if (l->n_samples < (int64_t)B * dp_size)
        die("'%s' holds %lld samples of seq_len+1 = %d tokens, fewer than one step needs (batch_size*dp = %d)\n"
            "  hint: use more text, or a smaller batch_size or seq_len", pattern, (long long)l->n_samples, T + 1, B * dp_size);
    l->order = mallocCheck(sizeof(int64_t) * l->n_samples);
    l->order_epoch = -1;
}

void loader_close(Loader *l) {
    for (int i = 0; i < l->n_shards; i++) shard_close(&l->shards[i]);
    free(l->shards); free(l->first_sample); free(l->order);
    memset(l, 0, sizeof *l);
}

static void build_order(Loader *l) {
    for (int64_t i = 0; i < l->n_samples; i++) l->order[i] = i;
    if (l->shuffle) {   /* Fisher-Yates from a stream seeded by (seed, epoch) */
        Rng r;
        rng_seed(&r, l->seed * 1000003ull + (uint64_t)l->state.epoch);
        for (int64_t i = l->n_samples - 1; i > 0; i--) {
            int64_t j = (int64_t)(rng_u64(&r) % (uint64_t)(i + 1));
            int64_t t = l->order[i]; l->order[i] = l->order[j]; l->order[j] = t;
        }
    }
    l->order_epoch = l->state.epoch;
}

void loader_fetch(Loader *l, int64_t position, int *ids, int *targets) {
    if (l->order_epoch != l->state.epoch) build_order(l);
    for (int b = 0; b < l->B; b++) {
        int64_t sample = l->order[position + b];
        int s = 0;
        while (sample >= l->first_sample[s + 1]) s++;
        const Shard *sh = &l->shards[s];
        int64_t start = (sample - l->first_sample[s]) * l->T;
        for (int t = 0; t <= l->T; t++) {
            uint32_t tok = shard_token(sh, start + t);
            if (l->vocab_size && tok >= (uint32_t)l->vocab_size)
                die("shard '%s' holds token id %u at position %lld, but vocab_size is %d\n"
                    "  hint: the shard was made with a larger vocabulary; set vocab_size=0 to take it from the shard",
                    sh->path, tok, (long long)(start + t), l->vocab_size);
            if (t < l->T) ids[b * l->T + t] = (int)tok;
            if (t > 0) targets[b * l->T + t - 1] = (int)tok;
        }
    }
}

void loader_next_step(Loader *l, int k, int *ids, int *targets) {
    int64_t stride = (int64_t)l->B * l->dp_size, step = stride * k;
    if (step > l->n_samples)
        die("one step takes %lld samples (%d micro-batches x %d ranks x batch_size %d), but the shards hold %lld\n"
            "  hint: use more text, or a smaller total_batch_tokens", (long long)step, k, l->dp_size, l->B, (long long)l->n_samples);
    if (l->state.cursor + step > l->n_samples) { l->state.epoch++; l->state.cursor = 0; }
    size_t BT = (size_t)l->B * l->T;
    for (int j = 0; j < k; j++)
        loader_fetch(l, l->state.cursor + j * stride + (int64_t)l->dp_rank * l->B, ids + j * BT, targets + j * BT);
    l->state.cursor += step;
}

void loader_next(Loader *l, int *ids, int *targets) { loader_next_step(l, 1, ids, targets); }

void loader_reset(Loader *l) { l->state.epoch = 0; l->state.cursor = 0; }
LoaderState loader_get_state(const Loader *l) { return l->state; }
void loader_set_state(Loader *l, LoaderState s) { l->state = s; }

int loader_header_vocab(const Loader *l) {
    int v = 0;
    for (int i = 0; i < l->n_shards; i++) if (l->shards[i].vocab_size > v) v = l->shards[i].vocab_size;
    return v;
}
