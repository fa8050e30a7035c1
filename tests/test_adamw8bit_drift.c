/* tests/test_adamw8bit_drift.c — issue 52: under 8-bit AdamW a rare token must not drift.
 *
 * The case (bench/bench_q8_drift.c runs it at the tiny preset's size, and measures the candidate
 * representations on it): a 512-token vocabulary whose tokens 0..255 follow a Markov chain and whose tokens
 * 256..511 appear exactly once each, one epoch, constant lr 3e-3, 150 steps, adam_eps 1e-8. A rare token's
 * embedding row gets one gradient, then none: AdamW keeps moving it while m decays, and so does 8-bit AdamW
 * — by how much is the question. Under the rule before issue 52 (v on its own unsigned map) some of those
 * elements had v decode to 0 under a live m and took the capped step every step. The model is smaller than the tiny preset (dim 64, 2 layers, 256 tokens a step: the tiny preset
 * takes ~1.4 s a step on the 2-core CI machine, 7 minutes for the two runs) but the embedding is 512 x 64,
 * quantized in rows of 64, and the same kind of data reaches it.
 *
 * Asserted, on real runs of adamw and adamw8bit over the same data (an element's last gradient is the last
 * step its gradient was not 0; the same step, and the same number of them, in both runs: checked):
 *   - the 8-bit path ran: the embedding is quantized in rows (optimizer_q8_row), the state is ~2 bytes a
 *     parameter of the 8-bit tensors, and at the end most m codes are not 0;
 *   - after every step, no element has m != 0 while its v decodes to 0 (the dequantized state);
 *   - no element of one gradient (the rare rows; at least 10 steps before the end) moves after it more
 *     than 1.5x what AdamW moves it. Every other element is held to 1.5x AdamW's + 2 lr: its m is the sum
 *     of many gradients and may end near 0 by cancellation, where AdamW barely moves and any rounding of m
 *     (up to 0.7% of its block's absmax) is a large ratio of nothing; 2 lr is under two capped steps;
 *   - the rare rows' largest norm within 10% of AdamW's.
 * Measured (2-core CPU): this rule 1.21x at most for the rare elements, the others 1.5x + 1.05 lr, no
 * m != 0 with v = 0, rare-row norm equal to AdamW's to 4 digits. The rule before issue 52 fails three of
 * them: 134 elements had v decode to 0 under a live m (1603 element-steps), a rare element moved 13.5x
 * AdamW's, and the rare rows' largest norm was 1.21x AdamW's. */
#include "test.h"
#include "../common/util.h"
#include "rare_tokens.h"
#include "../train/trainer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VOCAB RARE_VOCAB
#define RARE RARE_FIRST
#define STEPS 150
#define B 4
#define T 64
#define SLACK 2.0   /* lr: the elements of many gradients (see the header) */

static char shard[256];

static void make_shard(void) {
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_adamw8bit_drift_%d.bin", (int)getpid());
    rare_token_shard(shard, (int64_t)STEPS * B * T + 1);
}

static void drift_config(Config *c, int optimizer) {
    config_defaults(c);
    c->dim = 64; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->ffn_dim = 176; c->seq_len = T; c->batch_size = B;
    c->vocab_size = 0; c->max_steps = STEPS; c->lr = 3e-3f; c->warmup_steps = 0; c->optimizer = optimizer;
    char err[256];
    if (config_set(c, "lr_schedule", "constant", err, sizeof err) != 0) die("test: %s", err);
    snprintf(c->train_data, sizeof c->train_data, "%s", shard);
    c->val_data[0] = 0;
    c->eval_every = 0;
    c->sample_tokens = 0;
}

/* One run: each element's last step with a gradient, its weight then, and its final weight. */
typedef struct { float *at, *end; int *last, *grads; size_t n; double rare_norm; size_t holes, hole_elems; } Run;   /* grads: steps with a gradient */

static Run run(int optimizer) {
    Config c;
    drift_config(&c, optimizer);
    Trainer tr;
    trainer_init(&tr, &c);
    size_t P = tr.model.n_params;
    Run r = {mallocCheck(P * 4), mallocCheck(P * 4), callocCheck(P, sizeof(int)), callocCheck(P, sizeof(int)), P, 0, 0, 0};
    float *m = mallocCheck(P * 4), *v = mallocCheck(P * 4);
    char *seen = callocCheck(P, 1);
    memcpy(r.at, tr.model.params, P * 4);
    const ParamTensor *e = model_find_tensor(&tr.model, "model.embed_tokens.weight");
    CHECK(e && e->rows == VOCAB, "the embedding has %d rows", e ? e->rows : -1);
    if (optimizer == OPTIMIZER_ADAMW8BIT) {
        size_t q8 = 0;
        for (int i = 0; i < tr.model.n_tensors; i++)
            if (optimizer_q8_row(&tr.model, &c, &tr.model.tensors[i])) q8 += (size_t)tr.model.tensors[i].rows * tr.model.tensors[i].cols;
        CHECK(e && optimizer_q8_row(&tr.model, &c, e) == (size_t)e->cols && tr.opt.n_quantized >= q8 && q8 > 0,
              "the 8-bit path: the embedding quantized in rows of %zu, %zu of %zu elements 8-bit", e ? optimizer_q8_row(&tr.model, &c, e) : 0,
              q8, P);
        CHECK(tr.opt.state_bytes < 2.2 * q8 + 8.0 * (P - q8) + 4096, "8-bit state: %zu bytes for %zu 8-bit and %zu fp32 elements",
              tr.opt.state_bytes, q8, P - q8);
    }
    for (int s = 1; s <= STEPS; s++) {
        trainer_step(&tr);
        const float *g = tr.model.grads;   /* cpu backend: host memory, the step's gradients until the next step */
        for (size_t i = 0; i < P; i++)
            if (g[i] != 0.0f) { r.at[i] = tr.model.params[i]; r.last[i] = s; r.grads[i]++; }
        if (optimizer != OPTIMIZER_ADAMW8BIT) continue;
        optimizer_moments_get(&tr.opt, &tr.model, m, v);
        for (size_t i = 0; i < P; i++)
            if (m[i] != 0.0f && v[i] == 0.0f) { r.holes++; if (!seen[i]) { seen[i] = 1; r.hole_elems++; } }
    }
    if (optimizer == OPTIMIZER_ADAMW8BIT) {
        size_t live = 0;
        for (size_t i = 0; i < tr.opt.n_quantized; i++) live += tr.opt.q8.m_code[i] != ADAMW8BIT_ZERO;
        CHECK(live > tr.opt.n_quantized / 2, "the 8-bit state is live: %zu of %zu m codes not 0", live, tr.opt.n_quantized);
    }
    memcpy(r.end, tr.model.params, P * 4);
    for (int t = RARE; e && t < VOCAB; t++) {
        double ss = 0;
        for (int k = 0; k < e->cols; k++) { double w = r.end[e->offset + (size_t)t * e->cols + k]; ss += w * w; }
        r.rare_norm = fmax(r.rare_norm, sqrt(ss));
    }
    free(m); free(v); free(seen);
    trainer_free(&tr);
    return r;
}

int main(void) {
    make_shard();
    double t0 = now_seconds();
    Run a = run(OPTIMIZER_ADAMW), q = run(OPTIMIZER_ADAMW8BIT);
    double lr = 3e-3, worst = 0, excess = 0;
    size_t same_last = 0, once = 0, over = 0, over_many = 0, worst_i = 0, excess_i = 0;
    for (size_t i = 0; i < a.n; i++) {
        same_last += a.last[i] == q.last[i] && a.grads[i] == q.grads[i];
        double mv = fabs((double)q.end[i] - q.at[i]), ma = fabs((double)a.end[i] - a.at[i]);
        if (a.grads[i] == 1 && STEPS - a.last[i] >= 10) {   /* one gradient, then 10+ steps without */
            once++;
            if (mv > 1.5 * ma) over++;
            if (mv > worst * ma) { worst = ma > 0 ? mv / ma : INFINITY; worst_i = i; }
        } else {
            if (mv > 1.5 * ma + SLACK * lr) over_many++;
            if ((mv - 1.5 * ma) / lr > excess) { excess = (mv - 1.5 * ma) / lr; excess_i = i; }
        }
    }
    CHECK(same_last == a.n, "each element's last gradient is at the same step in both runs (%zu of %zu)", same_last, a.n);
    CHECK(once > 10000, "the case has elements with one gradient 10+ steps before the end: %zu", once);
    CHECK(q.holes == 0, "no element has m != 0 with v decoding to 0: %zu element-steps (%zu elements)", q.holes, q.hole_elems);
    CHECK(over == 0, "no element of one gradient moves after it more than 1.5x AdamW's: %zu do (worst %.3fx, element %zu, "
          "its gradient at step %d)", over, worst, worst_i, a.last[worst_i]);
    CHECK(over_many == 0, "no other element moves after its last gradient more than 1.5x AdamW's + %g lr: %zu do (worst 1.5x + %.2f lr, "
          "element %zu, %d gradients, the last at step %d)", SLACK, over_many, excess, excess_i, a.grads[excess_i], a.last[excess_i]);
    CHECK(q.rare_norm <= 1.1 * a.rare_norm, "the rare rows' largest norm %.4f vs AdamW's %.4f", q.rare_norm, a.rare_norm);
    printf("rare tokens, %d steps: %zu elements of one gradient (10+ steps before the end) moved after it at most %.3fx AdamW's; "
           "the others at most 1.5x AdamW's + %.2f lr; m != 0 with v = 0: %zu; rare-row norm %.4f vs %.4f (%.1f s)\n", STEPS, once,
           worst, excess, q.holes, q.rare_norm, a.rare_norm, now_seconds() - t0);
    unlink(shard);
    return test_summary();
}
