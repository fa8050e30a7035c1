/* tests/gpu/test_cuda_ops.c — every CUDA op against the fp32 CPU reference, in
 * fp32, bf16 and fp16, on random shapes including odd ones.
 *
 * The idea: draw random fp32 inputs, round them to the act dtype, and give the
 * same values to both backends (the CPU one in fp32). Outputs are poisoned
 * (NaN bytes) before each GPU run, so an element the kernel forgot to write
 * fails; accumulating outputs (+=) start from the same random values on both.
 * The error is the norm ratio |gpu - cpu| / |cpu|; NaN never passes.
 * Tolerances: fp32 1e-5 (exact fp32 everywhere, matmuls included; with
 * LLM3D_TF32=1 matmuls get 2e-3: TF32 keeps 10 mantissa bits, ~5e-4 per
 * product), bf16 and fp16 1e-2 (the GPU rounds outputs to 8 or 11 bits).
 * In bf16, precision=fp8's matmuls (where the GPU has FP8 tensor cores) run
 * against the CPU's exact FP8 emulation: their casts of every bf16 value bit
 * for bit, the products at 1e-2, the amax records exact. dweight (fp32) gets
 * 5e-4: Hopper's FP8 tensor cores add with fewer bits than fp32 between
 * cuBLASLt's promotions to fp32 (measured up to 1.0e-4 on the H200).
 * Run on a GPU machine: tests/gpu/run.sh. */
#include "../../kernels/backend.h"
#include "../../kernels/cuda/cuda_extras.h"
#include "../../common/util.h"
#include "../test.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const Backend *cpu, *gpu;
static DType act;
static Rng rng;
static double tol_act, tol_matmul;

/* ---- host dtype helpers ---- */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_fp16(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }
static float from_fp16(uint16_t u) { _Float16 h; memcpy(&h, &u, 2); return (float)h; }
static float round_act(float f) {
    return act == DTYPE_FP32 ? f : act == DTYPE_BF16 ? from_bf16(to_bf16(f)) : from_fp16(to_fp16(f));
}

/* host fp32 (n), already rounded to act -> new device tensor in act dtype */
static void *up_act(const float *h, size_t n) {
    size_t es = dtype_size(act);
    void *d = gpu->alloc(n * es + 16, "test tensor");
    void *tmp = mallocCheck(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        if (act == DTYPE_FP32) ((float *)tmp)[i] = h[i];
        else ((uint16_t *)tmp)[i] = act == DTYPE_BF16 ? to_bf16(h[i]) : to_fp16(h[i]);
    }
    gpu->upload(d, tmp, n * es);
    free(tmp);
    return d;
}
static void down_act(float *h, const void *d, size_t n) {
    size_t es = dtype_size(act);
    void *tmp = mallocCheck(n * es + 1);
    gpu->download(tmp, d, n * es);
    for (size_t i = 0; i < n; i++)
        h[i] = act == DTYPE_FP32 ? ((float *)tmp)[i] : act == DTYPE_BF16 ? from_bf16(((uint16_t *)tmp)[i]) : from_fp16(((uint16_t *)tmp)[i]);
    free(tmp);
}
static float *up_f32(const float *h, size_t n) {
    float *d = gpu->alloc(n * 4 + 16, "test tensor");
    gpu->upload(d, h, n * 4);
    return d;
}
static void poison(void *d, size_t bytes) {   /* 0xff bytes: NaN in fp32, bf16 and fp16 */
    void *tmp = mallocCheck(bytes + 1);
    memset(tmp, 0xff, bytes);
    gpu->upload(d, tmp, bytes);
    free(tmp);
}
static float *rand_act(size_t n, float scale) {   /* random, rounded to act */
    float *h = mallocCheck(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = round_act(rng_normal(&rng) * scale);
    return h;
}
static float *copy_f(const float *x, size_t n) { float *y = mallocCheck(n * 4 + 4); memcpy(y, x, n * 4); return y; }

/* |got - ref| / |ref| */
static double rel_err(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}
/* |got - ref| / |ref| <= tol; NaN or inf in got fails */
static void compare(const char *what, const float *got, const float *ref, size_t n, double tol, const char *shape) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (!isfinite(got[i])) bad = i;
    double rel = rel_err(got, ref, n);
    int ok = bad == n && rel <= tol;
    printf("%s %-5s %-26s %-28s rel %.2e (tol %.0e)%s\n", ok ? "ok  " : "FAIL", dtype_name(act), what, shape, rel, tol,
           bad < n ? "  NON-FINITE OUTPUT" : "");
    CHECK(ok, "%s %s %s: rel %.3e > %.0e or non-finite at %zu (got %g, ref %g)", dtype_name(act), what, shape, rel, tol,
          bad, bad < n ? got[bad] : 0.0, bad < n ? ref[bad] : 0.0);
}

/* ---- the ops ---- */
static void test_matmul(int N, int IC, int OC) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d IC=%d OC=%d", N, IC, OC);
    float *x = rand_act((size_t)N * IC, 1), *w = rand_act((size_t)OC * IC, 0.1f), *dy = rand_act((size_t)N * OC, 1);
    float *dw0 = rand_act((size_t)OC * IC, 1);
    float *out = mallocCheck((size_t)N * OC * 4), *dx = mallocCheck((size_t)N * IC * 4), *dw = copy_f(dw0, (size_t)OC * IC);
    cpu->matmul_forward(out, x, w, N, IC, OC, NULL);
    cpu->matmul_backward(dx, dw, dy, x, w, N, IC, OC);
    void *gx = up_act(x, (size_t)N * IC), *gw = up_act(w, (size_t)OC * IC), *gdy = up_act(dy, (size_t)N * OC);
    void *gout = gpu->alloc((size_t)N * OC * dtype_size(act), "t"), *gdx = gpu->alloc((size_t)N * IC * dtype_size(act), "t");
    float *gdw = up_f32(dw0, (size_t)OC * IC);
    poison(gout, (size_t)N * OC * dtype_size(act));
    poison(gdx, (size_t)N * IC * dtype_size(act));
    gpu->matmul_forward(gout, gx, gw, N, IC, OC, NULL);
    gpu->matmul_backward(gdx, gdw, gdy, gx, gw, N, IC, OC);
    float *h = mallocCheck(((size_t)N * OC + (size_t)N * IC + (size_t)OC * IC) * 4);
    down_act(h, gout, (size_t)N * OC);
    compare("matmul_forward", h, out, (size_t)N * OC, tol_matmul, shape);
    /* a residual in the epilogue (dy stands in for it) */
    cpu->matmul_forward(out, x, w, N, IC, OC, dy);
    poison(gout, (size_t)N * OC * dtype_size(act));
    gpu->matmul_forward(gout, gx, gw, N, IC, OC, gdy);
    down_act(h, gout, (size_t)N * OC);
    compare("matmul_forward + residual", h, out, (size_t)N * OC, tol_matmul, shape);
    down_act(h, gdx, (size_t)N * IC);
    compare("matmul_backward dinp", h, dx, (size_t)N * IC, tol_matmul, shape);
    gpu->download(h, gdw, (size_t)OC * IC * 4);
    compare("matmul_backward dweight", h, dw, (size_t)OC * IC, tol_matmul, shape);
    /* dinp = NULL must skip dinp and still accumulate dweight */
    gpu->matmul_backward(NULL, gdw, gdy, gx, gw, N, IC, OC);
    cpu->matmul_backward(NULL, dw, dy, x, w, N, IC, OC);
    gpu->download(h, gdw, (size_t)OC * IC * 4);
    compare("matmul_backward dw twice", h, dw, (size_t)OC * IC, tol_matmul, shape);
    gpu->free(gx); gpu->free(gw); gpu->free(gdy); gpu->free(gout); gpu->free(gdx); gpu->free(gdw);
    free(x); free(w); free(dy); free(dw0); free(out); free(dx); free(dw); free(h);
}

/* ---- precision=fp8's linear layer (kernels/fp8.h, bf16 only): the GPU against the CPU's exact emulation ---- */
static float absmax(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}
/* the largest power of two s with max |x| * s <= fmax */
static float pow2_scale(const float *x, size_t n, float fmax) { return exp2f(floorf(log2f(fmax / absmax(x, n)))); }
static void check_amax(const char *what, const float *gamax, const float *ref, const char *shape) {   /* bit for bit */
    float h[3];
    gpu->download(h, gamax, sizeof h);
    int same = memcmp(h, ref, sizeof h) == 0;
    printf("%s %-5s %-26s %-28s amax %g %g %g (cpu %g %g %g)\n", same ? "ok  " : "FAIL", dtype_name(act), what, shape, h[0], h[1],
           h[2], ref[0], ref[1], ref[2]);
    CHECK(same, "%s %s: the amax record differs from the CPU's", what, shape);
}

/* Every bf16 value but NaN, cast by the GPU (scale 1), is fp8_round's: a product with an identity has one nonzero term
 * an output, exact in fp32 and in bf16, so it shows the cast. Row-major copies come out through out and dinp, the
 * transposed ones (of dout, of x) through dweight, where the identity stands in for the other operand. */
static void test_fp8_cast_exact(void) {
    enum { P = 4096, K = 16 };   /* the 65536 values as (P,K) or (K,P) */
    float *v = mallocCheck(P * K * 4), *eye = calloc(K * K, 4), *zero = calloc(P * K, 4), *h = mallocCheck(P * K * 4);
    for (int u = 0; u < P * K; u++) v[u] = isnan(from_bf16((uint16_t)u)) ? 0 : from_bf16((uint16_t)u);
    for (int i = 0; i < K; i++) eye[i * K + i] = 1;
    float amax[3] = {0, 0, 0}, *gamax = up_f32(amax, 3), *gdw = gpu->alloc(P * K * 4, "t");
    void *gv = up_act(v, P * K), *geye = up_act(eye, K * K), *gzero = up_act(zero, P * K), *gout = gpu->alloc(P * K * 2, "t");
    Fp8Matmul q = {1, 1, 1, gamax, gpu->alloc(matmul_fp8_scratch_bytes(1, P, K, K), "t")};
    for (int c = 0; c < 4; c++) {
        Fp8Format f = c == 0 || c == 3 ? FP8_E4M3 : FP8_E5M2;
        gpu->zero(gdw, P * K * 4);
        if (c == 0) gpu->matmul_fp8_forward(gout, gv, geye, P, K, K, NULL, &q);          /* out (P,K) = q(v) I */
        if (c == 1) gpu->matmul_fp8_backward(gout, gdw, gv, gzero, geye, P, K, K, &q);   /* dinp (P,K) = q(v) I */
        if (c == 2) gpu->matmul_fp8_backward(NULL, gdw, gv, geye, gzero, K, K, P, &q);   /* dW (P,K) = q(v (K,P))^T I */
        if (c == 3) gpu->matmul_fp8_backward(NULL, gdw, geye, gv, gzero, K, P, K, &q);   /* dW (K,P) = I q(v) */
        if (c < 2) down_act(h, gout, P * K);
        else gpu->download(h, gdw, P * K * 4);
        int bad = 0, first = -1;
        for (int i = 0; i < P * K; i++) {
            float ref = fp8_round(c == 2 ? v[(i % K) * P + i / K] : v[i], f);
            if (h[i] != ref && bad++ == 0) first = i;
        }
        const char *what[4] = {"e4m3 via out", "e5m2 via dinp", "e5m2 transposed via dW", "e4m3 transposed via dW"};
        printf("%s %-5s fp8 cast of every bf16: %-26s %d differ from fp8_round\n", bad ? "FAIL" : "ok  ", dtype_name(act), what[c], bad);
        CHECK(bad == 0, "fp8 cast %s: %d values differ from fp8_round, the first at %d (gpu %g)", what[c], bad, first,
              first < 0 ? 0.0 : h[first]);
    }
    gpu->download(amax, gamax, sizeof amax);
    CHECK(isinf(amax[0]) && isinf(amax[2]) && amax[1] == 1, "fp8 cast amax: %g %g %g, want inf 1 inf", amax[0], amax[1], amax[2]);
    gpu->free(gamax); gpu->free(gdw); gpu->free(gv); gpu->free(geye); gpu->free(gzero); gpu->free(gout); gpu->free(q.scratch);
    free(v); free(eye); free(zero); free(h);
}

static void test_matmul_fp8(int N, int IC, int OC) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d IC=%d OC=%d", N, IC, OC);
    size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, ny = (size_t)N * OC;
    float *x = rand_act(nx, 1), *w = rand_act(nw, 0.05f), *dy = rand_act(ny, 1e-3f), *res = rand_act(ny, 1), *dw0 = rand_act(nw, 0.01f);
    float sx = pow2_scale(x, nx, FP8_E4M3_MAX), sw = pow2_scale(w, nw, FP8_E4M3_MAX), sdy = pow2_scale(dy, ny, FP8_E5M2_MAX);
    float camax[3] = {0.25f, 1.0f, 0.0f}, *gamax = up_f32(camax, 3);   /* x's max passes 0.25, w's stays under 1: both folds */
    void *cscratch = mallocCheck(matmul_fp8_scratch_bytes(4, N, IC, OC));
    Fp8Matmul qc = {sx, sw, sdy, camax, cscratch}, qg = {sx, sw, sdy, gamax, gpu->alloc(matmul_fp8_scratch_bytes(1, N, IC, OC), "t")};
    float *out = mallocCheck(ny * 4), *dx = mallocCheck(nx * 4), *dw = copy_f(dw0, nw);
    float *h = mallocCheck((ny + nx + nw) * 4), *plain = mallocCheck((ny + nx + nw) * 4), *fp8 = mallocCheck((ny + nx) * 4);
    void *gx = up_act(x, nx), *gw = up_act(w, nw), *gdy = up_act(dy, ny), *gres = up_act(res, ny);
    void *gout = gpu->alloc(ny * 2, "t"), *gdx = gpu->alloc(nx * 2, "t"), *gout2 = gpu->alloc(ny * 2, "t"), *gdx2 = gpu->alloc(nx * 2, "t");
    float *gdw = up_f32(dw0, nw), *gdw2 = up_f32(dw0, nw);
    for (int sat = 0; sat < 2; sat++) {   /* sat: every scale 8x larger, so the largest values saturate (past 448, 57344) */
        const char *tag = sat ? " (saturating)" : "";
        char name[64];
        if (sat) {
            int past = 0;
            for (size_t i = 0; i < nx; i++) past += fabsf(x[i]) * 8 * sx > FP8_E4M3_MAX;
            CHECK(past > 0, "fp8 %s: no value of x saturates", shape);
            qc.x_scale = qg.x_scale = 8 * sx; qc.w_scale = qg.w_scale = 8 * sw; qc.dout_scale = qg.dout_scale = 8 * sdy;
            memcpy(dw, dw0, nw * 4);
            gpu->upload(gdw, dw0, nw * 4);
        }
        for (int r = 0; r < 2; r++) {   /* without, then with a residual */
            matmul_fp8_forward_cpu(out, x, w, N, IC, OC, r ? res : NULL, &qc);
            for (size_t i = 0; i < ny; i++) out[i] = round_act(out[i]);
            poison(gout, ny * 2);
            gpu->matmul_fp8_forward(gout, gx, gw, N, IC, OC, r ? gres : NULL, &qg);
            down_act(h, gout, ny);
            snprintf(name, sizeof name, "matmul_fp8_forward%s%s", r ? " + res" : "", tag);
            compare(name, h, out, ny, tol_act, shape);
            if (!r && !sat) memcpy(fp8, h, ny * 4);
        }
        matmul_fp8_backward_cpu(dx, dw, dy, x, w, N, IC, OC, &qc);
        for (size_t i = 0; i < nx; i++) dx[i] = round_act(dx[i]);
        poison(gdx, nx * 2);
        gpu->matmul_fp8_backward(gdx, gdw, gdy, gx, gw, N, IC, OC, &qg);
        down_act(h, gdx, nx);
        snprintf(name, sizeof name, "matmul_fp8_backward dinp%s", tag);
        compare(name, h, dx, nx, tol_act, shape);
        if (!sat) memcpy(fp8 + ny, h, nx * 4);
        for (int twice = 0; twice < 2; twice++) {   /* the second time without dinp: dweight accumulates */
            if (twice) {
                matmul_fp8_backward_cpu(NULL, dw, dy, x, w, N, IC, OC, &qc);
                gpu->matmul_fp8_backward(NULL, gdw, gdy, gx, gw, N, IC, OC, &qg);
            }
            gpu->download(h, gdw, nw * 4);
            snprintf(name, sizeof name, "matmul_fp8_backward dW%s%s", twice ? " x2" : "", tag);
            compare(name, h, dw, nw, 5e-4, shape);
        }
        check_amax(sat ? "matmul_fp8 (saturating)" : "matmul_fp8", gamax, camax, shape);
    }
    /* a scale of 0 (no history): the plain bf16 products bit for bit, and the maxima recorded (a NaN among them wins) */
    float zero[3] = {0, 0, 0}, want[3] = {absmax(x, nx), absmax(w, nw), absmax(dy, ny)};
    gpu->upload(gamax, zero, sizeof zero);
    Fp8Matmul qz = qg;
    qz.x_scale = 0;
    gpu->matmul_fp8_forward(gout, gx, gw, N, IC, OC, gres, &qz);
    gpu->matmul_forward(gout2, gx, gw, N, IC, OC, gres);
    qz.x_scale = sx;
    qz.dout_scale = 0;
    gpu->upload(gdw, dw0, nw * 4);
    gpu->matmul_fp8_backward(gdx, gdw, gdy, gx, gw, N, IC, OC, &qz);
    gpu->matmul_backward(gdx2, gdw2, gdy, gx, gw, N, IC, OC);
    down_act(h, gout, ny); down_act(plain, gout2, ny);
    compare("matmul_fp8_forward scale 0", h, plain, ny, 0, shape);
    down_act(h, gdx, nx); down_act(plain, gdx2, nx);
    compare("matmul_fp8_backward dinp scale 0", h, plain, nx, 0, shape);
    gpu->download(h, gdw, nw * 4); gpu->download(plain, gdw2, nw * 4);
    compare("matmul_fp8_backward dW scale 0", h, plain, nw, 0, shape);
    check_amax("matmul_fp8 scale 0", gamax, want, shape);
    /* the FP8 path ran: the plain products are farther from its results than the tolerance (E4M3 keeps 3 mantissa bits) */
    gpu->matmul_forward(gout2, gx, gw, N, IC, OC, NULL);
    down_act(plain, gout2, ny);
    down_act(plain + ny, gdx2, nx);
    double dout_rel = rel_err(fp8, plain, ny), dinp_rel = rel_err(fp8 + ny, plain + ny, nx);
    int ran = dout_rel > tol_act && dinp_rel > tol_act;
    printf("%s %-5s %-26s %-28s fp8 vs bf16: out %.2e, dinp %.2e (> %.0e)\n", ran ? "ok  " : "FAIL", dtype_name(act),
           "matmul_fp8 path taken", shape, dout_rel, dinp_rel, tol_act);
    CHECK(ran, "matmul_fp8 %s: its results are within %.0e of the plain bf16 products: the FP8 path did not run", shape, tol_act);
    uint16_t nan16 = 0x7fc0;   /* a bf16 NaN in x */
    gpu->upload((uint16_t *)gx + nx / 2, &nan16, 2);
    gpu->upload(gamax, zero, sizeof zero);
    gpu->matmul_fp8_forward(gout, gx, gw, N, IC, OC, NULL, &qg);
    gpu->download(h, gamax, 12);
    CHECK(isnan(h[0]) && h[1] == want[1], "matmul_fp8 %s: a NaN in x must be its max (amax %g %g)", shape, h[0], h[1]);
    gpu->free(gx); gpu->free(gw); gpu->free(gdy); gpu->free(gres); gpu->free(gout); gpu->free(gdx); gpu->free(gout2); gpu->free(gdx2);
    gpu->free(gdw); gpu->free(gdw2); gpu->free(gamax); gpu->free(qg.scratch);
    free(x); free(w); free(dy); free(res); free(dw0); free(cscratch); free(out); free(dx); free(dw); free(h); free(plain); free(fp8);
}

/* fp8_unsupported: NULL from compute capability 8.9 (else a refusal naming it), a refusal with LLM3D_FP8=off; 1 when FP8 runs */
static int fp8_runs(void) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    char *env = getenv("LLM3D_FP8") ? strdup(getenv("LLM3D_FP8")) : NULL;
    unsetenv("LLM3D_FP8");
    const char *why = gpu->fp8_unsupported();
    CHECK(major * 10 + minor >= 89 ? !why : why && strstr(why, "compute capability 8.9"),
          "fp8_unsupported on a GPU of compute capability %d.%d: %s", major, minor, why ? why : "NULL");
    printf("fp8 on compute capability %d.%d: %s\n", major, minor, why ? why : "runs");
    setenv("LLM3D_FP8", "off", 1);
    const char *off = gpu->fp8_unsupported();
    CHECK(off && strstr(off, "LLM3D_FP8=off"), "fp8_unsupported with LLM3D_FP8=off: %s", off ? off : "NULL");
    printf("fp8 with LLM3D_FP8=off: %s\n", off ? off : "NULL");
    if (env) setenv("LLM3D_FP8", env, 1);
    else unsetenv("LLM3D_FP8");
    free(env);
    return !why;
}

/* The table holds block `part` of `parts` blocks of a V-row vocabulary (vocab-parallel): ids outside it give zero rows, no gradient. */
static void test_embedding(int N, int C, int V, int parts, int part) {
    char shape[64];
    int Vb = (V + parts - 1) / parts, v0 = part * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d block %d/%d", N, C, V, part, parts);
    int *ids = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) ids[n] = (int)(rng_u64(&rng) % (uint64_t)(n % 3 ? V : 3));   /* many repeats */
    float *wte = rand_act((size_t)Vb * C, 1), *dy = rand_act((size_t)N * C, 1), *dw0 = rand_act((size_t)Vb * C, 1);
    float *out = mallocCheck((size_t)N * C * 4), *dw = copy_f(dw0, (size_t)Vb * C);
    cpu->embedding_forward(out, ids, wte, N, C, v0, valid);
    cpu->embedding_backward(dw, dy, ids, N, C, v0, valid);
    int *gids = gpu->alloc(N * sizeof(int), "t");
    gpu->upload(gids, ids, N * sizeof(int));
    void *gwte = up_act(wte, (size_t)Vb * C), *gdy = up_act(dy, (size_t)N * C), *gout = gpu->alloc((size_t)N * C * dtype_size(act), "t");
    float *gdw = up_f32(dw0, (size_t)Vb * C);
    poison(gout, (size_t)N * C * dtype_size(act));
    gpu->embedding_forward(gout, gids, gwte, N, C, v0, valid);
    gpu->embedding_backward(gdw, gdy, gids, N, C, v0, valid);
    float *h = mallocCheck(((size_t)N + Vb) * C * 4);
    down_act(h, gout, (size_t)N * C);
    compare("embedding_forward", h, out, (size_t)N * C, 0, shape);
    gpu->download(h, gdw, (size_t)Vb * C * 4);
    compare("embedding_backward", h, dw, (size_t)Vb * C, act == DTYPE_FP32 ? 1e-6 : tol_act, shape);
    /* determinism: the same backward twice gives the same bits */
    float *h2 = mallocCheck((size_t)Vb * C * 4);
    gpu->upload(gdw, dw0, (size_t)Vb * C * 4);
    gpu->embedding_backward(gdw, gdy, gids, N, C, v0, valid);
    gpu->download(h2, gdw, (size_t)Vb * C * 4);
    CHECK(memcmp(h, h2, (size_t)Vb * C * 4) == 0, "embedding_backward is not deterministic (%s)", shape);
    gpu->free(gids); gpu->free(gwte); gpu->free(gdy); gpu->free(gout); gpu->free(gdw);
    free(ids); free(wte); free(dy); free(dw0); free(out); free(dw); free(h); free(h2);
}

static void test_rmsnorm(int N, int C) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    float *x = rand_act((size_t)N * C, 2), *w = rand_act(C, 1), *dy = rand_act((size_t)N * C, 1), *dx0 = rand_act((size_t)N * C, 1);
    float *dw0 = rand_act(C, 1);
    float *out = mallocCheck((size_t)N * C * 4), *rstd = mallocCheck(N * 4), *dx = copy_f(dx0, (size_t)N * C), *dw = copy_f(dw0, C);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    cpu->rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    void *gx = up_act(x, (size_t)N * C), *gw = up_act(w, C), *gdy = up_act(dy, (size_t)N * C), *gdx = up_act(dx0, (size_t)N * C);
    void *gout = gpu->alloc((size_t)N * C * dtype_size(act), "t");
    float *grstd = gpu->alloc(N * 4, "t"), *gdw = up_f32(dw0, C), *grstd_cpu = up_f32(rstd, N);
    poison(gout, (size_t)N * C * dtype_size(act));
    poison(grstd, N * 4);
    gpu->rmsnorm_forward(gout, grstd, gx, gw, N, C, 1e-5f);
    gpu->rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd_cpu, N, C);
    float *h = mallocCheck((size_t)N * C * 4);
    down_act(h, gout, (size_t)N * C);
    compare("rmsnorm_forward", h, out, (size_t)N * C, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->download(h, grstd, N * 4);
    compare("rmsnorm_forward rstd", h, rstd, N, 1e-5, shape);
    down_act(h, gdx, (size_t)N * C);
    compare("rmsnorm_backward dinp (+=)", h, dx, (size_t)N * C, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->download(h, gdw, C * 4);
    compare("rmsnorm_backward dweight", h, dw, C, 1e-5, shape);
    gpu->free(gx); gpu->free(gw); gpu->free(gdy); gpu->free(gdx); gpu->free(gout); gpu->free(grstd); gpu->free(gdw); gpu->free(grstd_cpu);
    free(x); free(w); free(dy); free(dx0); free(dw0); free(out); free(rstd); free(dx); free(dw); free(h);
}

static void test_rope(int B, int T, int NH, int NKV, int HD, int pos0) {
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HD=%d p0=%d", B, T, NH, NKV, HD, pos0);
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    float *x = rand_act(n, 1), *f = copy_f(x, n), *b = copy_f(x, n);
    cpu->rope_forward(f, B, T, NH, NKV, HD, 10000.0f, pos0);
    cpu->rope_backward(b, B, T, NH, NKV, HD, 10000.0f, pos0);
    void *gf = up_act(x, n), *gb = up_act(x, n);
    gpu->rope_forward(gf, B, T, NH, NKV, HD, 10000.0f, pos0);
    gpu->rope_backward(gb, B, T, NH, NKV, HD, 10000.0f, pos0);
    float *h = mallocCheck(n * 4);
    down_act(h, gf, n);
    compare("rope_forward", h, f, n, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    down_act(h, gb, n);
    compare("rope_backward", h, b, n, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->free(gf); gpu->free(gb);
    free(x); free(f); free(b); free(h);
}

typedef void AttF(void *, float *, const void *, int, int, int, int, int);
typedef void AttB(void *, const void *, const void *, const void *, const float *, int, int, int, int, int, float, void *, size_t);
/* theta > 0: the backward also takes its gradient back through RoPE (the CPU reference: the two ops in turn) */
static void test_attention(const char *path, AttF *fwd, AttB *bwd, int B, int T, int NH, int NKV, int HD, float theta) {
    char shape[96], name[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HD=%d%s", B, T, NH, NKV, HD, theta > 0 ? " +rope" : "");
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T;
    float *qkv = rand_act(nq, 1.5f), *dy = rand_act(no, 1);
    float *out = mallocCheck(no * 4), *lse = mallocCheck(nl * 4), *dqkv = mallocCheck(nq * 4);
    cpu->attention_forward(out, lse, qkv, B, T, NH, NKV, HD);
    for (size_t i = 0; i < no; i++) out[i] = round_act(out[i]);   /* the backward's input, as the model would store it */
    cpu->attention_backward(dqkv, dy, qkv, out, lse, B, T, NH, NKV, HD, theta, NULL, 0);
    void *gqkv = up_act(qkv, nq), *gdy = up_act(dy, no), *gout_cpu = up_act(out, no);
    void *gout = gpu->alloc(no * dtype_size(act), "t"), *gdqkv = gpu->alloc(nq * dtype_size(act), "t");
    float *glse = gpu->alloc(nl * 4, "t"), *glse_cpu = up_f32(lse, nl);
    poison(gout, no * dtype_size(act));
    poison(glse, nl * 4);
    poison(gdqkv, nq * dtype_size(act));
    /* scratch lent to the backward, enough for wgmma's dS tiles of the whole batch: they go there, not in its own */
    size_t all = attention_ds_bytes(B, T, NH, HD, (size_t)-1) + 256;
    void *work = gpu->alloc(all, "t");
    fwd(gout, glse, gqkv, B, T, NH, NKV, HD);
    bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);
    float *h = mallocCheck(nq * 4);
    double tol = act == DTYPE_FP32 ? 1e-5 : tol_act;
    snprintf(name, sizeof name, "attention_fwd %s", path);
    down_act(h, gout, no);
    compare(name, h, out, no, tol, shape);
    snprintf(name, sizeof name, "attention_fwd lse %s", path);
    gpu->download(h, glse, nl * 4);
    compare(name, h, lse, nl, act == DTYPE_FP32 ? 1e-5 : 1e-3, shape);
    snprintf(name, sizeof name, "attention_bwd %s", path);
    down_act(h, gdqkv, nq);
    compare(name, h, dqkv, nq, tol, shape);
    size_t cap = cuda_attention_ds_cap, one_seq = attention_ds_bytes(1, T, NH, HD, (size_t)-1);
    int wgmma = !strcmp(path, "wgmma") && one_seq > 0 && act != DTYPE_FP32;   /* fp32 runs the readable kernels */
    if (!strcmp(path, "wgmma") && act != DTYPE_FP32 && HD == 64 && T > ATTENTION_DS_MAX_T) {   /* the compare above ran this path */
        int stores = attention_wgmma_backward_stores(T, NH);
        printf("%s %-5s attention_bwd wgmma past T=%d takes the recompute path %s\n", stores ? "FAIL" : "ok  ", dtype_name(act),
               ATTENTION_DS_MAX_T, shape);
        CHECK(!stores, "%s attention_bwd wgmma %s: past ATTENTION_DS_MAX_T it still stores dS tiles", dtype_name(act), shape);
    }
    if (wgmma) {   /* a sequence's dS tiles over the cap: the backward computes dS again in its dq kernel, and is right */
        cuda_attention_ds_cap = one_seq - 1;
        int stores = attention_wgmma_backward_stores(T, NH);
        printf("%s %-5s attention_bwd wgmma over the dS cap takes the recompute path %s\n", stores ? "FAIL" : "ok  ", dtype_name(act), shape);
        CHECK(!stores, "%s attention_bwd wgmma %s: with the cap under one sequence's tiles it still stores them", dtype_name(act), shape);
        poison(gdqkv, nq * dtype_size(act));
        bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);
        cuda_attention_ds_cap = cap;
        down_act(h, gdqkv, nq);
        compare("attention_bwd wgmma recompute", h, dqkv, nq, tol, shape);
    }
    {   /* deterministic: a second backward gives the same bits (no atomics on any path); wgmma's runs one sequence a
         * slice of its dS tiles the second time, in its own scratch (nothing lent), which must not change a bit either */
        size_t bytes = nq * dtype_size(act);
        void *again = gpu->alloc(bytes, "t");
        char *a = mallocCheck(bytes), *b = mallocCheck(bytes);
        poison(again, bytes);
        if (wgmma) {
            bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);   /* the default cap's result again */
            cuda_attention_ds_cap = one_seq;
        }
        bwd(again, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, NULL, 0);
        cuda_attention_ds_cap = cap;
        gpu->download(a, gdqkv, bytes);
        gpu->download(b, again, bytes);
        int same = memcmp(a, b, bytes) == 0;
        printf("%s %-5s attention_bwd %-12s deterministic %s\n", same ? "ok  " : "FAIL", dtype_name(act), path, shape);
        CHECK(same, "%s attention_bwd %s %s: a second backward gave different bits", dtype_name(act), path, shape);
        gpu->free(again);
        free(a); free(b);
    }
    gpu->free(gqkv); gpu->free(gdy); gpu->free(gout_cpu); gpu->free(gout); gpu->free(gdqkv); gpu->free(glse); gpu->free(glse_cpu);
    gpu->free(work);
    free(qkv); free(dy); free(out); free(lse); free(dqkv); free(h);
}

static void test_swiglu(int N, int F) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d", N, F);
    float *h13 = rand_act((size_t)N * 2 * F, 2), *dy = rand_act((size_t)N * F, 1);
    float *out = mallocCheck((size_t)N * F * 4), *d = mallocCheck((size_t)N * 2 * F * 4);
    cpu->swiglu_forward(out, h13, N, F);
    cpu->swiglu_backward(d, dy, h13, N, F);
    void *gh = up_act(h13, (size_t)N * 2 * F), *gdy = up_act(dy, (size_t)N * F);
    void *gout = gpu->alloc((size_t)N * F * dtype_size(act), "t"), *gd = gpu->alloc((size_t)N * 2 * F * dtype_size(act), "t");
    poison(gout, (size_t)N * F * dtype_size(act));
    poison(gd, (size_t)N * 2 * F * dtype_size(act));
    gpu->swiglu_forward(gout, gh, N, F);
    gpu->swiglu_backward(gd, gdy, gh, N, F);
    float *h = mallocCheck((size_t)N * 2 * F * 4);
    down_act(h, gout, (size_t)N * F);
    compare("swiglu_forward", h, out, (size_t)N * F, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    down_act(h, gd, (size_t)N * 2 * F);
    compare("swiglu_backward", h, d, (size_t)N * 2 * F, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->free(gh); gpu->free(gdy); gpu->free(gout); gpu->free(gd);
    free(h13); free(dy); free(out); free(d); free(h);
}

/* The vocabulary of V split into `parts` blocks of Vb = ceil(V/parts) columns
 * (the last padded; its padding holds large logits that must count for
 * nothing). Pass 1 on every block on both backends; the CPU's statistics
 * gathered (parts,3,N) feed pass 2 of every block on both. */
static void test_cross_entropy(int N, int V, int parts) {
    char shape[64];
    int Vb = (V + parts - 1) / parts;
    snprintf(shape, sizeof shape, "N=%d V=%d in %d blocks", N, V, parts);
    size_t nb = (size_t)N * Vb, ns = 3 * (size_t)N;
    float *z = mallocCheck(parts * nb * 4 + 4), *stats = mallocCheck(parts * ns * 4), *loss = mallocCheck(N * 4);
    float *h = mallocCheck(nb * 4 + ns * 4 + 4), *gs = mallocCheck(ns * 4);
    int *y = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) y[n] = n % 5 == 4 ? -100 : (int)(rng_u64(&rng) % (uint64_t)V);
    y[0] = V - 1;
    for (int p = 0; p < parts; p++)
        for (size_t i = 0; i < nb; i++) z[p * nb + i] = p * Vb + (int)(i % Vb) < V ? round_act(rng_normal(&rng) * 3) : 50.0f;
    float dloss = 1.0f / N;
    int *gy = gpu->alloc(N * sizeof(int), "t");
    gpu->upload(gy, y, N * sizeof(int));
    float *gstats = gpu->alloc(parts * ns * 4, "t"), *gl = gpu->alloc(N * 4, "t");
    for (int p = 0; p < parts; p++) {   /* pass 1 */
        int v0 = p * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
        cpu->cross_entropy_stats(stats + p * ns, z + p * nb, y, N, Vb, v0, valid);
        void *gz = up_act(z + p * nb, nb);
        poison(gstats, ns * 4);
        gpu->cross_entropy_stats(gstats, gz, gy, N, Vb, v0, valid);
        gpu->download(gs, gstats, ns * 4);
        int same_inf = 1;   /* a block of padding only has max -inf on both; compared as 0 */
        for (int n = 0; n < N; n++) {
            if (isinf(stats[p * ns + n]) || isinf(gs[n])) { same_inf &= stats[p * ns + n] == gs[n]; gs[n] = 0; }
        }
        float *ref = copy_f(stats + p * ns, ns);
        for (int n = 0; n < N; n++) if (isinf(ref[n])) ref[n] = 0;
        CHECK(same_inf, "cross_entropy_stats: -inf maxima differ (%s)", shape);
        compare("cross_entropy_stats", gs, ref, ns, 1e-5, shape);
        free(ref);
        gpu->free(gz);
    }
    gpu->upload(gstats, stats, parts * ns * 4);
    for (int p = 0; p < parts; p++) {   /* pass 2, with and without the gradient */
        int v0 = p * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
        float *zc = copy_f(z + p * nb, nb);
        cpu->cross_entropy_loss(loss, zc, stats, parts, y, N, Vb, v0, valid, dloss, -100);
        void *gz = up_act(z + p * nb, nb), *gz2 = up_act(z + p * nb, nb);
        poison(gl, N * 4);
        gpu->cross_entropy_loss(gl, gz, gstats, parts, gy, N, Vb, v0, valid, dloss, -100);
        gpu->download(h, gl, N * 4);
        compare("cross_entropy_loss loss", h, loss, N, 1e-5, shape);
        poison(gl, N * 4);
        gpu->cross_entropy_loss(gl, gz2, gstats, parts, gy, N, Vb, v0, valid, 0.0f, -100);   /* dloss 0: losses only */
        gpu->download(h, gl, N * 4);
        compare("cross_entropy_loss (dloss=0)", h, loss, N, 1e-5, shape);
        down_act(h, gz, nb);
        compare("cross_entropy_loss dlogits", h, zc, nb, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
        down_act(h, gz2, nb);
        compare("cross_entropy_loss logits kept", h, z + p * nb, nb, 0, shape);
        if (parts == 1) {   /* one part without statistics: the kernel sums up each row itself */
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            poison(gl, N * 4);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, dloss, -100);
            gpu->download(h, gl, N * 4);
            compare("cross_entropy_loss, no stats: loss", h, loss, N, 1e-5, shape);
            down_act(h, gz2, nb);
            compare("cross_entropy_loss, no stats: dlogits", h, zc, nb, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            poison(gl, N * 4);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, 0.0f, -100);   /* losses only: logits kept */
            gpu->download(h, gl, N * 4);
            compare("cross_entropy_loss, no stats (dloss=0): loss", h, loss, N, 1e-5, shape);
            down_act(h, gz2, nb);
            compare("cross_entropy_loss, no stats (dloss=0): logits kept", h, z, nb, 0, shape);
        }
        gpu->free(gz); gpu->free(gz2);
        free(zc);
    }
    gpu->free(gy); gpu->free(gstats); gpu->free(gl);
    free(z); free(stats); free(loss); free(h); free(gs); free(y);
}

static void test_adamw(void) {
    /* slices with a gap between them (the gap must stay untouched) and different decays */
    AdamWSlice sl[4] = {{0, 1000, 0.1f}, {1000, 7, 0.0f}, {1100, 50000, 0.1f}, {51100, 3, 0.0f}};
    size_t P = 51103;
    float *p = rand_act(P, 1), *g = rand_act(P, 0.01f), *m = rand_act(P, 0.001f), *v = mallocCheck(P * 4);
    for (size_t i = 0; i < P; i++) v[i] = fabsf(rng_normal(&rng)) * 1e-5f;
    float *pc = copy_f(p, P), *mc = copy_f(m, P), *vc = copy_f(v, P), *pcomp = copy_f(p, P);
    AdamWHyper hy = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = 3};
    cpu->adamw_update(pc, pcomp, g, mc, vc, sl, 4, hy);
    float *gp = up_f32(p, P), *gg = up_f32(g, P), *gm = up_f32(m, P), *gv = up_f32(v, P);
    void *gpc = gpu->alloc(P * dtype_size(act), "t");
    poison(gpc, P * dtype_size(act));
    gpu->adamw_update(gp, gpc, gg, gm, gv, sl, 4, hy);
    float *h = mallocCheck(P * 4);
    gpu->download(h, gp, P * 4);
    compare("adamw params", h, pc, P, 1e-5, "P=51103 4 slices");
    gpu->download(h, gm, P * 4);
    compare("adamw m", h, mc, P, 1e-5, "P=51103 4 slices");
    gpu->download(h, gv, P * 4);
    compare("adamw v", h, vc, P, 1e-5, "P=51103 4 slices");
    down_act(h, gpc, P);
    for (size_t i = 1007; i < 1100; i++) { h[i] = 0; pcomp[i] = 0; }   /* the gap: never written (poison stays) */
    for (size_t i = 0; i < P; i++) pcomp[i] = round_act(pcomp[i]);
    compare("adamw params_compute", h, pcomp, P, act == DTYPE_FP32 ? 1e-5 : 4e-3, "P=51103 4 slices");
    /* NULL params_compute, second step with the cached slice list */
    hy.step = 4;
    cpu->adamw_update(pc, NULL, g, mc, vc, sl, 4, hy);
    gpu->adamw_update(gp, NULL, gg, gm, gv, sl, 4, hy);
    gpu->download(h, gp, P * 4);
    compare("adamw params step 2", h, pc, P, 1e-5, "P=51103 4 slices");
    gpu->free(gp); gpu->free(gg); gpu->free(gm); gpu->free(gv); gpu->free(gpc);
    free(p); free(g); free(m); free(v); free(pc); free(mc); free(vc); free(pcomp); free(h);
}

static void test_elementwise(size_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *a = rand_act(n, 1), *b = rand_act(n, 1), *o = mallocCheck(n * 4), *h = mallocCheck(n * 4);
    cpu->add(o, a, b, n);
    void *ga = up_act(a, n), *gb = up_act(b, n), *go = gpu->alloc(n * dtype_size(act), "t");
    poison(go, n * dtype_size(act));
    gpu->add(go, ga, gb, n);
    down_act(h, go, n);
    for (size_t i = 0; i < n; i++) o[i] = round_act(o[i]);
    compare("add", h, o, n, act == DTYPE_FP32 ? 1e-6 : 1e-6, shape);
    /* cast: fp32 -> act, exactly the host's rounding */
    float *x = mallocCheck(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng);
    float *gx = up_f32(x, n);
    poison(go, n * dtype_size(act));
    gpu->cast_from_fp32(go, gx, n);
    down_act(h, go, n);
    for (size_t i = 0; i < n; i++) x[i] = round_act(x[i]);
    compare("cast_from_fp32", h, x, n, 0, shape);
    /* sum of squares: fp64 both sides; NaN and inf propagate */
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng) * 3;
    gpu->upload(gx, x, n * 4);
    double s_gpu = gpu->sum_squares(gx, n), s_cpu = cpu->sum_squares(x, n), s_again = gpu->sum_squares(gx, n);
    int ok = fabs(s_gpu - s_cpu) <= 1e-9 * fabs(s_cpu) && s_gpu == s_again;
    printf("%s %-5s %-26s %-28s rel %.2e (tol 1e-09, deterministic)\n", ok ? "ok  " : "FAIL", dtype_name(act), "sum_squares", shape,
           fabs(s_gpu - s_cpu) / fabs(s_cpu));
    CHECK(ok, "sum_squares %s: gpu %.17g cpu %.17g again %.17g", shape, s_gpu, s_cpu, s_again);
    x[n / 2] = NAN;
    gpu->upload(gx, x, n * 4);
    CHECK(isnan(gpu->sum_squares(gx, n)), "sum_squares must propagate NaN (%s)", shape);
    x[n / 2] = INFINITY;
    gpu->upload(gx, x, n * 4);
    CHECK(isinf(gpu->sum_squares(gx, n)), "sum_squares must propagate inf (%s)", shape);
    gpu->free(ga); gpu->free(gb); gpu->free(go); gpu->free(gx);
    free(a); free(b); free(o); free(h); free(x);
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    cpu = backend_cpu();
    rng_seed(&rng, 1234);
    const DType dtypes[3] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int di = 0; di < 3; di++) {
        act = dtypes[di];
        gpu = backend_cuda(act);
        tol_act = 1e-2;
        tol_matmul = act == DTYPE_FP32 ? (cuda_tf32 ? 2e-3 : 1e-5) : tol_act;
        if (di == 0) printf("cuda backend: peak %.0f TFLOP/s (fp32%s), attention path: %s\n", gpu->peak_flops / 1e12,
                            cuda_tf32 ? ", TF32" : "", cuda_attention_simple ? "simple" : cuda_attention_wgmma ? "wgmma" : "mma");
        test_matmul(64, 48, 80);
        test_matmul(37, 29, 53);
        test_matmul(1, 7, 3);
        test_matmul(515, 768, 2304);
        if (act == DTYPE_BF16 && fp8_runs()) {
            test_fp8_cast_exact();
            test_matmul_fp8(64, 48, 80);
            test_matmul_fp8(512, 768, 2304);
            test_matmul_fp8(256, 2048, 768);
            test_matmul_fp8(16, 16, 16);
        }
        test_embedding(300, 64, 50, 1, 0);
        test_embedding(77, 33, 1000, 1, 0);
        test_embedding(300, 64, 61, 2, 1);   /* vocab-parallel: the second of two blocks, padded */
        test_embedding(77, 33, 1000, 4, 2);
        test_rmsnorm(300, 768);
        test_rmsnorm(17, 37);
        test_rmsnorm(1000, 8);
        test_rmsnorm(2000, 1024);   /* the one-pass backward: 32 blocks of rows, the widest it holds */
        test_rmsnorm(130, 512);
        test_rmsnorm(70, 4096);     /* wider: the two-pass backward */
        test_rmsnorm(301, 640);     /* an odd last row of a pair, the third pack of a row partly past C */
        test_rope(2, 37, 4, 2, 64, 0);
        test_rope(1, 9, 3, 1, 6, 1000);
        test_rope(2, 1024, 2, 1, 128, 0);
        test_rope(3, 50, 5, 2, 64, 7);   /* 7 rotated heads: a group of 4 and one of 3 */
        const int shapes[][5] = {{2, 64, 4, 2, 64}, {1, 37, 3, 1, 16}, {2, 100, 6, 3, 32}, {1, 130, 2, 2, 128}, {1, 1, 2, 1, 8},
                                 {1, 257, 12, 4, 64}, {1, 1, 2, 1, 64}, {3, 100, 6, 2, 64}, {1, 700, 4, 1, 64},
                                 {1, 1024, 4, 2, 64}, {2, 300, 8, 2, 64}, {2, 1100, 4, 2, 64},
                                 {1, 3600, 12, 4, 64}};   /* the last two past ATTENTION_DS_MAX_T: wgmma's default is the recompute path */
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
            const int *q = shapes[s];
            float theta = s % 2 ? 0.0f : 10000.0f;   /* every other shape with RoPE's backward folded in */
            test_attention("simple", attention_forward_cuda_simple, attention_backward_cuda_simple, q[0], q[1], q[2], q[3], q[4], theta);
            if (cuda_attention_simple) continue;
            int hopper = cuda_attention_wgmma;   /* both tensor-core paths where the GPU has both */
            cuda_attention_wgmma = 0;
            test_attention("mma", gpu->attention_forward, gpu->attention_backward, q[0], q[1], q[2], q[3], q[4], theta);
            if (hopper) {
                cuda_attention_wgmma = 1;
                test_attention("wgmma", gpu->attention_forward, gpu->attention_backward, q[0], q[1], q[2], q[3], q[4], theta);
            }
            cuda_attention_wgmma = hopper;
        }
        test_swiglu(64, 256);
        test_swiglu(13, 37);
        test_cross_entropy(40, 1000, 1);
        test_cross_entropy(7, 32001, 1);
        test_cross_entropy(3, 5, 1);
        test_cross_entropy(9, 32000, 1);   /* l124m's vocabulary */
        test_cross_entropy(7, 32001, 2);   /* vocab-parallel: tp = 2, the last block padded */
        test_cross_entropy(13, 61, 4);
        test_cross_entropy(3, 5, 4);       /* a block of padding only */
        test_adamw();
        test_elementwise(100000);
        test_elementwise(13);
    }
    return test_summary();
}
