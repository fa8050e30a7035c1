/* kernels/cpu/matmul_fp8.c — the FP8 linear layer on the CPU, emulated in fp32
 * (kernels/fp8.h): each operand is copied into the scratch rounded as its FP8
 * cast rounds it and divided by its scale again, and the fp32 matmul of
 * kernels/cpu/matmul.c multiplies the copies. The scales are powers of two, so
 * the division is exact: the products are those of the FP8 numbers, scaled. */
#include "../fp8.h"
#include "../matmul.h"
#include <math.h>
#include <stdint.h>

/* max |x| of n values folded into *amax (a NaN wins, as on the GPU) */
static void record_amax(float *amax, const float *x, size_t n) {
    float m = *amax;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m || isnan(a)) m = isnan(m) ? m : a;
    }
    *amax = m;
}

/* q (n) = fp8_round(x * scale, f) / scale */
static void quantize(float *q, const float *x, size_t n, float scale, Fp8Format f) {
    for (size_t i = 0; i < n; i++) q[i] = fp8_round(x[i] * scale, f) / scale;
}

/* the scratch as fp32 views, each 256-aligned: the backward's dout copy first (where a producer writes it), then x's, w's */
static float *view(void *scratch, size_t skip_elements) {
    return (float *)((char *)scratch + ((skip_elements * 4 + 255) & ~(size_t)255));
}

void matmul_fp8_forward_cpu(void *out, const void *inp, const void *w, int N, int IC, int OC, const void *add, const Fp8Matmul *q) {
    size_t nx = (size_t)N * IC, nw = (size_t)OC * IC;
    if (!q->x_cast) record_amax(&q->amax[0], inp, nx);
    record_amax(&q->amax[1], w, nw);
    if (q->x_scale == 0 || q->w_scale == 0) {
        matmul_forward_cpu(out, inp, w, N, IC, OC, add);
        return;
    }
    float *x8 = view(q->scratch, 0), *w8 = view(x8, nx);   /* (N,IC), (OC,IC) */
    if (q->x_cast) x8 = (float *)inp;                      /* its producer's copy */
    else quantize(x8, inp, nx, q->x_scale, FP8_E4M3);
    quantize(w8, w, nw, q->w_scale, FP8_E4M3);
    matmul_forward_cpu(out, x8, w8, N, IC, OC, add);
}

void matmul_fp8_backward_cpu(void *dinp, float *dw, const void *dout, const void *inp, const void *w, int N, int IC, int OC,
                             int accumulate, const Fp8Matmul *q) {
    size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, ny = (size_t)N * OC;
    if (!q->x_cast) record_amax(&q->amax[0], inp, nx);
    record_amax(&q->amax[1], w, nw);
    if (!q->dout_cast) record_amax(&q->amax[2], dout, ny);
    if (q->x_scale == 0 || q->w_scale == 0 || q->dout_scale == 0) {
        matmul_backward_cpu(dinp, dw, dout, inp, w, N, IC, OC, accumulate);
        return;
    }
    float *dy8 = view(q->scratch, 0), *x8 = view(dy8, ny), *w8 = view(x8, nx);   /* (N,OC), (N,IC), (OC,IC) */
    if (!q->dout_cast) quantize(dy8, dout, ny, q->dout_scale, FP8_E5M2);
    if (q->x_cast) x8 = (float *)inp;
    else quantize(x8, inp, nx, q->x_scale, FP8_E4M3);
    quantize(w8, w, nw, q->w_scale, FP8_E4M3);
    matmul_backward_cpu(dinp, dw, dy8, x8, w8, N, IC, OC, accumulate);
}

/* The producers' casts (kernels/fp8.h), emulated: t (n) act-dtype values, already rounded to it -> max |t| folded into
 * *amax, then t = fp8_round(t * scale) / scale in place. The backend's SwiGLU producers run their op, then this. */
void fp8_cast_in_place_cpu(float *t, size_t n, float scale, Fp8Format f, float *amax) {
    record_amax(amax, t, n);
    quantize(t, t, n, scale, f);
}

/* Where a producer writes the output gradient's copy for matmul_fp8_backward_cpu with dout_cast: the scratch's first view. */
float *matmul_fp8_dout_copy_cpu(void *scratch) { return view(scratch, 0); }
