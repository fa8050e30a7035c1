/* tests/test_train.c — the step loop's promises, on tiny models on CPU:
 *   - k micro-batches of B give the same update as one batch of k*B;
 *   - a tiny model overfits one batch to loss < 0.1;
 *   - the LR schedule's warm-up, decay and floor;
 *   - the loader gives data-parallel ranks disjoint samples, and its state resumes the stream. */
#include "test.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char shard_path[256];

static void make_shard(int vocab, int64_t n) {
    snprintf(shard_path, sizeof shard_path, "/tmp/llm3d_test_train_%d.bin", (int)getpid());
    uint32_t *tok = mallocCheck(n * sizeof(uint32_t));
    Rng r;
    rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) tok[i] = (uint32_t)(rng_u64(&r) % vocab);
    shard_write(shard_path, tok, n, vocab);
    free(tok);
}

static void tiny_config(Config *c) {
    config_defaults(c);
    c->dim = 32; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->ffn_dim = 48; c->seq_len = 16;
    c->batch_size = 8; c->vocab_size = 0; c->warmup_steps = 0; c->max_steps = 3; c->lr = 1e-3f;
    snprintf(c->train_data, sizeof c->train_data, "%s", shard_path);
    c->val_data[0] = 0;
}

static void test_grad_accumulation(void) {
    Config a, b;
    tiny_config(&a);
    tiny_config(&b);
    a.batch_size = 2; a.total_batch_tokens = 8 * 16;    /* 4 micro-batches of 2 */
    Trainer ta, tb;
    trainer_init(&ta, &a);
    trainer_init(&tb, &b);
    CHECK(ta.accum == 4 && tb.accum == 1, "accumulation steps %d and %d", ta.accum, tb.accum);
    double worst_loss = 0;
    for (int s = 0; s < 3; s++) {
        StepStats sa = trainer_step(&ta), sb = trainer_step(&tb);
        worst_loss = fmax(worst_loss, fabs(sa.loss - sb.loss) / sb.loss);
    }
    size_t P = ta.model.n_params;
    float *pa = mallocCheck(P * 4), *pb = mallocCheck(P * 4);
    model_get_params(&ta.model, pa);
    model_get_params(&tb.model, pb);
    double num = 0, den = 0;
    for (size_t i = 0; i < P; i++) { num += (pa[i] - pb[i]) * (double)(pa[i] - pb[i]); den += (double)pb[i] * pb[i]; }
    double rel = sqrt(num / den);
    CHECK(worst_loss < 1e-5, "losses of 4x2 accumulated vs 8 at once differ by %.3g", worst_loss);
    CHECK(rel < 1e-5, "weights after 3 steps of 4x2 accumulated vs 8 at once differ by %.3g", rel);
    printf("grad accumulation: loss rel diff %.2e, weights rel diff %.2e\n", worst_loss, rel);
    trainer_free(&ta);
    trainer_free(&tb);
    free(pa); free(pb);
}

static void test_overfit(void) {
    Config c;
    tiny_config(&c);
    c.batch_size = 4; c.lr = 1e-2f; c.lr_schedule = SCHEDULE_CONSTANT; c.weight_decay = 0; c.dim = 64; c.ffn_dim = 128;
    Trainer tr;
    trainer_init(&tr, &c);
    Optimizer *o = &tr.opt;
    int ids[64], targets[64];
    loader_next(&tr.train, ids, targets);
    double loss = 0, first = 0;
    int s;
    for (s = 0; s < 300; s++) {
        model_zero_grads(&tr.model);
        loss = model_forward(&tr.model, ids, targets, 4, 16, 1.0f / 64) / 64;
        if (s == 0) first = loss;
        model_backward(&tr.model);
        optimizer_step(o, &tr.model, c.lr, 1.0f);
        if (loss < 0.05) break;
    }
    CHECK(loss < 0.1, "one batch should be memorised: loss %.4f after %d steps", loss, s);
    printf("overfit one batch: loss %.3f -> %.4f in %d steps\n", first, loss, s);
    trainer_free(&tr);
}

static void test_lr_schedule(void) {
    Config c;
    config_defaults(&c);
    c.lr = 1.0f; c.min_lr_ratio = 0.1f; c.warmup_steps = 10; c.max_steps = 110;
    CHECK(fabsf(lr_at(&c, 0) - 0.1f) < 1e-6f, "warm-up starts at lr/warmup: %g", lr_at(&c, 0));
    CHECK(fabsf(lr_at(&c, 9) - 1.0f) < 1e-6f, "warm-up reaches lr: %g", lr_at(&c, 9));
    CHECK(fabsf(lr_at(&c, 60) - 0.55f) < 1e-5f, "cosine midpoint is halfway to the floor: %g", lr_at(&c, 60));
    CHECK(fabsf(lr_at(&c, 110) - 0.1f) < 1e-6f, "cosine ends at the floor: %g", lr_at(&c, 110));
    CHECK(fabsf(lr_at(&c, 500) - 0.1f) < 1e-6f, "past max_steps stays at the floor: %g", lr_at(&c, 500));
    c.lr_schedule = SCHEDULE_LINEAR;
    CHECK(fabsf(lr_at(&c, 60) - 0.55f) < 1e-5f, "linear midpoint: %g", lr_at(&c, 60));
    c.lr_schedule = SCHEDULE_CONSTANT;
    CHECK(fabsf(lr_at(&c, 100) - 1.0f) < 1e-6f, "constant: %g", lr_at(&c, 100));
}

static void test_loader(void) {
    enum { B = 3, T = 16, DP = 4 };
    Loader l[DP];
    int64_t n_samples = 0;
    for (int r = 0; r < DP; r++) { loader_open(&l[r], shard_path, B, T, r, DP, 99, 1, 0); n_samples = l[r].n_samples; }
    /* over one epoch every sample is seen at most once across all ranks */
    char *seen = calloc(n_samples, 1);
    int dup = 0, steps = (int)(n_samples / (B * DP));
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < DP; r++) {
            int ids[B * T], tg[B * T];
            int64_t cursor = l[r].state.cursor;
            loader_next(&l[r], ids, tg);
            for (int b = 0; b < B; b++) {
                int64_t sample = l[r].order[cursor + (int64_t)r * B + b];
                dup += seen[sample]++;
                CHECK(!memcmp(ids + b * T + 1, tg + b * T, (T - 1) * sizeof(int)), "targets are the inputs shifted by one");
            }
        }
    CHECK(dup == 0, "%d samples given to two ranks (or twice) in one epoch", dup);
    /* state save/restore replays the same stream, across an epoch boundary */
    int a[B * T], ta[B * T], b2[B * T], tb[B * T];
    LoaderState st = loader_get_state(&l[0]);
    loader_next(&l[0], a, ta);
    loader_set_state(&l[1], st);
    l[1].dp_rank = 0;
    loader_next(&l[1], b2, tb);
    CHECK(!memcmp(a, b2, sizeof a) && !memcmp(ta, tb, sizeof ta), "restored loader state gives the same batch");
    CHECK(l[0].state.epoch == 1, "the epoch advanced (%lld)", (long long)l[0].state.epoch);
    free(seen);
    for (int r = 0; r < DP; r++) loader_close(&l[r]);
}

int main(void) {
    make_shard(61, 20000);
    test_lr_schedule();
    test_loader();
    test_grad_accumulation();
    test_overfit();
    unlink(shard_path);
    return test_summary();
}
