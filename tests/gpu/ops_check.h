/* tests/gpu/ops_check.h — what the GPU op tests share: the two backends side by
 * side, random inputs rounded to the act dtype, uploads and downloads in it,
 * NaN poisoning of outputs, and the norm-ratio comparison that prints a FAIL.
 * Included by test_cuda_ops.c and test_cuda_fp8.c (static: one copy each). */
#pragma once
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
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static inline float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t to_fp16(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }
static inline float from_fp16(uint16_t u) { _Float16 h; memcpy(&h, &u, 2); return (float)h; }
static inline float round_act(float f) {
    return act == DTYPE_FP32 ? f : act == DTYPE_BF16 ? from_bf16(to_bf16(f)) : from_fp16(to_fp16(f));
}

/* host fp32 (n), already rounded to act -> new device tensor in act dtype */
static inline void *up_act(const float *h, size_t n) {
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
static inline void down_act(float *h, const void *d, size_t n) {
    size_t es = dtype_size(act);
    void *tmp = mallocCheck(n * es + 1);
    gpu->download(tmp, d, n * es);
    for (size_t i = 0; i < n; i++)
        h[i] = act == DTYPE_FP32 ? ((float *)tmp)[i] : act == DTYPE_BF16 ? from_bf16(((uint16_t *)tmp)[i]) : from_fp16(((uint16_t *)tmp)[i]);
    free(tmp);
}
static inline float *up_f32(const float *h, size_t n) {
    float *d = gpu->alloc(n * 4 + 16, "test tensor");
    gpu->upload(d, h, n * 4);
    return d;
}
static inline void poison(void *d, size_t bytes) {   /* 0xff bytes: NaN in fp32, bf16 and fp16 */
    void *tmp = mallocCheck(bytes + 1);
    memset(tmp, 0xff, bytes);
    gpu->upload(d, tmp, bytes);
    free(tmp);
}
static inline float *rand_act(size_t n, float scale) {   /* random, rounded to act */
    float *h = mallocCheck(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = round_act(rng_normal(&rng) * scale);
    return h;
}
static inline float *copy_f(const float *x, size_t n) { float *y = mallocCheck(n * 4 + 4); memcpy(y, x, n * 4); return y; }

/* |got - ref| / |ref| */
static inline double rel_err(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}
/* |got - ref| / |ref| <= tol; NaN or inf in got fails */
static inline int compare(const char *what, const float *got, const float *ref, size_t n, double tol, const char *shape) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (!isfinite(got[i])) bad = i;
    double rel = rel_err(got, ref, n);
    int ok = bad == n && rel <= tol;
    printf("%s %-5s %-26s %-28s rel %.2e (tol %.0e)%s\n", ok ? "ok  " : "FAIL", dtype_name(act), what, shape, rel, tol,
           bad < n ? "  NON-FINITE OUTPUT" : "");
    CHECK(ok, "%s %s %s: rel %.3e > %.0e or non-finite at %zu (got %g, ref %g)", dtype_name(act), what, shape, rel, tol,
          bad, bad < n ? got[bad] : 0.0, bad < n ? ref[bad] : 0.0);
    return ok;
}

/* Where a failed attention result is wrong, so one device run says what to look at: rows (B,T) of `heads` heads of
 * HD, the heads cut into parts (q|k|v of dqkv, or out alone) starting at first[p]. Per part: its error, how many
 * 64-row tiles of a sequence are over tol and which, the non-finite values, and the worst (b, t, head) row. */
static inline void explain_rows(const float *got, const float *ref, int B, int T, int heads, int HD, int n_parts,
                                const char *const *names, const int *first, double tol) {
    size_t W = (size_t)heads * HD;
    for (int p = 0; p < n_parts; p++) {
        int h0 = first[p], h1 = p + 1 < n_parts ? first[p + 1] : heads, tiles = (T + 63) / 64, bad_tiles = 0, first_bad = -1, last_bad = -1;
        double num = 0, den = 0, worst = 0;
        long nonfinite = 0, wb = 0, wt = 0, wh = 0;
        for (int tile = 0; tile < tiles; tile++) {
            double tn = 0, td = 0;
            for (int b = 0; b < B; b++)
                for (int t = tile * 64; t < T && t < tile * 64 + 64; t++)
                    for (int h = h0; h < h1; h++) {
                        const float *g = got + ((size_t)b * T + t) * W + (size_t)h * HD, *r = ref + ((size_t)b * T + t) * W + (size_t)h * HD;
                        double rn = 0, rd = 0;
                        for (int i = 0; i < HD; i++) {
                            if (!isfinite(g[i])) { nonfinite++; continue; }
                            rn += ((double)g[i] - r[i]) * ((double)g[i] - r[i]);
                            rd += (double)r[i] * r[i];
                        }
                        double rel = sqrt(rn) / (rd > 0 ? sqrt(rd) : 1.0);
                        if (rel > worst) { worst = rel; wb = b; wt = t; wh = h - h0; }
                        tn += rn; td += rd;
                    }
            if (sqrt(tn) > tol * sqrt(td > 0 ? td : 1)) { bad_tiles++; last_bad = tile; if (first_bad < 0) first_bad = tile; }
            num += tn; den += td;
        }
        printf("     %-4s rel %.2e, %d of %d 64-row tiles over tol (first %d, last %d), %ld non-finite, worst row b=%ld t=%ld "
               "head %ld rel %.2e\n", names[p], sqrt(num) / (den > 0 ? sqrt(den) : 1.0), bad_tiles, tiles, first_bad, last_bad,
               nonfinite, wb, wt, wh, worst);
    }
}
