/* kernels/adamw8bit.h — 8-bit AdamW: the moments kept as one byte per element
 * (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2022).
 *
 * The idea: cut each parameter slice into blocks of 256 elements; a block of a
 * moment is stored as 256 codes (uint8) and one fp32 absmax. A code indexes a
 * sorted map of 256 values in [-1, 1] (first moment, signed) or [0, 1] (second
 * moment, unsigned), so the element is map[code] * absmax. One pass per block
 * dequantizes m and v, does the fp32 AdamW step of kernels/adamw.h (the same
 * math in the same order), then requantizes: the new absmax is the block's
 * largest |m| (largest v), and each element gets the code nearest to
 * value / absmax (binary search; ties go to the lower code). Slices of small
 * tensors (under ADAMW8BIT_MIN_NUMEL elements) keep fp32 m and v and get the
 * plain fp32 update in the same call.
 *
 * The maps are "dynamic tree" maps: after the sign bit, a run of zero bits
 * gives the decimal exponent (1e0 .. 1e-6), an indicator bit ends it, and the
 * remaining bits are a linear fraction in [0.1, 1] (bin midpoints). Signed:
 * 127 positive + 127 negative values, 0 and 1 (bitsandbytes'
 * create_dynamic_map(signed=True)), made symmetric at the ends: its smallest
 * negative magnitude -5.5e-7 gives its code to -1, so a block's absmax element
 * is exact whatever its sign (and requantizing dequantized values returns the
 * same codes), while the widest gap stays the top decade's 0.9/64. Unsigned:
 * 254 values, 0 and 1 (create_dynamic_map(signed=False)).
 * Built once on the host (adamw8bit_maps); the CUDA backend uploads the same
 * table. All update arithmetic is plain IEEE fp32 without contraction, so the
 * CPU and CUDA launchers produce the same codes, absmax and weights bit for bit. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "adamw.h"

#define ADAMW8BIT_BLOCK 256         /* elements per quantization block: one absmax each */
#define ADAMW8BIT_MIN_NUMEL 4096    /* tensors with fewer elements keep fp32 m and v */

typedef struct {
    size_t offset, count;   /* elements [offset, offset+count) of params and grads */
    size_t state;           /* quantized: first element in the code buffers, a multiple of ADAMW8BIT_BLOCK
                               (its first absmax is state / ADAMW8BIT_BLOCK); fp32: first element of m32, v32 */
    float weight_decay;
    int quantized;          /* 1: 8-bit state; 0: fp32 state */
} AdamW8bitSlice;

typedef struct {            /* views into the optimizer's one state buffer, on the backend */
    uint8_t *m_code, *v_code;   /* (Q) Q = sum of the quantized slices' counts, each rounded up to 256 */
    float *m_absmax, *v_absmax; /* (Q/256) */
    float *m32, *v32;           /* (S) S = sum of the fp32 slices' counts */
} AdamW8bitState;

typedef void AdamW8bitUpdate(float *params /* (P) */, void *params_compute /* (P) or NULL */, const float *grads /* (P) */,
                             AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, AdamWHyper h);
AdamW8bitUpdate adamw8bit_update_cpu, adamw8bit_update_cuda;

/* The two maps, each sorted ascending, 256 values: signed (first moment) in
 * [-1, 1], unsigned (second moment) in [0, 1]; both hold 0 and the ends exactly.
 * Built on first use, then the same table; call it once outside any parallel region. */
void adamw8bit_maps(const float **signed_map, const float **unsigned_map);
/* The code whose map value is nearest to x (x clamped to the map's ends; ties:
 * the lower code): a branch-free binary search for the last map[k] <= x, then
 * k or k + 1. The CUDA kernel does exactly this. */
static inline uint8_t adamw8bit_nearest(const float *map /* (256) */, float x) {
    int k = 0;
    for (int step = 128; step > 0; step >>= 1) k += map[k + step] <= x ? step : 0;
    if (k == 255) return 255;
    return (uint8_t)(map[k + 1] - x < x - map[k] ? k + 1 : k);
}
/* One block of n <= 256 values: returns absmax = max |x| and writes code (n);
 * an all-zero block has absmax 0 and every code at map value 0. */
float adamw8bit_quantize_block(const float *map, const float *x /* (n) */, int n, uint8_t *code /* (n) */);
/* x = map[code] * absmax */
void adamw8bit_dequantize_block(const float *map, const uint8_t *code /* (n) */, float absmax, int n, float *x /* (n) */);
