/* tests/test_ops.c — every CPU op against an independent computation.
 *
 * Forward: against a naive float64 loop written here. Backward: against central
 * finite differences of the scalar objective sum(w * forward(x)) with random w,
 * checked at sampled elements of every input. Shapes are random, odd sizes
 * included, from a fixed seed. */
#include "test.h"
#include "../common/util.h"
#include "../kernels/backend.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static Rng rng;
static const Backend *be;

static float *randn(size_t n, float std) {
    float *x = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng) * std;
    return x;
}
static int rand_int(int lo, int hi) { return lo + (int)(rng_u64(&rng) % (uint64_t)(hi - lo + 1)); }

/* ||a - ref|| / ||ref|| over the whole tensor; NaN or inf anywhere fails. */
static double max_rel(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* ---- finite differences: objective = sum(w * y), y = forward(inputs) ---- */
typedef double (*Objective)(void *ctx);

static double dot(const float *w, const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)w[i] * y[i];
    return s;
}

/* Compare the analytic gradient g of `x` (n elements) with central differences
 * at up to 40 sampled elements; returns the worst error relative to the rms of g. */
static double fd_check(Objective f, void *ctx, float *x, const float *g, size_t n, float h) {
    double rms = 0;
    for (size_t i = 0; i < n; i++) rms += (double)g[i] * g[i];
    rms = sqrt(rms / n) + 1e-12;
    double worst = 0;
    for (int s = 0; s < 40; s++) {
        size_t i = n <= 40 ? (size_t)s : (size_t)(rng_u64(&rng) % n);
        if (i >= n) break;
        float keep = x[i];
        x[i] = keep + h; double fp = f(ctx);
        x[i] = keep - h; double fm = f(ctx);
        x[i] = keep;
        double num = (fp - fm) / (2.0 * h);
        worst = fmax(worst, fabs(num - g[i]) / rms);
    }
    return worst;
}
#define FD_TOL 2e-2   /* fp32 forward, h ~ 1e-2: central differences agree to ~1e-3 of the gradient's rms */

/* ------------------------------------------------------------------ matmul */
typedef struct { int N, IC, OC; float *inp, *w, *out, *gw; } MatmulCtx;
static double matmul_obj(void *p) {
    MatmulCtx *c = p;
    be->matmul_forward(c->out, c->inp, c->w, c->N, c->IC, c->OC, NULL);
    return dot(c->gw, c->out, (size_t)c->N * c->OC);
}
static void test_matmul(void) {
    MatmulCtx c = {rand_int(1, 37), rand_int(1, 29), rand_int(1, 41), 0, 0, 0, 0};
    c.inp = randn((size_t)c.N * c.IC, 1); c.w = randn((size_t)c.OC * c.IC, 1);
    c.out = randn((size_t)c.N * c.OC, 1); c.gw = randn((size_t)c.N * c.OC, 1);
    double *ref = mallocCheck(sizeof(double) * c.N * c.OC);
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double s = 0;
            for (int i = 0; i < c.IC; i++) s += (double)c.inp[n * c.IC + i] * c.w[o * c.IC + i];
            ref[n * c.OC + o] = s;
        }
    matmul_obj(&c);
    double e = max_rel(c.out, ref, (size_t)c.N * c.OC);
    CHECK(e < 1e-5, "matmul forward %dx%dx%d rel err %.3g", c.N, c.IC, c.OC, e);
    /* a residual added in the epilogue */
    size_t no = (size_t)c.N * c.OC;
    float *res = randn(no, 1), *sum = mallocCheck(no * 4);
    double *ref_add = mallocCheck(no * sizeof(double));
    for (size_t i = 0; i < no; i++) ref_add[i] = ref[i] + res[i];
    be->matmul_forward(sum, c.inp, c.w, c.N, c.IC, c.OC, res);
    e = max_rel(sum, ref_add, no);
    CHECK(e < 1e-5, "matmul forward + residual rel err %.3g", e);
    free(res); free(sum); free(ref_add);
    float *dinp = randn((size_t)c.N * c.IC, 1), *dw0 = randn((size_t)c.OC * c.IC, 1);
    float *dw = mallocCheck(sizeof(float) * c.OC * c.IC);
    memcpy(dw, dw0, sizeof(float) * c.OC * c.IC);
    be->matmul_backward(dinp, dw, c.gw, c.inp, c.w, c.N, c.IC, c.OC, 1);
    for (size_t i = 0; i < (size_t)c.OC * c.IC; i++) dw[i] -= dw0[i];   /* dweight accumulates */
    e = fd_check(matmul_obj, &c, c.inp, dinp, (size_t)c.N * c.IC, 1e-2f);
    CHECK(e < FD_TOL, "matmul dinp vs finite differences: %.3g", e);
    e = fd_check(matmul_obj, &c, c.w, dw, (size_t)c.OC * c.IC, 1e-2f);
    CHECK(e < FD_TOL, "matmul dweight vs finite differences: %.3g", e);
    float *dw2 = mallocCheck(sizeof(float) * c.OC * c.IC);   /* dinp NULL: the weight gradient alone, accumulated */
    memcpy(dw2, dw, sizeof(float) * c.OC * c.IC);
    be->matmul_backward(NULL, dw2, c.gw, c.inp, c.w, c.N, c.IC, c.OC, 1);
    double worst = 0;
    for (size_t i = 0; i < (size_t)c.OC * c.IC; i++) worst = fmax(worst, fabs(dw2[i] - 2 * dw[i]) / (fabs(dw[i]) + 1e-3));
    CHECK(worst < 1e-4, "matmul backward with dinp NULL adds dweight once more: %.3g", worst);
    free(dw2);
    free(c.inp); free(c.w); free(c.out); free(c.gw); free(ref); free(dinp); free(dw); free(dw0);
}

/* ----------------------------------------------------------------- rmsnorm */
typedef struct { int N, C; float *inp, *w, *out, *rstd, *gw; } NormCtx;
static double norm_obj(void *p) {
    NormCtx *c = p;
    be->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
    return dot(c->gw, c->out, (size_t)c->N * c->C);
}
static void test_rmsnorm(void) {
    NormCtx c = {rand_int(1, 19), rand_int(2, 67), 0, 0, 0, 0, 0};
    size_t NC = (size_t)c.N * c.C;
    c.inp = randn(NC, 1); c.w = randn(c.C, 1); c.out = randn(NC, 1); c.rstd = randn(c.N, 1); c.gw = randn(NC, 1);
    double *ref = mallocCheck(sizeof(double) * NC);
    for (int n = 0; n < c.N; n++) {
        double ss = 0;
        for (int i = 0; i < c.C; i++) ss += (double)c.inp[n * c.C + i] * c.inp[n * c.C + i];
        double r = 1.0 / sqrt(ss / c.C + 1e-5);
        for (int i = 0; i < c.C; i++) ref[n * c.C + i] = c.inp[n * c.C + i] * r * c.w[i];
    }
    norm_obj(&c);
    double e = max_rel(c.out, ref, NC);
    CHECK(e < 1e-5, "rmsnorm forward %dx%d rel err %.3g", c.N, c.C, e);
    float *d0 = randn(NC, 1), *dinp = mallocCheck(NC * 4), *dw = calloc(c.C, 4);
    memcpy(dinp, d0, NC * 4);
    be->rmsnorm_backward(dinp, dw, c.gw, c.inp, c.w, c.rstd, c.N, c.C, 1);
    for (size_t i = 0; i < NC; i++) dinp[i] -= d0[i];                    /* dinp accumulates */
    e = fd_check(norm_obj, &c, c.inp, dinp, NC, 1e-2f);
    CHECK(e < FD_TOL, "rmsnorm dinp vs finite differences: %.3g", e);
    e = fd_check(norm_obj, &c, c.w, dw, c.C, 1e-2f);
    CHECK(e < FD_TOL, "rmsnorm dweight vs finite differences: %.3g", e);
    free(c.inp); free(c.w); free(c.out); free(c.rstd); free(c.gw); free(ref); free(d0); free(dinp); free(dw);
}

/* --------------------------------------------------- rope + attention (GQA) */
typedef struct { int B, T, NH, NKV, HD; float *qkv, *work, *out, *lse, *gw; } AttCtx;
static double rope_obj(void *p) {
    AttCtx *c = p;
    size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HD;
    memcpy(c->work, c->qkv, n * 4);
    be->rope_forward(c->work, c->B, c->T, c->NH, c->NKV, c->HD, 10000.0f, 3);
    return dot(c->gw, c->work, n);
}
static double att_obj(void *p) {
    AttCtx *c = p;
    be->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HD);
    return dot(c->gw, c->out, (size_t)c->B * c->T * c->NH * c->HD);
}
static void test_rope_attention(void) {
    int NKV = rand_int(1, 3);
    AttCtx c = {rand_int(1, 3), rand_int(1, 23), NKV * rand_int(1, 3), NKV, 2 * rand_int(1, 6), 0, 0, 0, 0, 0};
    int QKV = (c.NH + 2 * c.NKV) * c.HD;
    size_t n = (size_t)c.B * c.T * QKV, no = (size_t)c.B * c.T * c.NH * c.HD;
    c.qkv = randn(n, 1); c.work = randn(n, 1); c.gw = randn(n, 1);
    /* rope forward vs float64 rotate-half, positions from 3 */
    double *ref = mallocCheck(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) ref[i] = c.qkv[i];
    int half = c.HD / 2;
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++)
            for (int h = 0; h < c.NH + c.NKV; h++)
                for (int i = 0; i < half; i++) {
                    size_t at = ((size_t)b * c.T + t) * QKV + (size_t)h * c.HD;
                    double ang = (3 + t) * pow(10000.0, -2.0 * i / c.HD);
                    double x1 = c.qkv[at + i], x2 = c.qkv[at + i + half];
                    ref[at + i] = x1 * cos(ang) - x2 * sin(ang);
                    ref[at + i + half] = x2 * cos(ang) + x1 * sin(ang);
                }
    rope_obj(&c);
    double e = max_rel(c.work, ref, n);
    CHECK(e < 1e-5, "rope forward rel err %.3g (angles in fp32 as Hugging Face computes them)", e);
    float *g = mallocCheck(n * 4);
    memcpy(g, c.gw, n * 4);
    be->rope_backward(g, c.B, c.T, c.NH, c.NKV, c.HD, 10000.0f, 3);
    e = fd_check(rope_obj, &c, c.qkv, g, n, 1e-2f);
    CHECK(e < FD_TOL, "rope backward vs finite differences: %.3g", e);

    /* attention forward vs float64 with K/V expanded per head (GQA by copying, the slow obvious way) */
    c.out = randn(no, 1); c.lse = randn((size_t)c.B * c.NH * c.T, 1);
    float *gw_out = randn(no, 1);
    free(c.gw); c.gw = gw_out;
    att_obj(&c);
    double *oref = calloc(no, sizeof(double)), *lref = calloc((size_t)c.B * c.NH * c.T, sizeof(double));
    int G = c.NH / c.NKV;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.NH; h++)
            for (int t = 0; t < c.T; t++) {
                double s[64], mx = -1e300, sum = 0;
                const float *q = c.qkv + ((size_t)b * c.T + t) * QKV + h * c.HD;
                for (int u = 0; u <= t; u++) {
                    const float *k = c.qkv + ((size_t)b * c.T + u) * QKV + (c.NH + h / G) * c.HD;
                    s[u] = 0;
                    for (int i = 0; i < c.HD; i++) s[u] += (double)q[i] * k[i];
                    s[u] /= sqrt((double)c.HD);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) sum += exp(s[u] - mx);
                for (int u = 0; u <= t; u++) {
                    const float *v = c.qkv + ((size_t)b * c.T + u) * QKV + (c.NH + c.NKV + h / G) * c.HD;
                    for (int i = 0; i < c.HD; i++) oref[((size_t)b * c.T + t) * c.NH * c.HD + h * c.HD + i] += exp(s[u] - mx) / sum * v[i];
                }
                lref[((size_t)b * c.NH + h) * c.T + t] = mx + log(sum);
            }
    e = max_rel(c.out, oref, no);
    CHECK(e < 1e-5, "attention forward B=%d T=%d NH=%d NKV=%d HD=%d rel err %.3g", c.B, c.T, c.NH, c.NKV, c.HD, e);
    e = max_rel(c.lse, lref, (size_t)c.B * c.NH * c.T);
    CHECK(e < 1e-5, "attention lse rel err %.3g", e);
    float *dqkv = randn(n, 1);   /* poisoned: the backward must overwrite every element */
    size_t nwork = 1000;
    float *work = randn(nwork, 1);   /* lent: the CPU backends fill it with NaN (kernels/attention.h) */
    be->attention_backward(dqkv, c.gw, c.qkv, c.out, c.lse, c.B, c.T, c.NH, c.NKV, c.HD, 0, work, nwork * sizeof(float));
    int nan_all = 1;
    for (size_t i = 0; i < nwork; i++) nan_all &= isnan(work[i]);
    CHECK(nan_all, "attention backward: the lent scratch is not NaN after the call (a lender still using it would not see)");
    free(work);
    /* with rope_theta, the same gradient taken back through RoPE: the two ops in turn, bit for bit */
    float *fused = randn(n, 1), *turns = mallocCheck(n * sizeof(float));
    be->attention_backward(fused, c.gw, c.qkv, c.out, c.lse, c.B, c.T, c.NH, c.NKV, c.HD, 10000.0f, NULL, 0);
    memcpy(turns, dqkv, n * sizeof(float));
    be->rope_backward(turns, c.B, c.T, c.NH, c.NKV, c.HD, 10000.0f, 0);
    CHECK(memcmp(fused, turns, n * sizeof(float)) == 0, "attention backward with RoPE's backward folded in differs from the two ops");
    free(fused); free(turns);
    e = fd_check(att_obj, &c, c.qkv, dqkv, n, 1e-2f);   /* (moves c.out and c.lse) */
    CHECK(e < FD_TOL, "attention backward vs finite differences: %.3g", e);
    free(c.qkv); free(c.work); free(c.gw); free(c.out); free(c.lse); free(ref); free(g); free(oref); free(lref); free(dqkv);
}

/* The offset form (kernels/attention.h, context parallelism): a sequence cut into chunks, each chunk's queries at
 * their offset against the packed k|v of the whole sequence, gives the whole sequence's output, lse and gradients;
 * keys after a chunk's end are never read (NaN there changes nothing), the backward writes only dq of qkv and adds dk|dv. */
static void test_attention_at(void) {
    int NKV = rand_int(1, 3), n_chunks = rand_int(2, 4);
    int B = rand_int(1, 2), C = rand_int(1, 6), T = n_chunks * C, NH = NKV * rand_int(1, 3), HD = 2 * rand_int(1, 6);
    int QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD;
    size_t n = (size_t)B * T * QKV, no = (size_t)B * T * NH * HD, nkv = (size_t)B * T * KVW;
    float *qkv = randn(n, 1), *out = mallocCheck(no * 4), *lse = mallocCheck((size_t)B * NH * T * 4), *dout = randn(no, 1);
    float *dqkv = mallocCheck(n * 4), *kv = mallocCheck(nkv * 4), *dkv = calloc(nkv, 4);
    be->attention_forward(out, lse, qkv, B, T, NH, NKV, HD);
    be->attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, 0, NULL, 0);
    for (size_t r = 0; r < (size_t)B * T; r++) memcpy(kv + r * KVW, qkv + r * QKV + NH * HD, KVW * 4);   /* k|v are adjacent */
    float *q = mallocCheck((size_t)B * C * QKV * 4), *o = mallocCheck((size_t)B * C * NH * HD * 4), *l = mallocCheck((size_t)B * NH * C * 4);
    float *dy = mallocCheck((size_t)B * C * NH * HD * 4), *dq = mallocCheck((size_t)B * C * QKV * 4), *late = mallocCheck(nkv * 4);
    double worst_o = 0, worst_l = 0, worst_dq = 0;
    int kv_kept = 1, finite = 1;
    for (int j = n_chunks - 1; j >= 0; j--) {   /* the late chunks first: the order a key's sums come in is free */
        int q0 = j * C;
        for (int b = 0; b < B; b++) {
            memcpy(q + (size_t)b * C * QKV, qkv + ((size_t)b * T + q0) * QKV, (size_t)C * QKV * 4);
            memcpy(dy + (size_t)b * C * NH * HD, dout + ((size_t)b * T + q0) * NH * HD, (size_t)C * NH * HD * 4);
        }
        memcpy(late, kv, nkv * 4);   /* keys after this chunk: NaN, never to be read */
        for (int b = 0; b < B; b++)
            for (size_t i = (size_t)(q0 + C) * KVW; i < (size_t)T * KVW; i++) late[(size_t)b * T * KVW + i] = NAN;
        be->attention_forward_at(o, l, q, late, B, C, q0, T, NH, NKV, HD);
        for (size_t i = 0; i < (size_t)B * C * QKV; i++) dq[i] = 7.0f;   /* the k, v parts must stay 7 */
        be->attention_backward_at(dq, dkv, dy, q, late, o, l, B, C, q0, T, NH, NKV, HD);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < C; t++) {
                const float *row = dq + ((size_t)b * C + t) * QKV, *want = dqkv + ((size_t)b * T + q0 + t) * QKV;
                for (int i = 0; i < NH * HD; i++) worst_dq = fmax(worst_dq, fabs(row[i] - want[i]) / (fabs(want[i]) + 1e-3));
                for (int i = NH * HD; i < QKV; i++) kv_kept &= row[i] == 7.0f;
                for (int h = 0; h < NH; h++) {
                    worst_l = fmax(worst_l, fabs(l[((size_t)b * NH + h) * C + t] - lse[((size_t)b * NH + h) * T + q0 + t]));
                    for (int i = 0; i < HD; i++) {
                        float got = o[((size_t)b * C + t) * NH * HD + h * HD + i], w = out[((size_t)b * T + q0 + t) * NH * HD + h * HD + i];
                        finite &= isfinite(got);
                        worst_o = fmax(worst_o, fabs(got - w) / (fabs(w) + 1e-3));
                    }
                }
            }
    }
    double worst_dkv = 0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int i = 0; i < KVW; i++) {
            float w = dqkv[r * QKV + NH * HD + i];
            worst_dkv = fmax(worst_dkv, fabs(dkv[r * KVW + i] - w) / (fabs(w) + 1e-3));
        }
    CHECK(finite && worst_o < 1e-5 && worst_l < 1e-5, "attention at an offset, %d chunks of %d (B=%d NH=%d NKV=%d HD=%d): out %.3g lse %.3g "
          "from the whole sequence's%s", n_chunks, C, B, NH, NKV, HD, worst_o, worst_l, finite ? "" : " (a key after the chunk was read)");
    CHECK(worst_dq < 1e-4 && worst_dkv < 1e-4, "attention backward at an offset: dq %.3g, dk|dv summed over the chunks %.3g from the whole's",
          worst_dq, worst_dkv);
    CHECK(kv_kept, "attention backward at an offset wrote the k, v part of dqkv, which belongs to the caller");
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(kv); free(dkv); free(q); free(o); free(l); free(dy); free(dq); free(late);
}

/* ------------------------------------------------------------------ swiglu */
typedef struct { int N, F; float *h13, *out, *gw; } SwiCtx;
static double swi_obj(void *p) {
    SwiCtx *c = p;
    be->swiglu_forward(c->out, c->h13, c->N, c->F);
    return dot(c->gw, c->out, (size_t)c->N * c->F);
}
static void test_swiglu(void) {
    SwiCtx c = {rand_int(1, 17), rand_int(1, 45), 0, 0, 0};
    size_t nf = (size_t)c.N * c.F;
    c.h13 = randn(2 * nf, 2); c.out = randn(nf, 1); c.gw = randn(nf, 1);
    double *ref = mallocCheck(nf * sizeof(double));
    for (int n = 0; n < c.N; n++)
        for (int f = 0; f < c.F; f++) {
            double g = c.h13[n * 2 * c.F + f], u = c.h13[n * 2 * c.F + c.F + f];
            ref[n * c.F + f] = g / (1 + exp(-g)) * u;
        }
    swi_obj(&c);
    double e = max_rel(c.out, ref, nf);
    CHECK(e < 1e-5, "swiglu forward rel err %.3g", e);
    float *d = randn(2 * nf, 1);
    be->swiglu_backward(d, c.gw, c.h13, c.N, c.F);
    e = fd_check(swi_obj, &c, c.h13, d, 2 * nf, 1e-2f);
    CHECK(e < FD_TOL, "swiglu backward vs finite differences: %.3g", e);
    float *inplace = mallocCheck(2 * nf * 4);   /* the model runs it in place: dh13 over h13 */
    memcpy(inplace, c.h13, 2 * nf * 4);
    be->swiglu_backward(d, c.gw, c.h13, c.N, c.F);
    be->swiglu_backward(inplace, c.gw, inplace, c.N, c.F);
    CHECK(!memcmp(inplace, d, 2 * nf * 4), "swiglu backward in place equals out of place");
    free(inplace);
    free(c.h13); free(c.out); free(c.gw); free(ref); free(d);
}

/* ------------------------------------------- cross-entropy, vocab-parallel */
/* The vocabulary of V split into P blocks of Vb = ceil(V/P) columns, as tp
 * ranks hold it (the last block padded; a block may be padding only): pass 1
 * on every block, the statistics gathered (P,3,N), pass 2 on every block. The
 * padding holds large logits that must count for nothing. */
typedef struct { int N, V, P, Vb; float *logits /* (N,V) */, *block /* (P,N,Vb) */, *stats /* (P,3,N) */, *losses /* (P,N) */; int *targets; } CeCtx;
static int ce_valid(const CeCtx *c, int p) { int v = c->V - p * c->Vb; return v < 0 ? 0 : v < c->Vb ? v : c->Vb; }
static void ce_run(CeCtx *c, float dloss) {
    size_t NB = (size_t)c->N * c->Vb;
    for (int p = 0; p < c->P; p++)
        for (int n = 0; n < c->N; n++)
            for (int i = 0; i < c->Vb; i++) {
                int v = p * c->Vb + i;
                c->block[p * NB + (size_t)n * c->Vb + i] = v < c->V ? c->logits[(size_t)n * c->V + v] : 50.0f;
            }
    for (int p = 0; p < c->P; p++)
        be->cross_entropy_stats(c->stats + (size_t)p * 3 * c->N, c->block + p * NB, c->targets, c->N, c->Vb, p * c->Vb, ce_valid(c, p));
    for (int p = 0; p < c->P; p++)
        be->cross_entropy_loss(c->losses + (size_t)p * c->N, c->block + p * NB, c->stats, c->P, c->targets, c->N, c->Vb, p * c->Vb,
                               ce_valid(c, p), dloss, -1);
}
static double ce_obj(void *p) {
    CeCtx *c = p;
    ce_run(c, 0.0f);
    double s = 0;
    for (int n = 0; n < c->N; n++) s += c->losses[n];
    return s;
}
static void test_cross_entropy(void) {
    CeCtx c = {rand_int(2, 23), rand_int(2, 301), rand_int(1, 4), 0, 0, 0, 0, 0, 0};
    c.Vb = (c.V + c.P - 1) / c.P;
    size_t nv = (size_t)c.N * c.V, nb = (size_t)c.P * c.N * c.Vb;
    c.logits = randn(nv, 3); c.block = mallocCheck(nb * 4); c.stats = mallocCheck((size_t)c.P * 3 * c.N * 4);
    c.losses = mallocCheck((size_t)c.P * c.N * 4); c.targets = mallocCheck(c.N * sizeof(int));
    for (int n = 0; n < c.N; n++) c.targets[n] = n == 1 ? -1 : rand_int(0, c.V - 1);
    c.targets[0] = c.V - 1;   /* the last real column, next to the padding */
    double *ref = mallocCheck(c.N * sizeof(double));
    for (int n = 0; n < c.N; n++) {
        double mx = -1e300, s = 0;
        for (int i = 0; i < c.V; i++) mx = fmax(mx, c.logits[n * c.V + i]);
        for (int i = 0; i < c.V; i++) s += exp(c.logits[n * c.V + i] - mx);
        ref[n] = c.targets[n] < 0 ? 0 : mx + log(s) - c.logits[n * c.V + c.targets[n]];
    }
    ce_obj(&c);
    double e = max_rel(c.losses, ref, c.N);
    CHECK(e < 1e-5, "cross-entropy losses N=%d V=%d in %d blocks of %d: rel err %.3g", c.N, c.V, c.P, c.Vb, e);
    CHECK(!memcmp(c.losses, c.losses + (size_t)(c.P - 1) * c.N, c.N * 4), "every block computes the same losses");
    CHECK(c.losses[1] == 0.0f, "ignored target adds no loss (%g)", c.losses[1]);
    ce_run(&c, 1.0f);   /* the gradient, block by block, back into (N,V) */
    float *d = mallocCheck(nv * 4);
    int padding_zero = 1, ignored_zero = 1;
    for (int p = 0; p < c.P; p++)
        for (int n = 0; n < c.N; n++)
            for (int i = 0; i < c.Vb; i++) {
                int v = p * c.Vb + i;
                float g = c.block[((size_t)p * c.N + n) * c.Vb + i];
                if (v < c.V) d[(size_t)n * c.V + v] = g;
                else padding_zero &= g == 0.0f;
                if (n == 1) ignored_zero &= g == 0.0f;
            }
    CHECK(padding_zero, "the padding's logit gradient is zero");
    CHECK(ignored_zero, "ignored target's logit gradient is zero");
    e = fd_check(ce_obj, &c, c.logits, d, nv, 1e-2f);
    CHECK(e < FD_TOL, "cross-entropy dlogits vs finite differences (%d blocks): %.3g", c.P, e);
    /* one rank with the whole vocabulary passes no statistics: the same losses and gradient, bit for bit */
    float *z1 = mallocCheck(nv * 4), *z2 = mallocCheck(nv * 4), *st = mallocCheck(3 * (size_t)c.N * 4), *l2 = mallocCheck(c.N * 4);
    memcpy(z1, c.logits, nv * 4); memcpy(z2, c.logits, nv * 4);
    be->cross_entropy_stats(st, z1, c.targets, c.N, c.V, 0, c.V);
    be->cross_entropy_loss(c.losses, z1, st, 1, c.targets, c.N, c.V, 0, c.V, 0.5f, -1);
    be->cross_entropy_loss(l2, z2, NULL, 1, c.targets, c.N, c.V, 0, c.V, 0.5f, -1);
    CHECK(!memcmp(c.losses, l2, c.N * 4) && !memcmp(z1, z2, nv * 4), "cross-entropy without statistics (one part) equals the two passes");
    free(z1); free(z2); free(st); free(l2);
    free(c.logits); free(c.block); free(c.stats); free(c.losses); free(c.targets); free(ref); free(d);
}

/* ------------------------------------------------ embedding, vocab-parallel */
/* P blocks of the table: the blocks' lookups sum to the whole lookup; each block's gradient lands in its own rows. */
static void test_embedding(void) {
    int V = rand_int(1, 50), C = rand_int(1, 33), N = rand_int(1, 40), P = rand_int(1, 4), Vb = (V + P - 1) / P;
    float *wte = randn((size_t)P * Vb * C, 1), *out = randn((size_t)N * C, 1), *sum = calloc((size_t)N * C, 4);
    float *dout = randn((size_t)N * C, 1), *dw = calloc((size_t)P * Vb * C, 4);
    int *ids = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) ids[n] = rand_int(0, V - 1);
    for (int p = 0; p < P; p++) {
        int valid = V - p * Vb < 0 ? 0 : V - p * Vb < Vb ? V - p * Vb : Vb;
        be->embedding_forward(out, ids, wte + (size_t)p * Vb * C, N, C, p * Vb, valid);
        for (size_t i = 0; i < (size_t)N * C; i++) sum[i] += out[i];
        be->embedding_backward(dw + (size_t)p * Vb * C, dout, ids, N, C, p * Vb, valid);
    }
    int same = 1;
    for (int n = 0; n < N; n++) same &= !memcmp(sum + (size_t)n * C, wte + (size_t)ids[n] * C, C * 4);
    CHECK(same, "embedding forward: the %d blocks' rows (zeros for other blocks' ids) sum to the lookup", P);
    double *ref = calloc((size_t)P * Vb * C, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) ref[(size_t)ids[n] * C + i] += dout[(size_t)n * C + i];
    double e = max_rel(dw, ref, (size_t)P * Vb * C);
    CHECK(e < 1e-5, "embedding backward in %d blocks (repeated ids accumulate, each block its own rows) rel err %.3g", P, e);
    free(wte); free(out); free(sum); free(dout); free(ids); free(dw); free(ref);
}

/* ------------------------------------------------------- adamw, add, norms */
static void test_adamw_elementwise(void) {
    size_t n = (size_t)rand_int(5, 500);
    float *p = randn(n, 1), *g = randn(n, 1), *m = randn(n, 0.1f), *v = randn(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    double *pr = mallocCheck(n * 8);
    AdamWSlice sl[2] = {{0, n / 2, 0.1f}, {n / 2, n - n / 2, 0.0f}};
    AdamWHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = 3};
    for (size_t i = 0; i < n; i++) {
        double wd = i < n / 2 ? 0.1 : 0.0, gi = g[i] * 0.5;
        double mi = 0.9 * m[i] + 0.1 * gi, vi = 0.95 * v[i] + 0.05 * gi * gi;
        double mh = mi / (1 - pow(0.9, 3)), vh = vi / (1 - pow(0.95, 3));
        pr[i] = p[i] * (1 - 1e-2 * wd) - 1e-2 * mh / (sqrt(vh) + 1e-8);
    }
    be->adamw_update(p, NULL, g, m, v, sl, 2, h);
    double e = max_rel(p, pr, n);
    CHECK(e < 1e-5, "adamw update vs float64 rel err %.3g", e);
    float *a = randn(n, 1), *b = randn(n, 1), *o = mallocCheck(n * 4);
    be->add(o, a, b, n);
    double ss = 0, *sref = mallocCheck(n * 8);
    for (size_t i = 0; i < n; i++) { sref[i] = (double)a[i] + b[i]; ss += (double)a[i] * a[i]; }
    CHECK(max_rel(o, sref, n) < 1e-6, "add");
    CHECK(fabs(be->sum_squares(a, n) - ss) < 1e-6 * ss, "sum of squares");
    a[n / 2] = NAN;
    CHECK(isnan(be->sum_squares(a, n)), "sum of squares propagates NaN (the overflow check relies on it)");
    free(p); free(g); free(m); free(v); free(pr); free(a); free(b); free(o); free(sref);
}

int main(void) {
    rng_seed(&rng, 42);
    be = backend_cpu();
    for (int rep = 0; rep < 6; rep++) {
        test_matmul();
        test_rmsnorm();
        test_rope_attention();
        test_attention_at();
        test_swiglu();
        test_cross_entropy();
        test_embedding();
        test_adamw_elementwise();
    }
    return test_summary();
}
