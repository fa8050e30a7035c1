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
    Fp8Matmul q = {1, 1, 1, gamax, gpu->alloc(matmul_fp8_scratch_bytes(1, P, K, K), "t"), 0, 0};
    for (int c = 0; c < 4; c++) {
        Fp8Format f = c == 0 || c == 3 ? FP8_E4M3 : FP8_E5M2;
        gpu->zero(gdw, P * K * 4);
        if (c == 0) gpu->matmul_fp8_forward(gout, gv, geye, P, K, K, NULL, &q);          /* out (P,K) = q(v) I */
        if (c == 1) gpu->matmul_fp8_backward(gout, gdw, gv, gzero, geye, P, K, K, 1, &q);   /* dinp (P,K) = q(v) I */
        if (c == 2) gpu->matmul_fp8_backward(NULL, gdw, gv, geye, gzero, K, K, P, 1, &q);   /* dW (P,K) = q(v (K,P))^T I */
        if (c == 3) gpu->matmul_fp8_backward(NULL, gdw, geye, gv, gzero, K, P, K, 1, &q);   /* dW (K,P) = I q(v) */
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
    Fp8Matmul qc = {sx, sw, sdy, camax, cscratch, 0, 0}, qg = {sx, sw, sdy, gamax, gpu->alloc(matmul_fp8_scratch_bytes(1, N, IC, OC), "t"), 0, 0};
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
        matmul_fp8_backward_cpu(dx, dw, dy, x, w, N, IC, OC, 1, &qc);
        for (size_t i = 0; i < nx; i++) dx[i] = round_act(dx[i]);
        poison(gdx, nx * 2);
        gpu->matmul_fp8_backward(gdx, gdw, gdy, gx, gw, N, IC, OC, 1, &qg);
        down_act(h, gdx, nx);
        snprintf(name, sizeof name, "matmul_fp8_backward dinp%s", tag);
        compare(name, h, dx, nx, tol_act, shape);
        if (!sat) memcpy(fp8 + ny, h, nx * 4);
        for (int twice = 0; twice < 2; twice++) {   /* the second time without dinp: dweight accumulates */
            if (twice) {
                matmul_fp8_backward_cpu(NULL, dw, dy, x, w, N, IC, OC, 1, &qc);
                gpu->matmul_fp8_backward(NULL, gdw, gdy, gx, gw, N, IC, OC, 1, &qg);
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
    gpu->matmul_fp8_backward(gdx, gdw, gdy, gx, gw, N, IC, OC, 1, &qz);
    gpu->matmul_backward(gdx2, gdw2, gdy, gx, gw, N, IC, OC, 1);
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

/* ---- the producers that cast (kernels/fp8.h): SwiGLU into the FP8 copies of the down matmul's x and the gate|up
 * matmul's dout. Against the casts they replace, on the GPU, bit for bit: the copies themselves (form against the
 * scratch views the unfused matmul cast into), the products (the same cuBLASLt calls on the same bytes) and the amax
 * records; and against the CPU's emulated producers at the products' tolerance. RMSNorm's into q|k|v's x below. ---- */
static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }
static void same_bytes(const char *what, const void *gpu_a, const void *gpu_b, size_t bytes, const char *shape) {
    uint8_t *a = mallocCheck(bytes), *b = mallocCheck(bytes);
    gpu->download(a, gpu_a, bytes); gpu->download(b, gpu_b, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += a[i] != b[i];
    printf("%s %-5s %-40s %-22s %zu of %zu bytes differ\n", bad ? "FAIL" : "ok  ", dtype_name(act), what, shape, bad, bytes);
    CHECK(bad == 0, "%s %s: %zu bytes differ", what, shape, bad);
    free(a); free(b);
}
static float *down_new(const void *d, size_t n, int f32) {
    float *h = mallocCheck(n * 4);
    if (f32) gpu->download(h, d, n * 4);
    else down_act(h, d, n);
    return h;
}

static size_t fp8_scratch(size_t e, int N, int F, int C) {   /* for both matmuls: down (F -> C) and gate|up (C -> 2F) */
    size_t a = matmul_fp8_scratch_bytes(e, N, F, C), b = matmul_fp8_scratch_bytes(e, N, C, 2 * F);
    return a > b ? a : b;
}

static void test_swiglu_fp8(int N, int F, int C) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d C=%d", N, F, C);
    size_t nh = (size_t)N * F, nc = (size_t)N * C, nw = (size_t)C * F;
    const Backend *emu = backend_cpu_emulated(DTYPE_BF16);
    float *h13 = rand_act(2 * nh, 2), *dy = rand_act(nc, 1e-3f), *x = rand_act(nc, 1), *w2 = rand_act(nw, 0.05f), *w13 = rand_act(2 * nw, 0.05f);
    /* the CPU's chain, with the producers: hs -> down forward and backward -> dh13 -> gate|up backward; every scale set,
     * each from the plain op's values (the down matmul: IC = F, OC = C; gate|up: IC = C, OC = 2F) */
    float *hs = mallocCheck(nh * 4), *dh13 = mallocCheck(2 * nh * 4), camax[6] = {0}, *cform = mallocCheck(nh * 4), *cout = mallocCheck(nc * 4);
    float *cdx = mallocCheck(nh * 4), *cdln = mallocCheck(nc * 4), *cdw2 = calloc(nw, 4), *cdw13 = calloc(2 * nw, 4);
    void *cscr = mallocCheck(fp8_scratch(4, N, F, C));
    emu->swiglu_forward(hs, h13, N, F);
    Fp8Matmul q2 = {pow2_scale(hs, nh, FP8_E4M3_MAX), pow2_scale(w2, nw, FP8_E4M3_MAX), pow2_scale(dy, nc, FP8_E5M2_MAX), camax, cscr, 0, 0};
    Fp8Matmul q13 = {pow2_scale(x, nc, FP8_E4M3_MAX), pow2_scale(w13, 2 * nw, FP8_E4M3_MAX), 0, camax + 3, cscr, 0, 0};
    emu->swiglu_forward_fp8(cform, h13, N, F, &q2);
    q2.x_cast = 1;
    emu->matmul_fp8_forward(cout, cform, w2, N, F, C, NULL, &q2);
    emu->matmul_fp8_backward(cdx, cdw2, dy, cform, w2, N, F, C, 1, &q2);
    emu->swiglu_backward(dh13, cdx, h13, N, F);
    q13.dout_scale = pow2_scale(dh13, 2 * nh, FP8_E5M2_MAX);
    /* the GPU's: k = 0 the casts (plain SwiGLU, the matmuls cast), k = 1 the producers */
    void *gh13 = up_act(h13, 2 * nh), *gdy = up_act(dy, nc), *gx = up_act(x, nc), *gw2 = up_act(w2, nw), *gw13 = up_act(w13, 2 * nw);
    void *ghs = gpu->alloc(nh * 2, "t"), *gdh13 = gpu->alloc(2 * nh * 2, "t");
    char *gx8 = gpu->alloc(2 * nh, "t");   /* the casts' x8 (N,F) and xT8 (F,N), saved */
    void *gscr[2], *gout[2], *gdx[2], *gdln[2];
    float *gdw2[2], *gdw13[2], *gamax[2], zero[6] = {0};
    for (int k = 0; k < 2; k++) {
        gscr[k] = gpu->alloc(fp8_scratch(1, N, F, C), "t");
        gout[k] = gpu->alloc(nc * 2, "t"); gdx[k] = gpu->alloc(nh * 2, "t"); gdln[k] = gpu->alloc(nc * 2, "t");
        gdw2[k] = gpu->alloc(nw * 4, "t"); gpu->zero(gdw2[k], nw * 4);
        gdw13[k] = gpu->alloc(2 * nw * 4, "t"); gpu->zero(gdw13[k], 2 * nw * 4);
        gamax[k] = up_f32(zero, 6);
        Fp8Matmul a = q2, b = q13;
        a.amax = gamax[k]; b.amax = gamax[k] + 3; a.scratch = b.scratch = gscr[k];
        a.x_cast = b.dout_cast = k;
        if (k == 0) gpu->swiglu_forward(ghs, gh13, N, F);
        else gpu->swiglu_forward_fp8(ghs, gh13, N, F, &a);   /* ghs now holds the cast form */
        gpu->matmul_fp8_forward(gout[k], ghs, gw2, N, F, C, NULL, &a);
        if (k == 0) gpu->copy(gx8, gscr[0], nh);   /* the cast's x8: the scratch's first view */
        gpu->matmul_fp8_backward(gdx[k], gdw2[k], gdy, ghs, gw2, N, F, C, 1, &a);
        if (k == 0) {   /* the cast's xT8: the down backward's fourth view, after dy8, dyT8 (N,C) and wT8 (F,C) */
            gpu->copy(gx8 + nh, (char *)gscr[0] + 2 * align256(nc) + align256(nw), nh);
            gpu->swiglu_backward(gdh13, gdx[0], gh13, N, F);
            gpu->matmul_fp8_backward(gdln[0], gdw13[0], gdh13, gx, gw13, N, C, 2 * F, 1, &b);   /* leaves its dy8, dyT8 in gscr[0] */
        } else {
            same_bytes("swiglu_forward_fp8 E4M3 (N,F) copy", ghs, gx8, nh, shape);
            same_bytes("swiglu_forward_fp8 E4M3 (F,N) copy", (char *)ghs + nh, gx8 + nh, nh, shape);
            gpu->swiglu_backward_fp8(gdx[1], gh13, N, F, &b);
            same_bytes("swiglu_backward_fp8 E5M2 (N,2F) copy", gscr[1], gscr[0], 2 * nh, shape);
            same_bytes("swiglu_backward_fp8 E5M2 (2F,N) copy", (char *)gscr[1] + align256(2 * nh), (char *)gscr[0] + align256(2 * nh), 2 * nh, shape);
            gpu->matmul_fp8_backward(gdln[1], gdw13[1], NULL, gx, gw13, N, C, 2 * F, 1, &b);
        }
    }
    same_bytes("fp8 down out, producer vs cast", gout[1], gout[0], nc * 2, shape);
    same_bytes("fp8 down dinp, producer vs cast", gdx[1], gdx[0], nh * 2, shape);
    same_bytes("fp8 down dW, producer vs cast", gdw2[1], gdw2[0], nw * 4, shape);
    same_bytes("fp8 gate|up dinp, producer vs cast", gdln[1], gdln[0], nc * 2, shape);
    same_bytes("fp8 gate|up dW, producer vs cast", gdw13[1], gdw13[0], 2 * nw * 4, shape);
    same_bytes("fp8 amax records, producer vs cast", gamax[1], gamax[0], 6 * 4, shape);
    /* the CPU's gate|up backward from the GPU's dhs: an E5M2 rounding flips on a last-bit difference of dhs, and the
     * weight gradient's sum over the tokens would carry it past the products' tolerance */
    float *g = down_new(gdx[1], nh, 0);
    emu->swiglu_backward_fp8(g, h13, N, F, &q13);
    free(g);
    q13.dout_cast = 1;
    emu->matmul_fp8_backward(cdln, cdw13, NULL, x, w13, N, C, 2 * F, 1, &q13);
    compare("fp8 producers: down out vs cpu", g = down_new(gout[1], nc, 0), cout, nc, tol_act, shape); free(g);
    compare("fp8 producers: down dinp vs cpu", g = down_new(gdx[1], nh, 0), cdx, nh, tol_act, shape); free(g);
    compare("fp8 producers: down dW vs cpu", g = down_new(gdw2[1], nw, 1), cdw2, nw, 5e-4, shape); free(g);
    compare("fp8 producers: gate|up dinp vs cpu", g = down_new(gdln[1], nc, 0), cdln, nc, tol_act, shape); free(g);
    compare("fp8 producers: gate|up dW vs cpu", g = down_new(gdw13[1], 2 * nw, 1), cdw13, 2 * nw, 5e-4, shape); free(g);
    check_amax("fp8 producers: down", gamax[1], camax, shape);
    check_amax("fp8 producers: gate|up", gamax[1] + 3, camax + 3, shape);
    for (int k = 0; k < 2; k++) {
        gpu->free(gscr[k]); gpu->free(gout[k]); gpu->free(gdx[k]); gpu->free(gdln[k]); gpu->free(gdw2[k]); gpu->free(gdw13[k]); gpu->free(gamax[k]);
    }
    gpu->free(gh13); gpu->free(gdy); gpu->free(gx); gpu->free(gw2); gpu->free(gw13); gpu->free(ghs); gpu->free(gdh13); gpu->free(gx8);
    free(h13); free(dy); free(x); free(w2); free(w13); free(hs); free(dh13); free(cform); free(cout); free(cdx); free(cdln);
    free(cdw2); free(cdw13); free(cscr);
}

/* RMSNorm's producer into the q|k|v (or gate|up) matmul's x (IC = C, OC): against the plain norm and the matmul's own
 * casts on the GPU, bit for bit (the copies, rstd, the products, the amax records); against the CPU's emulated
 * producer at the products' tolerance (the norm's sum runs in another order on the CPU, so a bf16 value may differ in
 * its last bit and move an E4M3 rounding). */
static void test_rmsnorm_fp8(int N, int C, int OC) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d", N, C, OC);
    size_t nc = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    const float eps = 1e-5f;
    const Backend *emu = backend_cpu_emulated(DTYPE_BF16);
    float *x = rand_act(nc, 2), *g = rand_act(C, 1), *w = rand_act(nw, 0.05f), *dy = rand_act(ny, 1e-3f);
    float *ln = mallocCheck(nc * 4), *cform = mallocCheck(nc * 4), *crstd = mallocCheck(N * 4), *cout = mallocCheck(ny * 4);
    float *cdx = mallocCheck(nc * 4), *cdw = calloc(nw, 4), camax[3] = {0};
    void *cscr = mallocCheck(matmul_fp8_scratch_bytes(4, N, C, OC));
    emu->rmsnorm_forward(ln, crstd, x, g, N, C, eps);
    Fp8Matmul qc = {pow2_scale(ln, nc, FP8_E4M3_MAX), pow2_scale(w, nw, FP8_E4M3_MAX), pow2_scale(dy, ny, FP8_E5M2_MAX), camax, cscr, 0, 0};
    emu->rmsnorm_forward_fp8(cform, crstd, x, g, N, C, eps, &qc);
    qc.x_cast = 1;
    emu->matmul_fp8_forward(cout, cform, w, N, C, OC, NULL, &qc);
    emu->matmul_fp8_backward(cdx, cdw, dy, cform, w, N, C, OC, 1, &qc);
    /* the GPU's: k = 0 the plain norm and the matmul's casts, k = 1 the producer */
    void *gx = up_act(x, nc), *gg = up_act(g, C), *gw = up_act(w, nw), *gdy = up_act(dy, ny);
    char *gx8 = gpu->alloc(2 * nc, "t");   /* the casts' x8 (N,C) and xT8 (C,N), saved */
    void *gln[2], *gscr[2], *gout[2], *gdx[2];
    float *grstd[2], *gdw[2], *gamax[2], zero[3] = {0};
    for (int k = 0; k < 2; k++) {
        gln[k] = gpu->alloc(nc * 2, "t"); gscr[k] = gpu->alloc(matmul_fp8_scratch_bytes(1, N, C, OC), "t");
        gout[k] = gpu->alloc(ny * 2, "t"); gdx[k] = gpu->alloc(nc * 2, "t"); grstd[k] = gpu->alloc(N * 4, "t");
        gdw[k] = gpu->alloc(nw * 4, "t"); gpu->zero(gdw[k], nw * 4);
        gamax[k] = up_f32(zero, 3);
        Fp8Matmul a = qc;
        a.amax = gamax[k]; a.scratch = gscr[k]; a.x_cast = k;
        if (k == 0) gpu->rmsnorm_forward(gln[0], grstd[0], gx, gg, N, C, eps);
        else gpu->rmsnorm_forward_fp8(gln[1], grstd[1], gx, gg, N, C, eps, &a);   /* gln[1] now holds the cast form */
        gpu->matmul_fp8_forward(gout[k], gln[k], gw, N, C, OC, NULL, &a);
        if (k == 0) gpu->copy(gx8, gscr[0], nc);   /* the cast's x8: the scratch's first view */
        gpu->matmul_fp8_backward(gdx[k], gdw[k], gdy, gln[k], gw, N, C, OC, 1, &a);
        if (k == 0) gpu->copy(gx8 + nc, (char *)gscr[0] + 2 * align256(ny) + align256(nw), nc);   /* xT8: after dy8, dyT8, wT8 */
    }
    same_bytes("rmsnorm_forward_fp8 E4M3 (N,C) copy", gln[1], gx8, nc, shape);
    same_bytes("rmsnorm_forward_fp8 E4M3 (C,N) copy", (char *)gln[1] + nc, gx8 + nc, nc, shape);
    same_bytes("rmsnorm_forward_fp8 rstd", grstd[1], grstd[0], N * 4, shape);
    same_bytes("fp8 qkv out, producer vs cast", gout[1], gout[0], ny * 2, shape);
    same_bytes("fp8 qkv dinp, producer vs cast", gdx[1], gdx[0], nc * 2, shape);
    same_bytes("fp8 qkv dW, producer vs cast", gdw[1], gdw[0], nw * 4, shape);
    same_bytes("fp8 qkv amax records, producer vs cast", gamax[1], gamax[0], 3 * 4, shape);
    float *h;
    compare("rmsnorm_forward_fp8 rstd vs cpu", h = down_new(grstd[1], N, 1), crstd, N, 1e-5, shape); free(h);
    compare("fp8 rmsnorm producer: out vs cpu", h = down_new(gout[1], ny, 0), cout, ny, tol_act, shape); free(h);
    compare("fp8 rmsnorm producer: dinp vs cpu", h = down_new(gdx[1], nc, 0), cdx, nc, tol_act, shape); free(h);
    compare("fp8 rmsnorm producer: dW vs cpu", h = down_new(gdw[1], nw, 1), cdw, nw, 5e-4, shape); free(h);
    compare("fp8 rmsnorm producer: amax vs cpu", h = down_new(gamax[1], 3, 1), camax, 3, 1e-2, shape); free(h);
    for (int k = 0; k < 2; k++) {
        gpu->free(gln[k]); gpu->free(gscr[k]); gpu->free(gout[k]); gpu->free(gdx[k]); gpu->free(grstd[k]); gpu->free(gdw[k]); gpu->free(gamax[k]);
    }
    gpu->free(gx); gpu->free(gg); gpu->free(gw); gpu->free(gdy); gpu->free(gx8);
    free(x); free(g); free(w); free(dy); free(ln); free(cform); free(crstd); free(cout); free(cdx); free(cdw); free(cscr);
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
        test_swiglu_fp8(256, 512, 128);
        test_swiglu_fp8(80, 48, 32);   /* tiles cut at the edges */
        test_rmsnorm_fp8(256, 768, 2304);
        test_rmsnorm_fp8(80, 48, 32);
    }
    return test_summary();
}
