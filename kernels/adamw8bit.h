/* kernels/adamw8bit.h — 8-bit AdamW: the moments kept as one byte per element
 * (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2022).
 *
 * The idea: cut each parameter slice into blocks of at most 256 elements; a
 * block of a moment is stored as its codes (uint8) and one fp32 absmax. A code
 * indexes a sorted map of 256 values in [-1, 1] (first moment, signed) or
 * [0, 1] (second moment, unsigned), so the element is map[code] * absmax. One
 * pass per block dequantizes m and v, does the fp32 AdamW step of
 * kernels/adamw.h (the same math in the same order, the Adam term bounded:
 * adamw8bit_max_step), then requantizes: the new absmax is the block's largest
 * |m| (largest v), and each element gets the code nearest to value / absmax
 * (binary search; ties go to the lower code). Slices of fp32 state (small
 * tensors) get the plain fp32 update in the same call.
 *
 * Blocks: a slice is a run of rows of `row` elements (its last row may be
 * shorter); each row is cut into blocks of 256 from its start, the last one
 * shorter. The caller picks the rows (train/optimizer.c: row segments of the
 * whole tensor that no tensor-parallel slicing splits), so blocks never span
 * two rows. Codes lie parallel to the elements (code state + j for element j
 * of the slice); absmax values one per block, in block order from `block`.
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
 * CPU and CUDA launchers produce the same codes, absmax and weights bit for bit.
 *
 * The quantizers, the block walk and the bound live here and in
 * kernels/adamw8bit.c, the one home both backends and the optimizer (its
 * checkpoint and ZeRO conversions) reach. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "adamw.h"

#define ADAMW8BIT_BLOCK 256         /* most elements per quantization block: one absmax each */

typedef struct {
    size_t offset, count;   /* elements [offset, offset+count) of params and grads */
    size_t state;           /* quantized: first code of the slice in the code buffers; fp32: first element of m32, v32 */
    size_t block;           /* quantized: its first absmax (one per block, in block order) */
    size_t row;             /* elements of a row: blocks are cut from each row's start (fp32 state: count) */
    float weight_decay;
    int quantized;          /* 1: 8-bit state; 0: fp32 state */
} AdamW8bitSlice;

typedef struct {            /* views into the optimizer's one state buffer, on the backend */
    uint8_t *m_code, *v_code;   /* (Q) Q = the quantized slices' counts (each start rounded up to 16) */
    float *m_absmax, *v_absmax; /* (NB) NB = the quantized slices' blocks */
    float *m32, *v32;           /* (S) S = sum of the fp32 slices' counts */
} AdamW8bitState;

typedef void AdamW8bitUpdate(float *params /* (P) */, void *params_compute /* (P) or NULL */, const float *grads /* (P) */,
                             AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, AdamWHyper h);
AdamW8bitUpdate adamw8bit_update_cpu, adamw8bit_update_cuda;

/* Blocks of a slice: whole rows of ceil(row / 256) blocks each, then the last partial row's. */
static inline size_t adamw8bit_slice_blocks(const AdamW8bitSlice *s) {
    size_t per = (s->row + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK, rem = s->count % s->row;
    return s->count / s->row * per + (rem + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK;
}
/* Block b of a slice: its first element (in the slice) and its length n (1..256). */
static inline size_t adamw8bit_block_span(const AdamW8bitSlice *s, size_t b, int *n) {
    size_t per = (s->row + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK, r = b / per, j = b % per;
    size_t start = r * s->row + j * ADAMW8BIT_BLOCK, end = r * s->row + s->row < s->count ? r * s->row + s->row : s->count;
    *n = end - start < ADAMW8BIT_BLOCK ? (int)(end - start) : ADAMW8BIT_BLOCK;
    return start;
}

/* The bound on the Adam term of one element's update, lr * R_t with
 *   R_t = (1-b1)/(1-b1^t) * sqrt((1-b2^t)/(1-b2)) * sqrt(sum_{k<t} (b1^2/b2)^k):
 * exact AdamW never exceeds it. m_t = (1-b1) sum_k b1^k g_{t-k}, v_t = (1-b2) sum_k b2^k g_{t-k}^2, and
 * Cauchy-Schwarz on b1^k g = (b1^k / b2^(k/2)) (b2^(k/2) g) gives |m_t| <= (1-b1) sqrt(sum (b1^2/b2)^k)
 * sqrt(v_t/(1-b2)); with the bias corrections m^ = m/(1-b1^t), v^ = v/(1-b2^t) that is
 * |m^| / (sqrt(v^) + eps) <= |m^| / sqrt(v^) <= R_t (R_1 = 1: the first step is lr * sign(g); b1 0.9,
 * b2 0.95: R -> 1.17; b2 0.999: R -> 7.3). The bound is tight (gradients growing like (b1/b2)^-k meet it).
 * 8-bit moments break the link between m and v: a v that quantizes to 0 (the unsigned map's zero lies
 * 3.25e-7 * absmax below its first value) while m survives makes the step m/eps, 10^5 x lr and more.
 * Capping the Adam term at this bound (times 1 + 1e-5 for fp32's rounding of the exact step) never
 * touches what exact AdamW would do and stops that. bitsandbytes has no such guard (its blockwise 8-bit
 * Adam divides by sqrt(v) + eps as dequantized); the paper's remedies are the Stable Embedding layer
 * and percentile gradient clipping, changes to the model and the gradients, where this is one to the
 * optimizer alone. Computed in double on the host, the same for both backends; b2 = 0 or b1^2 >= b2
 * have no finite bound (returns 3e38: no cap). */
float adamw8bit_max_step(AdamWHyper h);

/* One element of a quantized block's update: kernels/adamw.h's adamw_element with the Adam term
 * clamped to [-max_step, max_step] by two comparisons (exact, and a NaN or a signed zero passes as it
 * is), as the CUDA kernel does. */
static inline float adamw8bit_element(float p, float g, float *m, float *v, float decay, float step_size, float bc2_sqrt,
                                      float max_step, const AdamWHyper *h) {
    g *= h->grad_scale;
    p *= decay;
    *m = h->beta1 * *m + (1.0f - h->beta1) * g;
    *v = h->beta2 * *v + (1.0f - h->beta2) * g * g;
    float u = step_size * *m / (__builtin_sqrtf(*v) / bc2_sqrt + h->eps);
    return p - (u > max_step ? max_step : u < -max_step ? -max_step : u);
}

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
/* The moments of every slice as fp32 (m, v laid out like params: element offset + j), from a host copy of
 * the state: dequantized blocks, copied fp32 slices; and back (quantized per block). Quantizing what
 * adamw8bit_state_get gave returns the same codes and absmax bit for bit. */
void adamw8bit_state_get(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, float *m, float *v);
void adamw8bit_state_set(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, const float *m, const float *v);
