/* kernels/adamw8bit.c — what both backends and the optimizer share of 8-bit
 * AdamW (kernels/adamw8bit.h): the dynamic quantization map, the block
 * quantizers of m and of v (as sqrt(v)), the whole state to and from fp32 moments (checkpoints, ZeRO-1),
 * and the bound on one element's step. Host code only: the CUDA backend
 * uploads this map and calls adamw8bit_max_step on the host too. */
#include "adamw8bit.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int ascending(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits = 7, total_bits = 8):
 * for exponent e = 6..0 (i = 6 - e), the midpoints of linspace(0.1, 1, 2^i + 1)
 * scaled by 10^-e, both signs; then 0 and 1. -5.5e-7 makes way for -1 (see the header). */
static void build_map(float *map) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int items = 1 << i;
        double scale = pow(10.0, i - 6);
        for (int k = 0; k < items; k++) {
            double lo = 0.1 + 0.9 * k / items, hi = 0.1 + 0.9 * (k + 1) / items;
            double mid = scale * (lo + hi) / 2;
            map[n++] = (float)mid;
            map[n++] = (float)-mid;
        }
    }
    map[n++] = 0.0f;
    map[n++] = 1.0f;
    qsort(map, 256, sizeof(float), ascending);
    memmove(map + 1, map, 126 * sizeof(float));   /* drop -5.5e-7 (map[126], next to 0 = map[127]), put -1 first */
    map[0] = -1.0f;
}

const float *adamw8bit_map(void) {
    static float map[256];
    static int built = 0;
    if (!built) {
        build_map(map);
        built = 1;
    }
    return map;
}

float adamw8bit_quantize_m(const float *map, const float *x, int n, uint8_t *code) {
    float a = 0.0f;
    for (int k = 0; k < n; k++) a = fmaxf(a, fabsf(x[k]));
    for (int k = 0; k < n; k++) code[k] = adamw8bit_nearest(map, a > 0.0f ? x[k] / a : 0.0f);
    return a;
}

void adamw8bit_dequantize_m(const float *map, const uint8_t *code, float absmax, int n, float *x) {
    for (int k = 0; k < n; k++) x[k] = map[code[k]] * absmax;
}

float adamw8bit_quantize_v(const float *map, const float *v, int n, uint8_t *code) {
    float s[ADAMW8BIT_BLOCK], a = 0.0f;
    for (int k = 0; k < n; k++) {
        s[k] = sqrtf(v[k]);
        a = fmaxf(a, s[k]);
    }
    for (int k = 0; k < n; k++) code[k] = adamw8bit_v_code(map, s[k], a);
    return a;
}

void adamw8bit_dequantize_v(const float *map, const uint8_t *code, float absmax, int n, float *v) {
    for (int k = 0; k < n; k++) v[k] = adamw8bit_v_value(map[code[k]], absmax);
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
    const float *map = adamw8bit_map();
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
            adamw8bit_dequantize_m(map, st.m_code + sl->state + j, st.m_absmax[sl->block + b], n, m + sl->offset + j);
            adamw8bit_dequantize_v(map, st.v_code + sl->state + j, st.v_absmax[sl->block + b], n, v + sl->offset + j);
        }
    }
}

size_t adamw8bit_state_set(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, const float *m, const float *v) {
    const float *map = adamw8bit_map();
    size_t dropped = 0;
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
            uint8_t *mc = st.m_code + sl->state + j, *vc = st.v_code + sl->state + j;
            st.m_absmax[sl->block + b] = adamw8bit_quantize_m(map, m + sl->offset + j, n, mc);
            st.v_absmax[sl->block + b] = adamw8bit_quantize_v(map, v + sl->offset + j, n, vc);
            for (int k = 0; k < n; k++)   /* v = 0 under a live m: the old rule's hole, not a state AdamW reaches */
                if (vc[k] == ADAMW8BIT_ZERO && mc[k] != ADAMW8BIT_ZERO) { mc[k] = ADAMW8BIT_ZERO; dropped++; }
        }
    }
    return dropped;
}
