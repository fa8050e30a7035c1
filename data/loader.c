/* data/loader.c — shard discovery (glob / comma list), per-epoch shuffle, disjoint
 * per-rank sampling, resumable position, each sample's tokens checked (data/shard.h). */
#include "loader.h"
#include "../common/util.h"
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)

static int add_paths(char ***paths, int *n, const char *pattern, char *err, size_t err_size) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        snprintf(err, err_size, "no token shard matches '%s'\n  hint: run `build/train prepare` first, or point train_data/val_data "
                 "at your .bin shards", pattern);
        globfree(&g);
        return -1;
    }
    if (rc != 0) { snprintf(err, err_size, "cannot expand the shard pattern '%s'", pattern); globfree(&g); return -1; }
    char **grown = realloc(*paths, sizeof(char *) * (*n + g.gl_pathc));
    if (!grown) die("out of host memory listing shards");
    *paths = grown;
    for (size_t i = 0; i < g.gl_pathc; i++) (*paths)[(*n)++] = strdup(g.gl_pathv[i]);   /* glob sorts */
    globfree(&g);
    return 0;
}

int loader_try_open(Loader *l, const char *pattern, int B, int T, int dp_rank, int dp_size, uint64_t seed, int shuffle,
                    int vocab_size, char *err, size_t err_size) {
    memset(l, 0, sizeof *l);
    char **paths = NULL;
    int n = 0;
    if (B < 1 || T < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || vocab_size < 0)
        FAIL("loader: batch_size %d, seq_len %d, rank %d of %d, vocab_size %d: each must be positive (the rank below the ranks)",
             B, T, dp_rank, dp_size, vocab_size);
    char *list = strdup(pattern), *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (add_paths(&paths, &n, p, err, err_size) != 0) { free(list); goto fail; }
    free(list);
    if (n == 0) FAIL("no token shards given (empty train_data/val_data)");
    l->shards = callocCheck(n, sizeof(Shard));
    l->first_sample = callocCheck(n + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
        if (shard_open(&l->shards[i], paths[i], err, err_size) != 0) goto fail;
        l->n_shards = i + 1;
        int64_t samples = l->shards[i].n_tokens > T ? (l->shards[i].n_tokens - 1) / T : 0;
        if (!add_i64(l->first_sample[i], samples, &l->first_sample[i + 1])) FAIL("'%s': more samples than a loader can count", pattern);
    }
    l->n_samples = l->first_sample[n];
    l->B = B; l->T = T; l->dp_rank = dp_rank; l->dp_size = dp_size;
    l->seed = seed; l->shuffle = shuffle; l->vocab_size = vocab_size;
    if (l->n_samples < (int64_t)B * dp_size)
        FAIL("'%s' holds %lld samples of seq_len+1 = %lld tokens, fewer than one step needs (batch_size*dp = %lld)\n"
             "  hint: use more text, or a smaller batch_size or seq_len", pattern, (long long)l->n_samples, (long long)T + 1,
             (long long)B * dp_size);
    l->order = mallocCheck(sizeof(int64_t) * (size_t)l->n_samples);
    l->order_epoch = -1;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    return 0;
fail:
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    loader_close(l);
    return -1;
}

void loader_open(Loader *l, const char *pattern, int B, int T, int dp_rank, int dp_size, uint64_t seed, int shuffle, int vocab_size) {
    char err[2600];
    if (loader_try_open(l, pattern, B, T, dp_rank, dp_size, seed, shuffle, vocab_size, err, sizeof err) != 0) die("%s", err);
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

int loader_try_fetch(Loader *l, int64_t position, int *ids, int *targets, char *err, size_t err_size) {
    if (l->order_epoch != l->state.epoch) build_order(l);
    for (int b = 0; b < l->B; b++) {
        int64_t sample = l->order[position + b];
        int s = 0;
        while (sample >= l->first_sample[s + 1]) s++;
        Shard *sh = &l->shards[s];
        int64_t start = (sample - l->first_sample[s]) * l->T;
        if (shard_check(sh, start, (int64_t)l->T + 1, err, err_size) != 0) return -1;
        for (int t = 0; t <= l->T; t++) {
            uint32_t tok = shard_token(sh, start + t);
            if (tok > (uint32_t)INT32_MAX) {   /* no vocabulary is that large: it would be a negative id */
                snprintf(err, err_size, "shard '%s' holds token id %u at position %lld, past any vocabulary (2^31)\n"
                         "  hint: the shard is damaged; regenerate it with `build/train prepare`", sh->path, tok, (long long)(start + t));
                return -1;
            }
            if (l->vocab_size && tok >= (uint32_t)l->vocab_size) {
                snprintf(err, err_size, "shard '%s' holds token id %u at position %lld, but vocab_size is %d\n"
                         "  hint: the shard was made with a larger vocabulary; set vocab_size=0 to take it from the shard",
                         sh->path, tok, (long long)(start + t), l->vocab_size);
                return -1;
            }
            if (t < l->T) ids[b * l->T + t] = (int)tok;
            if (t > 0) targets[b * l->T + t - 1] = (int)tok;
        }
    }
    return 0;
}

void loader_fetch(Loader *l, int64_t position, int *ids, int *targets) {
    char err[2600];
    if (loader_try_fetch(l, position, ids, targets, err, sizeof err) != 0) die("%s", err);
}

int loader_try_next_step(Loader *l, int k, int *ids, int *targets, char *err, size_t err_size) {
    int64_t stride = (int64_t)l->B * l->dp_size, step = stride * k;
    if (step > l->n_samples) {
        snprintf(err, err_size, "one step takes %lld samples (%d micro-batches x %d ranks x batch_size %d), but the shards hold %lld\n"
                 "  hint: use more text, or a smaller total_batch_tokens", (long long)step, k, l->dp_size, l->B, (long long)l->n_samples);
        return -1;
    }
    if (l->state.cursor + step > l->n_samples) { l->state.epoch++; l->state.cursor = 0; }
    size_t BT = (size_t)l->B * l->T;
    for (int j = 0; j < k; j++)
        if (loader_try_fetch(l, l->state.cursor + j * stride + (int64_t)l->dp_rank * l->B, ids + j * BT, targets + j * BT, err, err_size) != 0)
            return -1;
    l->state.cursor += step;
    return 0;
}

void loader_next_step(Loader *l, int k, int *ids, int *targets) {
    char err[2600];
    if (loader_try_next_step(l, k, ids, targets, err, sizeof err) != 0) die("%s", err);
}

int loader_try_next(Loader *l, int *ids, int *targets, char *err, size_t err_size) { return loader_try_next_step(l, 1, ids, targets, err, err_size); }
void loader_next(Loader *l, int *ids, int *targets) { loader_next_step(l, 1, ids, targets); }

void loader_reset(Loader *l) { l->state.epoch = 0; l->state.cursor = 0; }
LoaderState loader_get_state(const Loader *l) { return l->state; }

int loader_try_set_state(Loader *l, LoaderState s, char *err, size_t err_size) {
    /* past the end is legal (train_data may change on resume): the next batch starts the next epoch */
    if (s.epoch < 0 || s.epoch > INT64_MAX / 2 || s.cursor < 0 || s.cursor > INT64_MAX / 2) {   /* +1 epoch a step cannot overflow */
        snprintf(err, err_size, "data position epoch %lld, sample %lld is not a position (negative, or past 2^62)\n"
                 "  hint: the checkpoint is damaged; move its folder aside to fall back to an earlier one",
                 (long long)s.epoch, (long long)s.cursor);
        return -1;
    }
    l->state = s;
    return 0;
}

void loader_set_state(Loader *l, LoaderState s) {
    char err[512];
    if (loader_try_set_state(l, s, err, sizeof err) != 0) die("%s", err);
}

int loader_header_vocab(const Loader *l) {
    int v = 0;
    for (int i = 0; i < l->n_shards; i++) if (l->shards[i].vocab_size > v) v = l->shards[i].vocab_size;
    return v;
}
