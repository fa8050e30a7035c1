/* kernels/cpu/adamw8bit.c — the fp32 reference 8-bit AdamW (kernels/adamw8bit.h):
 * per block, dequantize m and v, the AdamW step of kernels/cpu/adamw.c with its
 * Adam term bounded (adamw8bit_element), requantize. Blocks are independent:
 * one OpenMP loop runs over all blocks of all slices (fp32-state slices in
 * pieces of 256). The map and quantizers are kernels/adamw8bit.c's. */
#include "../adamw8bit.h"
#include "parallel.h"
#include "../../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Block b of a slice: fp32 state (kernels/cpu/adamw.c's loop on m32, v32) or
 * one quantization block (dequantize, step, requantize). */
static void update_block(float *params, float *pc, const float *grads, AdamW8bitState st, const AdamW8bitSlice *sl, size_t b,
                         AdamWHyper h, float step_size, float bc2_sqrt, float max_step, const float *map) {
    float decay = 1.0f - h.lr * sl->weight_decay;
    int n;
    size_t j0 = adamw8bit_block_span(sl, b, &n), q = sl->state + j0;
    if (!sl->quantized) {
        for (int k = 0; k < n; k++) {
            size_t i = sl->offset + j0 + k;
            float p = adamw_element(params[i], grads[i], &st.m32[q + k], &st.v32[q + k], decay, step_size, bc2_sqrt, &h);
            params[i] = p;
            if (pc) pc[i] = p;
        }
        return;
    }
    float m[ADAMW8BIT_BLOCK], v[ADAMW8BIT_BLOCK];
    size_t blk = sl->block + b;
    adamw8bit_dequantize_m(map, st.m_code + q, st.m_absmax[blk], n, m);
    adamw8bit_dequantize_v(map, st.v_code + q, st.v_absmax[blk], n, v);
    for (int k = 0; k < n; k++) {
        size_t i = sl->offset + j0 + k;
        float p = adamw8bit_element(params[i], grads[i], &m[k], &v[k], decay, step_size, bc2_sqrt, max_step, &h);
        params[i] = p;
        if (pc) pc[i] = p;
    }
    st.m_absmax[blk] = adamw8bit_quantize_m(map, m, n, st.m_code + q);
    st.v_absmax[blk] = adamw8bit_quantize_v(map, v, n, st.v_code + q);
}

void adamw8bit_update_cpu(float *params, void *params_compute, const float *grads, AdamW8bitState st,
                          const AdamW8bitSlice *slices, int n_slices, AdamWHyper h) {
    const float *map = adamw8bit_map();
    float bc1 = 1.0f - powf(h.beta1, (float)h.step), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)h.step));
    float step_size = h.lr / bc1, max_step = adamw8bit_max_step(h);
    /* every slice's blocks, all in one parallel loop (one OpenMP region a step) */
    size_t *first = malloc((n_slices + 1) * sizeof(size_t));
    if (!first) die("out of host memory for the 8-bit AdamW block list");
    first[0] = 0;
    for (int s = 0; s < n_slices; s++) first[s + 1] = first[s] + adamw8bit_slice_blocks(&slices[s]);
    long total = (long)first[n_slices];
#pragma omp parallel for schedule(static) if (cpu_parallel((size_t)total * ADAMW8BIT_BLOCK))
    for (long b = 0; b < total; b++) {
        int lo = 0, hi = n_slices - 1;   /* the last slice whose first block is <= b */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (first[mid] <= (size_t)b) lo = mid; else hi = mid - 1;
        }
        update_block(params, params_compute, grads, st, &slices[lo], (size_t)b - first[lo], h, step_size, bc2_sqrt, max_step, map);
    }
    free(first);
}
