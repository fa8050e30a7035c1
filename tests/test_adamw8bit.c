/* tests/test_adamw8bit.c — 8-bit AdamW (kernels/adamw8bit.h, optimizer=adamw8bit) on CPU:
 *   - the map: sorted, 0 and the ends (-1, 1) exact;
 *   - quantize -> dequantize of random normal blocks errs by at most G * absmax,
 *     G = half the widest gap between neighbouring map values (the code is the
 *     nearest one), for m and for sqrt(v); quantize(dequantize(codes)) gives the
 *     codes back; a v above 0 never decodes to 0, however small against its block
 *     (issue 52), down to the smallest denormal;
 *   - the kernel against a naive re-implementation (blocks walked within rows of
 *     600 and of 192, codes identical, weights identical, the capped step),
 *     fp32-state slices against kernels/cpu/adamw.c bit for bit, and one 8-bit
 *     step close to the fp32 step;
 *   - the update bound (adamw8bit_max_step): exact AdamW stays under it and
 *     meets it on the extremal gradient sequence; a v at 1e-8 of its block's keeps
 *     a code above 0; a block whose v codes were set to 0 by hand under live m steps
 *     by exactly the bound, not m/eps; a state given with v = 0 under live m loses
 *     that m (adamw8bit_state_set);
 *   - state bytes per parameter on l124m (<= 2.1), a non-finite gradient skips the step;
 *   - 300 steps of a small model on a Markov-chain shard: adamw8bit's final loss
 *     within 2% of adamw's;
 *   - checkpoints: 8-bit state saved (as fp32 moments) and resumed bit-exactly, and
 *     fp32 AdamW <-> 8-bit conversion both ways; --optimizer=adam8 is refused in words. */
#include "test.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include "../checkpoint/checkpoint.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static Rng rng;
static const float *MS;   /* the map */
static char shard_path[256];

static double max_half_gap(const float *map) {
    double g = 0;
    for (int k = 0; k < 255; k++) g = fmax(g, ((double)map[k + 1] - map[k]) / 2);
    return g;
}

/* ------------------------------------------------------------------ maps */
static void test_maps(void) {
    int sorted = 1, zero = 0;
    for (int k = 0; k < 255; k++) sorted &= MS[k] < MS[k + 1];
    for (int k = 0; k < 256; k++) zero += MS[k] == 0.0f;
    CHECK(sorted, "the map strictly increasing");
    CHECK(MS[0] == -1.0f && MS[255] == 1.0f, "the map covers [-1, 1]: %g .. %g", MS[0], MS[255]);
    CHECK(zero == 1, "0 is one code of the map (%d)", zero);
    CHECK(adamw8bit_nearest(MS, 0.0f) == ADAMW8BIT_ZERO && MS[ADAMW8BIT_ZERO] == 0.0f, "0 quantizes to the map's 0 (code %d)",
          adamw8bit_nearest(MS, 0.0f));
    int pos = 0, neg = 0;
    for (int k = 0; k < 256; k++) { pos += MS[k] > 0; neg += MS[k] < 0; }
    CHECK(pos == 128 && neg == 127, "the map: %d positive, %d negative values", pos, neg);
    float smallest = MS[ADAMW8BIT_ZERO + 1];
    CHECK(fabsf(smallest - 0.55e-6f) < 1e-12f, "smallest positive value 5.5e-7: %g", smallest);
    CHECK(fabs(max_half_gap(MS) - 0.0140625 / 2) < 1e-7, "widest half gap %.8f (want 0.00703125)", max_half_gap(MS));
    printf("map: %g .. %g, widest half gap %.8f, smallest positive %g\n", MS[0], MS[255], max_half_gap(MS), smallest);
}

/* ------------------------------------------------- quantization error bound */
/* |x - map[c] * A| <= G * A + 2 ulp(A): the normalized x/A lies in [-1, 1], the nearest code is at most half a
 * gap away, and the division, product and map values each round once in fp32. v = x^2 is kept as s = sqrt(v):
 * the same bound on s against the block's largest s. */
static void test_quantization_error(void) {
    enum { NB = 2000, N = ADAMW8BIT_BLOCK };
    double gs = max_half_gap(MS), worst_s = 0, worst_u = 0, mean_s = 0;
    int nearest_ok = 1, idempotent = 1, n_total = 0, v_alive = 1;
    for (int b = 0; b < NB; b++) {
        float scale = powf(10.0f, -8.0f + 11.0f * rng_uniform(&rng)), x[N], y[N], d[N], d2[N];
        int n = b % 7 == 0 ? 1 + (int)(rng_u64(&rng) % N) : N;   /* some partial blocks */
        for (int k = 0; k < n; k++) { x[k] = rng_normal(&rng) * scale; y[k] = x[k] * x[k]; }
        if (b % 5 == 0) y[b % n] *= 1e-20f;   /* a v far below its block's: 1e-10 of it in s */
        uint8_t c[N], cu[N], c2[N];
        float A = adamw8bit_quantize_m(MS, x, n, c), Au = adamw8bit_quantize_v(MS, y, n, cu);
        adamw8bit_dequantize_m(MS, c, A, n, d);
        for (int k = 0; k < n; k++) {
            double e = fabs((double)x[k] - d[k]) / A;
            worst_s = fmax(worst_s, e);
            mean_s += e; n_total++;
            /* nearest: no other code is closer (up to the fp32 rounding of x/A) */
            double xn = (double)x[k] / A, best = fabs(xn - MS[c[k]]);
            for (int j = 0; j < 256; j++) if (fabs(xn - MS[j]) < best - 1e-7) nearest_ok = 0;
        }
        adamw8bit_dequantize_v(MS, cu, Au, n, d2);
        for (int k = 0; k < n; k++) {
            v_alive &= y[k] == 0.0f || d2[k] > 0.0f;
            if (sqrtf(y[k]) >= 3.25e-6f * Au) worst_u = fmax(worst_u, fabs(sqrt((double)y[k]) - sqrt((double)d2[k])) / Au);   /* above the floor */
        }
        /* dequantized values quantize back to the same codes and absmax */
        float A2 = adamw8bit_quantize_m(MS, d, n, c2);
        idempotent &= A2 == A && !memcmp(c, c2, n);
        A2 = adamw8bit_quantize_v(MS, d2, n, c2);
        idempotent &= A2 == Au && !memcmp(cu, c2, n);
    }
    /* the floor down to the smallest denormal: a block of v = 1 with one v of 1e-44 */
    float y[4] = {1.0f, 1e-44f, 0.0f, 1e-30f}, d2[4];
    uint8_t cu[4];
    float Au = adamw8bit_quantize_v(MS, y, 4, cu);
    adamw8bit_dequantize_v(MS, cu, Au, 4, d2);
    double eps = 2.0 * 1.19e-7;
    CHECK(worst_s <= gs + eps, "m: max |x - deq| / absmax %.6g > bound %.6g", worst_s, gs + eps);
    CHECK(worst_u <= gs + eps, "sqrt(v): max |s - deq| / absmax %.6g > bound %.6g", worst_u, gs + eps);
    CHECK(nearest_ok, "every element got its nearest code");
    CHECK(idempotent, "quantize(dequantize(codes)) returns the same codes and absmax");
    CHECK(v_alive, "no v above 0 decoded to 0 (blocks holding a v at 1e-20 of their largest)");
    CHECK(d2[0] == 1.0f && d2[1] > 0.0f && d2[2] == 0.0f && d2[3] > 0.0f && cu[2] == ADAMW8BIT_ZERO,
          "v of 1e-44 and 1e-30 beside 1: decoded %g, %g (above 0), 0 stays 0 (%g)", d2[1], d2[3], d2[2]);
    printf("quantization of %d N(0, s) blocks: max |err|/absmax m %.6f (bound %.6f), mean %.6f; sqrt of squares %.6f; "
           "v of 1e-44 beside 1 decodes to %g\n", NB, worst_s, gs, mean_s / n_total, worst_u, d2[1]);
}

/* ------------------------------------------------------------ the kernel */
static uint8_t nearest_linear(const float *map, float x) {   /* first of the nearest codes, by scanning */
    int best = 0;
    for (int k = 1; k < 256; k++) if (fabsf(map[k] - x) < fabsf(map[best] - x)) best = k;
    return (uint8_t)best;
}

/* 3 slices: quantized in rows of 600 (blocks 256, 256, 88) with a partial last row, fp32, quantized in
 * rows of 192 (one block each, as l124m's o_proj) with a partial last row */
typedef struct { size_t P, Q, NB, S; float *p, *pc, *g; AdamW8bitState st; AdamW8bitSlice sl[3]; } Case;
static void case_make(Case *k) {
    size_t c0 = 5000, c1 = 300, c2 = 4096;
    k->P = c0 + c1 + c2;
    k->sl[0] = (AdamW8bitSlice){0, c0, 0, 0, 600, 0.1f, 1};
    k->sl[1] = (AdamW8bitSlice){c0, c1, 0, 0, c1, 0.0f, 0};
    k->sl[2] = (AdamW8bitSlice){c0 + c1, c2, 5008, 25, 192, 0.05f, 1};
    k->Q = 5008 + 4096; k->S = c1; k->NB = 25 + 22;
    k->p = mallocCheck(k->P * 4); k->pc = mallocCheck(k->P * 4); k->g = mallocCheck(k->P * 4);
    for (size_t i = 0; i < k->P; i++) { k->p[i] = rng_normal(&rng) * 0.02f; k->g[i] = 0; }
    k->st.m_code = callocCheck(k->Q, 1); k->st.v_code = callocCheck(k->Q, 1);
    k->st.m_absmax = callocCheck(k->NB, 4); k->st.v_absmax = callocCheck(k->NB, 4);
    k->st.m32 = callocCheck(k->S, 4); k->st.v32 = callocCheck(k->S, 4);
}
static void case_free(Case *k) {
    free(k->p); free(k->pc); free(k->g);
    free(k->st.m_code); free(k->st.v_code); free(k->st.m_absmax); free(k->st.v_absmax); free(k->st.m32); free(k->st.v32);
}

static void test_kernel(void) {
    Case k;
    case_make(&k);
    /* the reference: element by element, linear search, the same fp32 expressions */
    size_t P = k.P;
    float *rp = mallocCheck(P * 4), *fm = callocCheck(P, 4), *fv = callocCheck(P, 4), *fp = mallocCheck(P * 4);
    uint8_t *rmc = callocCheck(k.Q, 1), *rvc = callocCheck(k.Q, 1);
    float *rma = callocCheck(k.NB, 4), *rva = callocCheck(k.NB, 4), *rm32 = callocCheck(k.S, 4), *rv32 = callocCheck(k.S, 4);
    memcpy(rp, k.p, P * 4);
    memcpy(fp, k.p, P * 4);
    int codes_same = 1, params_same = 1, compute_same = 1, small_same = 1, blocks_ok = 1;
    double step_diff = 0, step_mean = 0;
    for (int t = 1; t <= 5; t++) {
        AdamWHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = t};
        for (size_t i = 0; i < P; i++) k.g[i] = (rng_normal(&rng) + 0.5f) * 1e-3f * (1 + i % 3);   /* a drift, mixed scales */
        adamw8bit_update_cpu(k.p, k.pc, k.g, k.st, k.sl, 3, h);
        float bc1 = 1.0f - powf(h.beta1, (float)t), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)t)), ss = h.lr / bc1;
        float cap = adamw8bit_max_step(h);
        for (int s = 0; s < 3; s++) {
            AdamW8bitSlice sl = k.sl[s];
            float decay = 1.0f - h.lr * sl.weight_decay;
            size_t blk = sl.block;
            /* the blocks, walked naively: each row from its start in 256s */
            for (size_t j0 = 0, r0 = 0; j0 < sl.count; blk++) {
                size_t rend = r0 + sl.row < sl.count ? r0 + sl.row : sl.count;
                size_t n = rend - j0 < 256 ? rend - j0 : 256;
                if (t == 1 && s != 1) {
                    int bn;
                    blocks_ok &= adamw8bit_block_span(&sl, blk - sl.block, &bn) == j0 && (size_t)bn == n;
                }
                float nm[256], nv[256], am = 0, av = 0;
                for (size_t j = j0; j < j0 + n; j++) {
                    size_t i = sl.offset + j;
                    float m = sl.quantized ? MS[rmc[sl.state + j]] * rma[blk] : rm32[sl.state + j];
                    float sq = MS[rvc[sl.state + j]] * rva[blk], v = sl.quantized ? sq * sq : rv32[sl.state + j];
                    if (sl.quantized && v == 0.0f && sq > 0.0f) v = 1.4e-45f;
                    float g = k.g[i] * h.grad_scale, p = rp[i] * decay;
                    m = h.beta1 * m + (1.0f - h.beta1) * g;
                    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
                    float u = ss * m / (sqrtf(v) / bc2_sqrt + h.eps);
                    rp[i] = p - (sl.quantized ? fminf(fmaxf(u, -cap), cap) : u);
                    nm[j - j0] = m; nv[j - j0] = sl.quantized ? sqrtf(v) : v;   /* 8-bit: s = sqrt(v) */
                    am = fmaxf(am, fabsf(m)); av = fmaxf(av, nv[j - j0]);
                }
                for (size_t j = j0; j < j0 + n; j++) {
                    if (!sl.quantized) { rm32[sl.state + j] = nm[j - j0]; rv32[sl.state + j] = nv[j - j0]; continue; }
                    rmc[sl.state + j] = nearest_linear(MS, am > 0 ? nm[j - j0] / am : 0.0f);
                    uint8_t cv = nearest_linear(MS, av > 0 ? nv[j - j0] / av : 0.0f);
                    rvc[sl.state + j] = nv[j - j0] > 0 && cv < ADAMW8BIT_ZERO + 2 ? ADAMW8BIT_ZERO + 2 : cv;   /* the floor, 3.25e-6 */
                }
                if (sl.quantized) { rma[blk] = am; rva[blk] = av; }
                j0 += n;
                if (j0 == rend) r0 = rend;
            }
            if (s != 1) blocks_ok &= blk - sl.block == adamw8bit_slice_blocks(&sl);
        }
        codes_same &= !memcmp(rmc, k.st.m_code, k.Q) && !memcmp(rvc, k.st.v_code, k.Q) && !memcmp(rma, k.st.m_absmax, k.NB * 4)
                      && !memcmp(rva, k.st.v_absmax, k.NB * 4);
        params_same &= !memcmp(rp, k.p, P * 4);
        compute_same &= !memcmp(k.pc, k.p, P * 4);
        small_same &= !memcmp(rm32, k.st.m32, k.S * 4) && !memcmp(rv32, k.st.v32, k.S * 4);
        /* the fp32 AdamW of kernels/cpu/adamw.c over the same steps */
        AdamWSlice fs[3];
        for (int s = 0; s < 3; s++) fs[s] = (AdamWSlice){k.sl[s].offset, k.sl[s].count, k.sl[s].weight_decay};
        adamw_update_cpu(fp, NULL, k.g, fm, fv, fs, 3, h);
    }
    int fp32_slice_same = !memcmp(fm + k.sl[1].offset, k.st.m32, k.S * 4) && !memcmp(fv + k.sl[1].offset, k.st.v32, k.S * 4);
    double num = 0, den = 0;
    for (size_t i = 0; i < P; i++) { num += (double)(k.p[i] - fp[i]) * (k.p[i] - fp[i]); den += (double)fp[i] * fp[i]; }
    /* one step from the same weights and the fp32 moments, quantized for the 8-bit side: the update differs
     * only through the moments' quantization error */
    adamw8bit_state_set(k.st, k.sl, 3, fm, fv);
    memcpy(k.p, fp, P * 4);
    AdamWHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 6};
    for (size_t i = 0; i < P; i++) k.g[i] = (rng_normal(&rng) + 0.5f) * 1e-3f * (1 + i % 3);
    adamw8bit_update_cpu(k.p, NULL, k.g, k.st, k.sl, 3, h);
    float *before = mallocCheck(P * 4);
    memcpy(before, fp, P * 4);
    AdamWSlice fs[3];
    for (int s = 0; s < 3; s++) fs[s] = (AdamWSlice){k.sl[s].offset, k.sl[s].count, k.sl[s].weight_decay};
    adamw_update_cpu(fp, NULL, k.g, fm, fv, fs, 3, h);
    double un = 0, ud = 0;
    for (size_t i = 0; i < P; i++) {
        double d = fabs((double)(k.p[i] - before[i]) - (fp[i] - before[i])) / h.lr;
        step_diff = fmax(step_diff, d);
        step_mean += d / P;
        un += d * d; ud += ((double)fp[i] - before[i]) * (fp[i] - before[i]) / h.lr / h.lr;
    }
    free(before);
    CHECK(blocks_ok, "adamw8bit_slice_blocks / adamw8bit_block_span walk the rows' blocks as the naive walk does");
    CHECK(codes_same, "codes and absmax equal the naive reference's (linear search) after each of 5 steps");
    CHECK(params_same, "weights equal the naive reference's bit for bit");
    CHECK(compute_same, "the compute copy is written with the weights");
    CHECK(small_same, "fp32-state slice equals the reference");
    CHECK(fp32_slice_same, "fp32-state slice equals kernels/cpu/adamw.c bit for bit");
    CHECK(step_diff < 0.2 && sqrt(un / ud) < 0.02, "one step from the same moments: 8-bit vs fp32 update differ by max %.4f lr, "
          "rel %.4f", step_diff, sqrt(un / ud));
    CHECK(sqrt(num / den) < 2e-2, "5 steps: weights of 8-bit vs fp32 AdamW differ by %.3g (relative)", sqrt(num / den));
    printf("kernel: one step from the same moments, 8-bit vs fp32 update: max |diff| %.4f lr, mean %.5f lr, rel (l2) %.4f; "
           "after 5 steps weights rel diff %.2e\n", step_diff, step_mean, sqrt(un / ud), sqrt(num / den));
    free(rp); free(fm); free(fv); free(fp); free(rmc); free(rvc); free(rma); free(rva); free(rm32); free(rv32);
    case_free(&k);
}

/* ------------------------------------------------------- the update bound */
/* adamw8bit_max_step is a bound exact AdamW obeys and nearly meets: fp32 AdamW on the sequence that makes
 * Cauchy-Schwarz an equality (g_{t-k} ~ (b1/b2)^k: each gradient b2/b1 times the last) steps by almost the
 * bound and never past it, nor on random sequences. Then the hole: a v at 1e-8 of its block's largest (below
 * the old unsigned map's first value) keeps a code above 0; a quantized block whose v code is set to 0 by hand
 * while m survives — exact m/(0 + eps) would move the weight by ~1e5 lr; the capped step moves it by the bound,
 * exactly, and no element of the block by more; and adamw8bit_state_set given v = 0 under a live m drops m. */
static void test_update_bound(void) {
    AdamWHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 1};
    CHECK(adamw8bit_max_step(h) == (float)(1e-2f * (1 + 1e-5)), "step 1: the bound is lr (|m^|/sqrt(v^) = |g|/|g|): %.9g",
          adamw8bit_max_step(h));
    enum { N = 64, T = 60 };
    float p[N], g[N], m[N] = {0}, v[N] = {0};
    AdamWSlice sl = {0, N, 0.0f};
    double worst = 0, tight = 0;
    for (int i = 0; i < N; i++) p[i] = 0;
    for (int t = 1; t <= T; t++) {
        h.step = t;
        for (int i = 0; i < N; i++)   /* element 0: the extremal sequence; the rest random, some with outliers */
            g[i] = i == 0 ? 1e-3f * powf(h.beta2 / h.beta1, (float)t) : rng_normal(&rng) * (i % 5 == 0 && t % 7 == 0 ? 50.0f : 1.0f);
        float before[N];
        memcpy(before, p, sizeof p);
        adamw_update_cpu(p, NULL, g, m, v, &sl, 1, h);
        double cap = adamw8bit_max_step(h);
        for (int i = 0; i < N; i++) worst = fmax(worst, fabs((double)p[i] - before[i]) / cap);
        tight = fabs((double)p[0] - before[0]) / cap;
    }
    h.step = 1000000;
    double r_inf = adamw8bit_max_step(h) / h.lr / (1 + 1e-5);
    CHECK(worst <= 1.0, "exact fp32 AdamW stays within the bound: largest step %.6f of it", worst);
    CHECK(tight > 0.99, "the bound is tight: the extremal sequence steps by %.6f of it at step %d", tight, T);
    CHECK(fabs(r_inf - 0.1 * sqrt(20.0) / sqrt(1 - 0.81 / 0.95)) < 1e-4, "b1 0.9, b2 0.95: R -> %.5f (want 1.16502)", r_inf);
    printf("update bound: exact AdamW's largest step %.6f of it over %d steps (the extremal sequence %.6f); R_inf %.5f lr\n",
           worst, T, tight, r_inf);

    /* one quantized block with a vanished second moment */
    enum { B = ADAMW8BIT_BLOCK };
    float pq[B], pq0[B], gq[B], mq[B], vq[B];
    uint8_t mc[B], vc[B];
    float am, av;
    AdamW8bitSlice q = {0, B, 0, 0, B, 0.1f, 1};
    AdamW8bitState st = {mc, vc, &am, &av, NULL, NULL};
    for (int i = 0; i < B; i++) { pq[i] = rng_normal(&rng) * 0.02f; mq[i] = rng_normal(&rng) * 1e-3f; vq[i] = 1e-6f * (1 + rng_uniform(&rng)); gq[i] = 0; }
    vq[7] = 1e-14f;   /* 5e-9 of the block's absmax: below the old unsigned map's first value */
    size_t dropped = adamw8bit_state_set(st, &q, 1, mq, vq);
    CHECK(dropped == 0 && vc[7] != ADAMW8BIT_ZERO && mc[7] != ADAMW8BIT_ZERO, "a v at 5e-9 of its block's keeps code %d (%g), m code %d",
          vc[7], adamw8bit_v_value(MS[vc[7]], av), mc[7]);
    vq[9] = 0.0f;
    dropped = adamw8bit_state_set(st, &q, 1, mq, vq);
    CHECK(dropped == 1 && vc[9] == ADAMW8BIT_ZERO && mc[9] == ADAMW8BIT_ZERO, "v = 0 under m %g given: m dropped (%zu dropped, m code %d)",
          mq[9], dropped, mc[9]);
    float lm[4] = {1e-3f, 0.0f, -2e-3f, 3e-3f}, lv[4] = {0.0f, 0.0f, 1e-6f, 0.0f};   /* fp32 moments of an old checkpoint */
    size_t lost = optimizer_drop_lost_moments(lm, lv, 4);
    CHECK(lost == 2 && lm[0] == 0.0f && lm[2] == -2e-3f && lm[3] == 0.0f, "optimizer_drop_lost_moments: %zu m dropped where v = 0", lost);
    vc[7] = ADAMW8BIT_ZERO;   /* by hand: the state the old rule could reach */
    memcpy(pq0, pq, sizeof pq);
    h.step = 20;
    adamw8bit_update_cpu(pq, NULL, gq, st, &q, 1, h);
    float cap = adamw8bit_max_step(h), decay = 1.0f - h.lr * q.weight_decay;
    float bc1 = 1.0f - powf(h.beta1, 20.0f), mdeq = MS[mc[7]] * am;   /* m after the step, dequantized again: ~ b1 m */
    double worst_q = 0, uncapped = fabs(h.lr / bc1 * mdeq / h.eps);
    for (int i = 0; i < B; i++) worst_q = fmax(worst_q, fabs((double)pq[i] - (double)(pq0[i] * decay)) / cap);
    float step7 = pq0[7] * decay - pq[7];
    CHECK(worst_q <= 1.0 + 1e-5, "no element of the block steps past the bound: largest %.6f of it", worst_q);
    CHECK(fabsf(step7) == cap || fabs(fabs(step7) - cap) <= 2e-7 * fabs(pq0[7]) + 1e-12,
          "the vanished-v element is capped: it moved %.6g, the bound %.6g (uncapped m/eps: %.3g)", step7, cap, uncapped);
    CHECK(uncapped > 1e3 * cap, "without the cap it would have moved %.3g (%.0fx the bound)", uncapped, uncapped / cap);
    printf("vanished v: the element moved %.4g = the bound %.4g; m/eps would have moved it %.3g (%.0fx)\n", fabsf(step7), cap,
           uncapped, uncapped / cap);
}

/* ---------------------------------------------------- optimizer: bytes, skip */
static void test_state_bytes(void) {
    Config c;
    config_defaults(&c);
    CHECK(config_apply_preset(&c, "l124m") == 0, "l124m preset");
    c.optimizer = OPTIMIZER_ADAMW8BIT;
    ModelConfig mc;
    model_config_from(&mc, &c, c.vocab_size);
    Comm comm;
    comm_init_one(&comm);
    Model m;
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 8, RECOMPUTE_NONE);   /* weights untouched: the pages stay unallocated */
    Optimizer o;
    optimizer_init(&o, &m, &c, NULL);
    double per = (double)optimizer_state_bytes(&o) / m.n_params;
    size_t small = o.n_fp32;
    CHECK(per <= 2.1, "l124m: %.4f optimizer state bytes per parameter (want <= 2.1)", per);
    CHECK(small < m.n_params / 1000, "l124m: %zu elements of fp32 state", small);
    printf("l124m: %zu params, adamw8bit state %zu bytes = %.4f bytes/param (%zu elements in fp32 state; adamw: 8)\n",
           m.n_params, optimizer_state_bytes(&o), per, small);
    optimizer_free(&o, m.be);
    c.optimizer = OPTIMIZER_ADAMW;
    optimizer_init(&o, &m, &c, NULL);
    CHECK(optimizer_state_bytes(&o) == 8 * m.n_params, "adamw: 8 bytes/param");
    optimizer_free(&o, m.be);
    model_free(&m);
    comm_free(&comm);
}

static void markov_shard(int vocab, int64_t n) {
    snprintf(shard_path, sizeof shard_path, "/tmp/llm3d_test_adamw8bit_%d.bin", (int)getpid());
    uint32_t *tok = mallocCheck(n * sizeof(uint32_t)), succ[256][4];
    Rng r;
    rng_seed(&r, 11);
    for (int a = 0; a < vocab; a++) for (int j = 0; j < 4; j++) succ[a][j] = (uint32_t)(rng_u64(&r) % vocab);
    tok[0] = 0;
    for (int64_t i = 1; i < n; i++) {   /* next token: successor 0..3 of the current one with p = .6 .2 .1 .1 */
        float u = rng_uniform(&r);
        tok[i] = succ[tok[i - 1]][u < 0.6f ? 0 : u < 0.8f ? 1 : u < 0.9f ? 2 : 3];
    }
    shard_write(shard_path, tok, n, vocab);
    free(tok);
}

static void small_config(Config *c, int optimizer) {
    config_defaults(c);
    c->dim = 64; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->ffn_dim = 176; c->seq_len = 32;
    c->batch_size = 8; c->vocab_size = 0; c->warmup_steps = 20; c->max_steps = 300; c->lr = 3e-3f;
    c->optimizer = optimizer;
    snprintf(c->train_data, sizeof c->train_data, "%s", shard_path);
    c->val_data[0] = 0;
    c->eval_every = 0;
}

static void test_nonfinite_skip(void) {
    Config c;
    small_config(&c, OPTIMIZER_ADAMW8BIT);
    Trainer tr;
    trainer_init(&tr, &c);
    trainer_step(&tr);
    size_t P = tr.model.n_params, B = tr.opt.state_bytes;
    char *s0 = mallocCheck(B), *s1 = mallocCheck(B);
    float *p0 = mallocCheck(P * 4), *p1 = mallocCheck(P * 4), bad = NAN;
    memcpy(s0, tr.opt.state, B);
    model_get_params(&tr.model, p0);
    tr.be->upload(tr.model.grads + P / 2, &bad, sizeof bad);
    int step = tr.opt.step;
    double norm = optimizer_step(&tr.opt, &tr.model, 1e-3f, 1.0f);
    model_get_params(&tr.model, p1);
    CHECK(!isfinite(norm) && tr.opt.step == step, "a NaN gradient: norm %g, step %d -> %d", norm, step, tr.opt.step);
    CHECK(!memcmp(s0, tr.opt.state, B) && !memcmp(p0, p1, P * 4), "a NaN gradient leaves the 8-bit state and weights untouched");
    free(s0); free(s1); free(p0); free(p1);
    trainer_free(&tr);
}

/* ------------------------------------------------------- 300-step training */
static double train_300(int optimizer, double *first, double *seconds) {
    Config c;
    small_config(&c, optimizer);
    Trainer tr;
    trainer_init(&tr, &c);
    double t0 = now_seconds(), tail = 0;
    for (int s = 0; s < c.max_steps; s++) {
        StepStats st = trainer_step(&tr);
        if (s == 0) *first = st.loss;
        if (s >= c.max_steps - 20) tail += st.loss / 20;
    }
    *seconds = now_seconds() - t0;
    trainer_free(&tr);
    return tail;
}

static void test_training(void) {
    double f32, f8, t32, t8;
    double l32 = train_300(OPTIMIZER_ADAMW, &f32, &t32), l8 = train_300(OPTIMIZER_ADAMW8BIT, &f8, &t8);
    double rel = fabs(l8 - l32) / l32;
    CHECK(l32 < 0.6 * f32, "adamw learns the chain: %.4f -> %.4f", f32, l32);
    CHECK(rel < 0.02, "adamw8bit final loss %.4f vs adamw %.4f: %.2f%% apart (want < 2%%)", l8, l32, 100 * rel);
    printf("300 steps, dim 64, 2 layers, vocab 256 Markov chain (entropy 1.089 nats): mean loss of the last 20 steps "
           "adamw %.4f (from %.4f, %.1f s), adamw8bit %.4f (from %.4f, %.1f s): %.2f%% apart\n",
           l32, f32, t32, l8, f8, t8, 100 * rel);
}

/* ---------------------------------------------------------------- checkpoints */
static float *dev_floats(const Backend *be, size_t n) { return be->alloc(n * sizeof(float), "test moments"); }

static void save(Trainer *tr, const char *run, char *path, size_t size) {
    const Backend *be = tr->be;
    size_t P = tr->model.n_params;
    float *m = dev_floats(be, P), *v = dev_floats(be, P);
    optimizer_moments_get(&tr->opt, &tr->model, m, v);
    CkptMirror mir[2] = {{"optimizer.adamw.m", m}, {"optimizer.adamw.v", v}};
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = tr->step, .loss_scale = 1.0f, .optimizer = CKPT_OPT_ADAMW,
                   .optimizer_step = tr->opt.step};
    char *text = mallocCheck(65536);
    config_write_text(&tr->cfg, text, 65536);
    checkpoint_save(run, 0, &tr->model, mir, 2, &s, text, path, size);
    free(text);
    be->free(m); be->free(v);
}

static void load(Trainer *tr, const char *path) {
    const Backend *be = tr->be;
    size_t P = tr->model.n_params;
    float *m = dev_floats(be, P), *v = dev_floats(be, P);
    CkptMirror mir[2] = {{"optimizer.adamw.m", m}, {"optimizer.adamw.v", v}};
    CkptState s;
    char *text = mallocCheck(65536);
    config_write_text(&tr->cfg, text, 65536);
    checkpoint_load(path, &tr->model, mir, 2, &s, text);
    optimizer_moments_set(&tr->opt, &tr->model, m, v);
    tr->opt.step = (int)s.optimizer_step;
    tr->step = (int)s.step;
    free(text);
    be->free(m); be->free(v);
}

static void test_checkpoint(void) {
    char run[256], path[1200];
    snprintf(run, sizeof run, "/tmp/llm3d_test_adamw8bit_run_%d", (int)getpid());
    Config c;
    small_config(&c, OPTIMIZER_ADAMW8BIT);
    snprintf(c.run_dir, sizeof c.run_dir, "%s", run);
    Trainer a, b;
    trainer_init(&a, &c);
    for (int s = 0; s < 5; s++) trainer_step(&a);
    save(&a, run, path, sizeof path);
    trainer_init(&b, &c);
    load(&b, path);
    loader_set_state(&b.train, loader_get_state(&a.train));
    size_t P = a.model.n_params;
    CHECK(!memcmp(a.opt.state, b.opt.state, a.opt.state_bytes), "8-bit state (codes, absmax, fp32 small tensors) resumes bit-exactly");
    for (int s = 0; s < 3; s++) {
        StepStats sa = trainer_step(&a), sb = trainer_step(&b);
        CHECK(sa.loss == sb.loss, "resumed step %d: loss %.9g vs %.9g", s, sa.loss, sb.loss);
    }
    float *pa = mallocCheck(P * 4), *pb = mallocCheck(P * 4);
    model_get_params(&a.model, pa);
    model_get_params(&b.model, pb);
    CHECK(!memcmp(pa, pb, P * 4) && !memcmp(a.opt.state, b.opt.state, a.opt.state_bytes),
          "3 steps after resume: weights and 8-bit state identical to the uninterrupted run");

    /* conversions: 8-bit -> fp32 AdamW gives the dequantized moments; fp32 -> 8-bit quantizes within the bound */
    Config c32 = c;
    c32.optimizer = OPTIMIZER_ADAMW;
    Trainer f;
    trainer_init(&f, &c32);
    load(&f, path);   /* the 8-bit run's checkpoint into an fp32 run */
    float *m8 = mallocCheck(P * 4), *v8 = mallocCheck(P * 4), *m32 = mallocCheck(P * 4), *v32 = mallocCheck(P * 4);
    Trainer g;
    trainer_init(&g, &c);
    load(&g, path);
    optimizer_moments_get(&g.opt, &g.model, m8, v8);   /* cpu backend: host pointers */
    CHECK(!memcmp(f.opt.m, m8, P * 4) && !memcmp(f.opt.v, v8, P * 4), "an 8-bit checkpoint loads into adamw as its dequantized moments");
    for (int s = 0; s < 5; s++) trainer_step(&f);   /* fp32 moments of its own now */
    save(&f, run, path, sizeof path);
    load(&g, path);   /* fp32 checkpoint into the 8-bit run */
    optimizer_moments_get(&g.opt, &g.model, m8, v8);
    memcpy(m32, f.opt.m, P * 4);
    memcpy(v32, f.opt.v, P * 4);
    double worst_m = 0, worst_v = 0;
    for (int s = 0; s < g.opt.n_slices8; s++) {
        const AdamW8bitSlice *sl = &g.opt.slices8[s];
        for (size_t b = 0; b < adamw8bit_slice_blocks(sl); b++) {   /* the blocks of the rule */
            int n;
            size_t i0 = sl->offset + adamw8bit_block_span(sl, b, &n);
            double am = 0, av = 0, em = 0, ev = 0;
            for (size_t i = i0; i < i0 + (size_t)n; i++) {
                am = fmax(am, fabsf(m32[i])); av = fmax(av, v32[i]);
                em = fmax(em, fabs((double)m32[i] - m8[i])); ev = fmax(ev, fabs((double)v32[i] - v8[i]));
            }
            if (!sl->quantized) { worst_m = fmax(worst_m, em); worst_v = fmax(worst_v, ev); continue; }
            if (am > 0) worst_m = fmax(worst_m, em / am);
            if (av > 0) worst_v = fmax(worst_v, ev / av);
        }
    }
    double G = max_half_gap(MS);   /* v = s^2 with s within G of the block's largest s: within 2G + G^2 of its largest v */
    CHECK(worst_m <= G + 2.4e-7 && worst_v <= 2 * G + G * G + 4.8e-7,
          "an fp32 AdamW checkpoint converts into 8-bit state within the bound: m %.5f, v %.5f of the block absmax", worst_m, worst_v);
    CHECK(g.opt.step == f.opt.step && g.step == f.step, "optimizer step carried over (%d)", g.opt.step);
    printf("checkpoints: 8-bit resume bit-exact; fp32 -> 8-bit conversion error m %.5f, v %.5f of the block absmax\n", worst_m, worst_v);
    free(pa); free(pb); free(m8); free(v8); free(m32); free(v32);
    trainer_free(&a); trainer_free(&b); trainer_free(&f); trainer_free(&g);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run);
    CHECK(system(cmd) == 0, "cleanup");
}

/* ------------------------------------------------------------------ config */
static void test_config(void) {
    Config c;
    config_defaults(&c);
    char err[512] = "";
    CHECK(c.optimizer == OPTIMIZER_ADAMW, "the default optimizer is adamw");
    CHECK(config_set(&c, "optimizer", "adamw8bit", err, sizeof err) == 0 && c.optimizer == OPTIMIZER_ADAMW8BIT, "optimizer=adamw8bit");
    int rc = config_set(&c, "optimizer", "adam8", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "'optimizer'") && strstr(err, "'adam8'") && strstr(err, "adamw|adamw8bit"),
          "--optimizer=adam8 is refused naming the key, the value and the choices: %s", err);
    printf("--optimizer=adam8: %s\n", err);
    const char *bad[] = {"0", "-4096", "4096x", "1e12", ""};   /* adamw8bit_min_numel: an integer in [1, 2^31 - 1] */
    for (int k = 0; k < 5; k++) {
        err[0] = 0;
        rc = config_set(&c, "adamw8bit_min_numel", bad[k], err, sizeof err);
        CHECK(rc == -1 && strstr(err, "adamw8bit_min_numel") && c.adamw8bit_min_numel == 4096,
              "adamw8bit_min_numel=%s is refused naming the key, the value kept: %s", bad[k], err);
        if (k == 0) printf("adamw8bit_min_numel=0: %s\n", err);
    }
    CHECK(config_set(&c, "adamw8bit_min_numel", "1", err, sizeof err) == 0 && c.adamw8bit_min_numel == 1, "adamw8bit_min_numel=1 taken");
}

int main(void) {
    rng_seed(&rng, 8);
    MS = adamw8bit_map();
    test_maps();
    test_quantization_error();
    test_kernel();
    test_update_bound();
    test_config();
    test_state_bytes();
    markov_shard(256, 300000);
    test_nonfinite_skip();
    test_checkpoint();
    test_training();
    unlink(shard_path);
    return test_summary();
}
