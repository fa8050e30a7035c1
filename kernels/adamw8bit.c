/* kernels/adamw8bit.c — what both backends and the optimizer share of 8-bit
 * AdamW (kernels/adamw8bit.h): the dynamic quantization maps, the block
 * quantizers, the whole state to and from fp32 moments (checkpoints, ZeRO-1),
 * and the bound on one element's step. Host code only: the CUDA backend
 * uploads these maps and calls adamw8bit_max_step on the host too. */
#include "adamw8bit.h"
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

float adamw8bit_max_step(AdamWHyper h) {
    double b1 = h.beta1, b2 = h.beta2, t = h.step, q = b2 > 0 ? b1 * b1 / b2 : INFINITY;
    if (!(q < 1)) return 3e38f;   /* no finite bound: the gradients' history may outweigh v */
    double sum = (1 - pow(q, t)) / (1 - q);   /* sum_{k<t} q^k */
    double r = (1 - b1) / (1 - pow(b1, t)) * sqrt((1 - pow(b2, t)) / (1 - b2)) * sqrt(sum);
    double step = h.lr * r * (1 + 1e-5);
    return step < 3e38 ? (float)step : 3e38f;
}

void adamw8bit_state_get(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, float *m, float *v) {
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    for (int s = 0; s < n_slices; s++) {
        const AdamW8bitSlice *sl = &slices[s];
        if (!sl->quantized) {
            memcpy(m + sl->offset, st.m32 + sl->state, sl->count * sizeof(float));
            memcpy(v + sl->offset, st.v32 + sl->state, sl->count * sizeof(float));
            continue;
        }
        for (size_t b = 0, nb = adamw8bit_slice_blocks(sl); b < nb; b++) {
            int n;
            size_t j = adamw8bit_block_span(sl, b, &n);
            adamw8bit_dequantize_block(ms, st.m_code + sl->state + j, st.m_absmax[sl->block + b], n, m + sl->offset + j);
            adamw8bit_dequantize_block(mu, st.v_code + sl->state + j, st.v_absmax[sl->block + b], n, v + sl->offset + j);
        }
    }
}

void adamw8bit_state_set(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, const float *m, const float *v) {
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    for (int s = 0; s < n_slices; s++) {
        const AdamW8bitSlice *sl = &slices[s];
        if (!sl->quantized) {
            memcpy(st.m32 + sl->state, m + sl->offset, sl->count * sizeof(float));
            memcpy(st.v32 + sl->state, v + sl->offset, sl->count * sizeof(float));
            continue;
        }
        for (size_t b = 0, nb = adamw8bit_slice_blocks(sl); b < nb; b++) {
            int n;
            size_t j = adamw8bit_block_span(sl, b, &n);
            st.m_absmax[sl->block + b] = adamw8bit_quantize_block(ms, m + sl->offset + j, n, st.m_code + sl->state + j);
            st.v_absmax[sl->block + b] = adamw8bit_quantize_block(mu, v + sl->offset + j, n, st.v_code + sl->state + j);
        }
    }
}
