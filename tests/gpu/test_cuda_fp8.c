/* tests/gpu/test_cuda_fp8.c — precision=fp8's linear layer (kernels/fp8.h) on
 * the GPU against the CPU's exact FP8 emulation, in bf16 (where the GPU has
 * FP8 tensor cores): the casts of every bf16 value bit for bit, the products
 * at 1e-2, the amax records exact, the no-history path equal to the plain
 * matmul, saturation, and that the FP8 path ran (its results differ from the
 * plain bf16 product's). dweight (fp32) gets 5e-4: Hopper's FP8 tensor cores
 * add with fewer bits than fp32 between cuBLASLt's promotions to fp32
 * (measured up to 1.0e-4 on the H200). fp8_unsupported: NULL on compute
 * capability 8.9 and later, a refusal naming the GPU below it and with
 * LLM3D_FP8=off. Run on a GPU machine: tests/gpu/run.sh. */
#include "ops_check.h"

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

int main(void) {
    cpu = backend_cpu();
    rng_seed(&rng, 1234);
    act = DTYPE_BF16;
    gpu = backend_cuda(act);
    tol_act = tol_matmul = 1e-2;
    if (fp8_runs()) {
        test_fp8_cast_exact();
        test_matmul_fp8(64, 48, 80);
        test_matmul_fp8(512, 768, 2304);
        test_matmul_fp8(256, 2048, 768);
        test_matmul_fp8(16, 16, 16);
    }
    return test_summary();
}
