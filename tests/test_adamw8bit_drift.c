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
 * Asserted:
 *   - first, the GPU test's synthetic case (tests/q8_drift_case.h, the gradients of its first H100 run): through
 *     the shipped kernel and fp32 AdamW, no m != 0 with v decoding to 0, and no element of one gradient moves
 *     after it by its Adam steps (weight decay left out) more than 1.5x AdamW's + c K lr (<= 0.21 lr: m's
 *     rounding at the map's two smallest magnitudes where eps sets the step; the header derives it); the case
 *     must hold elements of both paths that failed the first form of the check (m rounded up past 1.5x, m
 *     rounded to 0). Measured: 1.635x, 1.5x + 0.130 lr; in total movement 4 over 1.5x, worst 5.728x, as on
 *     the H100;
 *   - the 8-bit path ran: the embedding is quantized in rows (optimizer_q8_row), the state is ~2 bytes a
 *     parameter of the 8-bit tensors, and at the end most m codes are not 0;
 *   - in the real 8-bit run, after every step, no element has m != 0 while its v decodes to 0 (the
 *     dequantized state), and the rare rows' largest norm is within 10% of the AdamW run's;
 *   - the drift bound, on a replay: the AdamW run's embedding gradients (times each step's clip factor)
 *     go again through fp32 AdamW (which reproduces the run's embedding bit for bit: checked) and through
 *     the shipped 8-bit kernel, with the synthetic case's measure and bound (tests/q8_drift_case.h): no
 *     element of one gradient (the rare rows; at least 10 steps before the end) moves after it by its Adam
 *     steps (weight decay left out) more than 1.5x AdamW's + c K lr (K from this run's betas and 150 steps:
 *     <= 0.21 lr), none has m != 0 with v decoding to 0, and every other element's Adam steps since its
 *     last gradient stay within 1.5x AdamW's + 0.5 lr (its m sums many gradients and may end near 0 by
 *     cancellation, where AdamW barely moves and any rounding of m is a large ratio of nothing); the path:
 *     over 10,000 such elements, AdamW's Adam part not 0 on 90% of them. Until 2026-12-07 the replay bounded
 *     the total movement at 1.5x, which flags an element whose m rounds to 0 (moved by weight decay alone,
 *     against AdamW's decay-cancelling steps) as drift; the total is printed beside the bound.
 *     A replay, not the two runs: their gradients differ once their weights do, so comparing the runs
 *     measures that divergence too (at the tiny preset's size, bench_q8_drift: this rule's replay 1.07x,
 *     its two runs 2.2x on 4 of 32,768 elements); the two runs' figures (total movement) are printed.
 * Measured (2-core CPU, 5-17 s on 2026-12-07 with the load, before and after the replay's new measure alike: 5.1-5.3 s
 * against 5.2-5.4 s at one load; the synthetic case 1 s of it): replay, the 15,424 rare elements' Adam parts at most
 * 1.001x AdamW's (none past 1.5x: 1.5x + 0 lr against a bound of <= 0.208 lr), the others 1.5x + 0.02 lr, in total
 * also 1.001x and 0.02 lr; no m != 0 with v = 0; the two runs 1.21x. The rule before issue 52 (a build of main,
 * b611d43) failed five checks in the replay's first form: replay 12.9x and 835 element-steps of v = 0 under a live m,
 * the run 1603 of them in 134 elements and a rare-row norm 1.21x AdamW's. */
#include "test.h"
#include "../common/util.h"
#include "rare_tokens.h"
#include "q8_drift_case.h"
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

/* One run: each element's last step with a gradient, its weight then, and its final weight; the embedding's
 * initial weights and its gradient at each step times the step's clip factor (what the optimizer applied). */
typedef struct {
    float *at, *end, *emb0, *emb_g;
    int *last, *grads;   /* grads: steps with a gradient */
    size_t n, emb_offset;
    int rows, dim;
    float weight_decay, beta1, beta2, eps;
    double rare_norm;
    size_t holes, hole_elems;
} Run;

static Run run(int optimizer) {
    Config c;
    drift_config(&c, optimizer);
    Trainer tr;
    trainer_init(&tr, &c);
    size_t P = tr.model.n_params;
    const ParamTensor *e = model_find_tensor(&tr.model, "model.embed_tokens.weight");
    if (!e || e->rows != VOCAB) die("test: no embedding of %d rows", VOCAB);
    size_t N = (size_t)e->rows * e->cols;
    Run r = {.at = mallocCheck(P * 4), .end = mallocCheck(P * 4), .emb0 = mallocCheck(N * 4), .emb_g = mallocCheck(N * 4 * STEPS),
             .last = callocCheck(P, sizeof(int)), .grads = callocCheck(P, sizeof(int)), .n = P, .emb_offset = e->offset, .rows = e->rows,
             .dim = e->cols, .weight_decay = c.weight_decay, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.adam_eps};
    float *m = mallocCheck(P * 4), *v = mallocCheck(P * 4);
    char *seen = callocCheck(P, 1);
    memcpy(r.at, tr.model.params, P * 4);
    memcpy(r.emb0, tr.model.params + e->offset, N * 4);
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
        StepStats st = trainer_step(&tr);
        const float *g = tr.model.grads;   /* cpu backend: host memory, the step's gradients until the next step */
        for (size_t i = 0; i < P; i++)
            if (g[i] != 0.0f) { r.at[i] = tr.model.params[i]; r.last[i] = s; r.grads[i]++; }
        float clip = c.grad_clip > 0 && st.grad_norm > c.grad_clip ? (float)(c.grad_clip / (st.grad_norm + 1e-6)) : 1.0f;   /* optimizer_step's */
        for (size_t i = 0; i < N; i++) r.emb_g[(size_t)(s - 1) * N + i] = g[e->offset + i] * clip;
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

/* The AdamW run's embedding gradients again, through fp32 AdamW (kernels/cpu/adamw.c) and the shipped 8-bit
 * kernel (one slice in rows of dim, as the optimizer cuts the embedding): the representation alone, on the
 * same gradients. Checks that the fp32 replay is the AdamW run's embedding bit for bit. The drift bound is
 * tests/q8_drift_case.h's, on the Adam part of each element's movement since its last gradient, its K from
 * this run's betas and steps; the total movement (the check's first form) is printed beside it. */
static void replay(const Run *a) {
    size_t N = (size_t)a->rows * a->dim;
    float *w32 = mallocCheck(N * 4), *w8 = mallocCheck(N * 4), *m32 = callocCheck(N, 4), *v32 = callocCheck(N, 4);
    float *dm = mallocCheck(N * 4), *dv = mallocCheck(N * 4);
    Q8Replay r;
    q8r_init(&r, N, a->emb0);
    AdamW8bitSlice sl = {0, N, 0, 0, (size_t)a->dim, a->weight_decay, 1};
    size_t nb = adamw8bit_slice_blocks(&sl);
    AdamW8bitState st = {mallocCheck(N), mallocCheck(N), callocCheck(nb, 4), callocCheck(nb, 4), NULL, NULL};
    memset(st.m_code, ADAMW8BIT_ZERO, N);
    memset(st.v_code, ADAMW8BIT_ZERO, N);
    AdamWSlice fs = {0, N, a->weight_decay};
    float lr = 3e-3f;
    memcpy(w32, a->emb0, N * 4); memcpy(w8, a->emb0, N * 4);
    for (int t = 1; t <= STEPS; t++) {
        const float *g = a->emb_g + (size_t)(t - 1) * N;
        AdamWHyper h = {.lr = lr, .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps, .grad_scale = 1.0f, .step = t};
        q8r_before(&r, w32, w8);
        adamw_update_cpu(w32, NULL, g, m32, v32, &fs, 1, h);
        adamw8bit_update_cpu(w8, NULL, g, st, &sl, 1, h);
        adamw8bit_state_get(st, &sl, 1, dm, dv);
        q8r_after(&r, t, g, w32, w8, 1.0f - h.lr * a->weight_decay /* the kernels' own decay */, dm, dv);
    }
    CHECK(!memcmp(w32, a->end + a->emb_offset, N * 4), "the replay's fp32 AdamW is the AdamW run's embedding bit for bit");
    q8r_finish(&r, "replay", STEPS, lr, a->beta1, a->beta2, w32, w8);
    printf("\n");
    q8r_free(&r);
    free(w32); free(w8); free(m32); free(v32); free(dm); free(dv);
    free(st.m_code); free(st.v_code); free(st.m_absmax); free(st.v_absmax);
}

/* The synthetic drift case of tests/q8_drift_case.h (the GPU test's, gradient for gradient) through the
 * shipped 8-bit kernel and fp32 AdamW: no element ever has m != 0 with v decoding to 0, and no element of
 * one gradient moves after it by its Adam steps more than the bound (1.5x AdamW's + c K lr). The path:
 * elements whose m rounded up past 1.5x went past 1.5x AdamW's (the absolute term is what holds them), and
 * elements whose m rounded to 0 moved past 1.5x AdamW's in total (why the measure leaves weight decay out). */
static void synthetic_case(void) {
    Q8Drift d;
    q8d_init(&d);
    size_t N = Q8D_N, holes = 0;
    AdamW8bitSlice sl = {0, N, 0, 0, Q8D_DIM, Q8D_WD, 1};
    size_t nb = adamw8bit_slice_blocks(&sl);
    AdamW8bitState st = {mallocCheck(N), mallocCheck(N), callocCheck(nb, 4), callocCheck(nb, 4), NULL, NULL};
    memset(st.m_code, ADAMW8BIT_ZERO, N);   /* all moments 0 */
    memset(st.v_code, ADAMW8BIT_ZERO, N);
    AdamWSlice fs = {0, N, Q8D_WD};
    float *p8 = mallocCheck(N * 4), *p32 = mallocCheck(N * 4), *b8 = mallocCheck(N * 4), *b32 = mallocCheck(N * 4), *g = mallocCheck(N * 4);
    float *m32 = callocCheck(N, 4), *v32 = callocCheck(N, 4), *dm = mallocCheck(N * 4), *dv = mallocCheck(N * 4);
    memcpy(p8, d.w0, N * 4);
    memcpy(p32, d.w0, N * 4);
    for (int t = 1; t <= Q8D_STEPS; t++) {
        AdamWHyper h = q8d_hyper(t);
        q8d_grads(&d, t, g);
        memcpy(b8, p8, N * 4);
        memcpy(b32, p32, N * 4);
        adamw8bit_update_cpu(p8, NULL, g, st, &sl, 1, h);
        adamw_update_cpu(p32, NULL, g, m32, v32, &fs, 1, h);
        q8d_track(&d, t, g, b8, p8, b32, p32, st, m32);
        adamw8bit_state_get(st, &sl, 1, dm, dv);
        for (size_t i = 0; i < N; i++) holes += dm[i] != 0.0f && dv[i] == 0.0f;
    }
    Q8DriftResult r = q8d_result(&d, p8, p32);
    CHECK(r.adam.n > 30000 && r.up_over > 0 && r.zeroed_over > 0, "synthetic case: %zu elements of one gradient; the paths: %zu had m "
          "rounded up past 1.5x (%zu of them moved past 1.5x AdamW's), %zu had m rounded to 0 (%zu of them moved past 1.5x AdamW's in "
          "total)", r.adam.n, r.up, r.up_over, r.zeroed, r.zeroed_over);
    CHECK(holes == 0, "synthetic case: no element has m != 0 with v decoding to 0 (%zu element-steps do)", holes);
    CHECK(r.adam.over == 0, "synthetic case: no element of one gradient moves after it by its Adam steps more than 1.5x AdamW's + c K lr "
          "(<= %.3f lr): %zu do (worst %.3fx, 1.5x + %.4f lr)", r.adam.slack, r.adam.over, r.adam.worst, r.adam.excess);
    printf("synthetic case (the GPU test's): the %zu elements of one gradient moved after it by their Adam steps at most %.3fx AdamW's, "
           "1.5x + %.4f lr (bound 1.5x + <= %.3f lr); in total (weight decay included) %zu over 1.5x, worst %.3fx; m rounded up past 1.5x: "
           "%zu (%zu past 1.5x), to 0: %zu (%zu past 1.5x in total); m != 0 with v = 0: %zu\n", r.adam.n, r.adam.worst, r.adam.excess,
           r.adam.slack, r.total_over, r.total_worst, r.up, r.up_over, r.zeroed, r.zeroed_over, holes);
    q8d_free(&d);
    free(st.m_code); free(st.v_code); free(st.m_absmax); free(st.v_absmax);
    free(p8); free(p32); free(b8); free(b32); free(g); free(m32); free(v32); free(dm); free(dv);
}

int main(void) {
    make_shard();
    synthetic_case();
    double t0 = now_seconds();
    Run a = run(OPTIMIZER_ADAMW), q = run(OPTIMIZER_ADAMW8BIT);
    replay(&a);
    size_t same_last = 0;
    for (size_t i = 0; i < a.n; i++) same_last += a.last[i] == q.last[i] && a.grads[i] == q.grads[i];
    Q8Total d = q8_total_drift(q.end, q.at, a.end, a.at, a.last, a.grads, a.n, STEPS, 3e-3, 2.0);
    CHECK(same_last == a.n, "each element's gradients are at the same steps in both runs (%zu of %zu)", same_last, a.n);
    CHECK(q.holes == 0, "8-bit run: no element has m != 0 with v decoding to 0: %zu element-steps (%zu elements)", q.holes, q.hole_elems);
    CHECK(q.rare_norm <= 1.1 * a.rare_norm, "8-bit run: the rare rows' largest norm %.4f vs AdamW's %.4f", q.rare_norm, a.rare_norm);
    printf("two runs, %d steps: the %zu elements of one gradient moved after it at most %.3fx AdamW's (%zu over 1.5x), the others at "
           "most 1.5x + %.2f lr (printed, not asserted: the runs' gradients differ); m != 0 with v = 0: %zu; rare-row norm %.4f vs "
           "%.4f (%.1f s)\n", STEPS, d.once, d.worst, d.over, d.excess, q.holes, q.rare_norm, a.rare_norm, now_seconds() - t0);
    unlink(shard);
    return test_summary();
}
