/* kernels/cpu/adamw8bit.c — the dynamic quantization maps and the fp32
 * reference 8-bit AdamW (kernels/adamw8bit.h): per 256-element block,
 * dequantize m and v, the AdamW step of kernels/cpu/adamw.c, requantize.
 * Blocks are independent: every slice is cut into 256-element pieces and one
 * OpenMP loop runs over all pieces of all slices. */
#include "../adamw8bit.h"
#include "parallel.h"
#include "../../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int ascending(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8):
 * for exponent e = 6..0 (i = 6 - e), the midpoints of linspace(0.1, 1, n_i + 1)
 * scaled by 10^-e, with n_i = 2^i (signed, both signs) or 2^(i+1) (unsigned);
 * then 0 and 1. Signed: -5.5e-7 makes way for -1 (see the header). */
static void build_map(float *map, int is_signed) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int items = is_signed ? 1 << i : 1 << (i + 1);
        double scale = pow(10.0, i - 6);
        for (int k = 0; k < items; k++) {
            double lo = 0.1 + 0.9 * k / items, hi = 0.1 + 0.9 * (k + 1) / items;
            double mid = scale * (lo + hi) / 2;
            map[n++] = (float)mid;
            if (is_signed) map[n++] = (float)-mid;
        }
    }
    map[n++] = 0.0f;
    map[n++] = 1.0f;
    qsort(map, 256, sizeof(float), ascending);
    if (is_signed) {   /* drop -5.5e-7 (map[126], next to 0 = map[127]), put -1 first */
        memmove(map + 1, map, 126 * sizeof(float));
        map[0] = -1.0f;
    }
}

void adamw8bit_maps(const float **signed_map, const float **unsigned_map) {
    static float s[256], u[256];
    static int built = 0;
    if (!built) {
        build_map(s, 1);
        build_map(u, 0);
        built = 1;
    }
    if (signed_map) *signed_map = s;
    if (unsigned_map) *unsigned_map = u;
}

float adamw8bit_quantize_block(const float *map, const float *x, int n, uint8_t *code) {
    float a = 0.0f;
    for (int k = 0; k < n; k++) a = fmaxf(a, fabsf(x[k]));
    for (int k = 0; k < n; k++) code[k] = adamw8bit_nearest(map, a > 0.0f ? x[k] / a : 0.0f);
    return a;
}

void adamw8bit_dequantize_block(const float *map, const uint8_t *code, float absmax, int n, float *x) {
    for (int k = 0; k < n; k++) x[k] = map[code[k]] * absmax;
}

/* One 256-element piece of a slice: fp32 state (kernels/cpu/adamw.c's loop on
 * m32, v32) or one quantization block (dequantize, step, requantize). */
static void update_piece(float *params, float *pc, const float *grads, AdamW8bitState st, AdamW8bitSlice sl, size_t j0,
                         AdamWHyper h, float step_size, float bc2_sqrt, const float *ms, const float *mu) {
    float decay = 1.0f - h.lr * sl.weight_decay;
    int n = sl.count - j0 < ADAMW8BIT_BLOCK ? (int)(sl.count - j0) : ADAMW8BIT_BLOCK;
    size_t q = sl.state + j0, blk = q / ADAMW8BIT_BLOCK;
    float mb[ADAMW8BIT_BLOCK], vb[ADAMW8BIT_BLOCK];
    float *m = sl.quantized ? mb : st.m32 + q, *v = sl.quantized ? vb : st.v32 + q;
    if (sl.quantized) {
        adamw8bit_dequantize_block(ms, st.m_code + q, st.m_absmax[blk], n, m);
        adamw8bit_dequantize_block(mu, st.v_code + q, st.v_absmax[blk], n, v);
    }
    for (int k = 0; k < n; k++) {
        size_t i = sl.offset + j0 + k;
        float p = adamw_element(params[i], grads[i], &m[k], &v[k], decay, step_size, bc2_sqrt, &h);
        params[i] = p;
        if (pc) pc[i] = p;
    }
    if (sl.quantized) {
        st.m_absmax[blk] = adamw8bit_quantize_block(ms, m, n, st.m_code + q);
        st.v_absmax[blk] = adamw8bit_quantize_block(mu, v, n, st.v_code + q);
    }
}

void adamw8bit_update_cpu(float *params, void *params_compute, const float *grads, AdamW8bitState st,
                          const AdamW8bitSlice *slices, int n_slices, AdamWHyper h) {
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    float bc1 = 1.0f - powf(h.beta1, (float)h.step), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)h.step));
    float step_size = h.lr / bc1;
    /* every slice in pieces of 256, all pieces in one parallel loop (one OpenMP region a step) */
    size_t *first = malloc((n_slices + 1) * sizeof(size_t));
    if (!first) die("out of host memory for the 8-bit AdamW piece list");
    first[0] = 0;
    for (int s = 0; s < n_slices; s++) first[s + 1] = first[s] + (slices[s].count + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK;
    long total = (long)first[n_slices];
#pragma omp parallel for schedule(static) if (cpu_parallel((size_t)total * ADAMW8BIT_BLOCK))
    for (long b = 0; b < total; b++) {
        int lo = 0, hi = n_slices - 1;   /* the last slice whose first piece is <= b */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (first[mid] <= (size_t)b) lo = mid; else hi = mid - 1;
        }
        update_piece(params, params_compute, grads, st, slices[lo], ((size_t)b - first[lo]) * ADAMW8BIT_BLOCK, h, step_size,
                     bc2_sqrt, ms, mu);
    }
    free(first);
}
