/* kernels/adamw8bit.h — 8-bit AdamW: the moments kept as one byte per element
 * (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2022).
 *
 * The idea: cut each parameter slice into blocks of at most 256 elements; a
 * block of a moment is stored as its codes (uint8) and one fp32 absmax. A code
 * indexes one sorted map of 256 values in [-1, 1]. The first moment m is kept
 * as itself: m = map[code] * absmax, absmax the block's largest |m|. The second
 * moment v is kept as its square root s = sqrt(v) on the same map's
 * non-negative half: s = map[code] * absmax, absmax the block's largest s, and
 * v = s * s. One pass per block dequantizes m and v, does the fp32 AdamW step
 * of kernels/adamw.h (the same math in the same order, the Adam term bounded:
 * adamw8bit_max_step), then requantizes: each element gets the code nearest to
 * value / absmax (binary search; ties go to the lower code), except that an s
 * above 0 takes at least the code of 3.25e-6 (rounding v up). Slices of fp32
 * state (small tensors) get the plain fp32 update in the same call.
 *
 * What range each moment keeps, and why (issue 52). m: from 2.75e-7 of its
 * block's absmax up (the map's smallest positive value is 5.5e-7; below that
 * an m rounds to 0 and its element stops, the safe direction). v: s from
 * 3.25e-6 of its block's largest s up, so v from ~1e-11 of the block's largest
 * v up, and a smaller v above 0 is rounded up to that. v is the square of a
 * gradient's size, so it spans twice the decades m does: stored as itself (the
 * rule before this one, on a 254-value unsigned map) a v below 1.6e-7 of its
 * block's largest v decoded to 0 while its m, at 4e-4 of m's absmax, survived,
 * and the element took the capped step every step until m decayed (a rare
 * token's embedding drifted ~11x as far as under AdamW). Kept as sqrt(v) it
 * spans the decades m spans; on the same map, an element whose m and s sit at
 * the same fraction of their blocks' absmax (every element of a row that had
 * one gradient, as a rare token's embedding row: m = (1-b1) g, s = sqrt(1-b2)
 * |g|) gets the same code magnitude for both, so their ratio, the Adam step, is
 * AdamW's whatever the fraction; it stays so while the row decays (both absmax
 * decay with their elements). The floor closes the hole: whatever the block's
 * absmax, an s above 0 decodes to at least 3.25e-6 of it, so a v that is not 0
 * in fp32 never decodes to 0 (v = s * s: an s whose square underflows fp32
 * decodes to its smallest denormal). Rounding v up only shrinks a step. The
 * floor is 3.25e-6, not the map's smallest positive 5.5e-7, because the
 * negative side lacks -5.5e-7 (its code went to -1): a negative m at 1.7e-6
 * of its absmax rounds to -3.25e-6, and an s at the same fraction rounding to
 * 5.5e-7 would make that element's step 6x AdamW's. With s kept off 5.5e-7 the
 * magnitudes s can take are those both signs of m can, so at the bottom of the
 * range |m|'s code never outgrows s's (a positive m there may round to 5.5e-7
 * under an s of 3.25e-6: a smaller step). The price: s has the 128
 * non-negative values (top decade's half gap 0.7% of absmax: 1.4% of v, 0.7%
 * of the step) where the old unsigned map had 255.
 * Where eps, not sqrt(v), sets the step (sqrt(v^) ~ eps: gradients ~1e-8) the
 * same rounding of s no longer cancels m's, and the step is m's rounding times
 * AdamW's. Round to nearest raises |m| by at most 1.466x above the map's two
 * smallest magnitudes (the widest relative gap: 7.75e-6 to 2.125e-5) and by
 * up to 2x on them (a magnitude just above half the smallest of its sign:
 * 5.5e-7 positive; 3.25e-6 negative, that side lacking -5.5e-7). After one
 * gradient that is a step up to 2x AdamW's which decays with m: 1.5x AdamW's
 * + at most 0.21 lr in all (the bound and its derivation: tests/q8_drift_case.h).
 * It is not drift (no step that AdamW no longer takes), so the rule keeps it:
 * never rounding |m| up past 1.466x (rounding toward 0 there instead) meets
 * 1.5x but sends more elements' steps to 0, to remove an excess of 0.13 lr at
 * most on the case that found it (docs/adamw8bit.md).
 * Measured against the other candidates (v on a map of its own, sqrt(v) on the
 * unsigned map, blocks of 64, fp32 moments for the embedding): docs/adamw8bit.md.
 *
 * Blocks: a slice is a run of rows of `row` elements (its last row may be
 * shorter); each row is cut into blocks of 256 from its start, the last one
 * shorter. The caller picks the rows (train/optimizer.c: row segments of the
 * whole tensor that no tensor-parallel slicing splits), so blocks never span
 * two rows. Codes lie parallel to the elements (code state + j for element j
 * of the slice); absmax values one per block, in block order from `block`.
 *
 * The map is a "dynamic tree" map: after the sign bit, a run of zero bits
 * gives the decimal exponent (1e0 .. 1e-6), an indicator bit ends it, and the
 * remaining bits are a linear fraction in [0.1, 1] (bin midpoints): 127
 * positive + 127 negative values, 0 and 1 (bitsandbytes'
 * create_dynamic_map(signed=True)), made symmetric at the ends: its smallest
 * negative magnitude -5.5e-7 gives its code to -1, so a block's absmax element
 * is exact whatever its sign (and requantizing dequantized values returns the
 * same codes), while the widest gap stays the top decade's 0.9/64.
 * Built once on the host (adamw8bit_map); the CUDA backend uploads the same
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
 * 8-bit moments break the link between m and v: each rounds on its own, so the dequantized pair may pass
 * R_t (and under the rule before issue 52, a v that quantized to 0 while m survived made the step m/eps,
 * 10^5 x lr and more; the floor on s now keeps such a v above 0, and this cap still bounds the rest).
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

/* The map, sorted ascending, 256 values in [-1, 1]; it holds 0 (code ADAMW8BIT_ZERO) and both ends
 * exactly. Built on first use, then the same table; call it once outside any parallel region. */
#define ADAMW8BIT_ZERO 127
const float *adamw8bit_map(void);
/* The code whose map value is nearest to x (x clamped to the map's ends; ties:
 * the lower code): a branch-free binary search for the last map[k] <= x, then
 * k or k + 1. The CUDA kernel does exactly this. */
static inline uint8_t adamw8bit_nearest(const float *map /* (256) */, float x) {
    int k = 0;
    for (int step = 128; step > 0; step >>= 1) k += map[k + step] <= x ? step : 0;
    if (k == 255) return 255;
    return (uint8_t)(map[k + 1] - x < x - map[k] ? k + 1 : k);
}
/* The first moment, one block of n <= 256 values: returns absmax = max |m| and writes code (n);
 * an all-zero block has absmax 0 and every code at map value 0. Back: m = map[code] * absmax. */
float adamw8bit_quantize_m(const float *map, const float *m /* (n) */, int n, uint8_t *code /* (n) */);
void adamw8bit_dequantize_m(const float *map, const uint8_t *code /* (n) */, float absmax, int n, float *m /* (n) */);
/* The second moment, one block: s = sqrt(v) (IEEE, correctly rounded), returns absmax = max s and writes
 * the code nearest to s / absmax, at least ADAMW8BIT_V_FLOOR for an s above 0 (adamw8bit_v_code). Back:
 * v = (map[code] * absmax)^2, the smallest denormal where that square underflows (adamw8bit_v_value). */
float adamw8bit_quantize_v(const float *map, const float *v /* (n) */, int n, uint8_t *code /* (n) */);
void adamw8bit_dequantize_v(const float *map, const uint8_t *code /* (n) */, float absmax, int n, float *v /* (n) */);
#define ADAMW8BIT_V_FLOOR (ADAMW8BIT_ZERO + 2)   /* 3.25e-6: the smallest magnitude both signs of the map hold */
static inline uint8_t adamw8bit_v_code(const float *map, float s, float absmax) {
    uint8_t c = adamw8bit_nearest(map, absmax > 0.0f ? s / absmax : 0.0f);
    return s > 0.0f && c < ADAMW8BIT_V_FLOOR ? ADAMW8BIT_V_FLOOR : c;
}
static inline float adamw8bit_v_value(float map_value, float absmax) {
    float s = map_value * absmax, v = s * s;
    return v == 0.0f && s > 0.0f ? 1.4e-45f : v;
}
/* The moments of every slice as fp32 (m, v laid out like params: element offset + j), from a host copy of
 * the state: dequantized blocks, copied fp32 slices; and back (quantized per block). Quantizing what
 * adamw8bit_state_get gave returns the same codes and absmax bit for bit. A quantized element given
 * v = 0 under an m that survives quantizing (a checkpoint of the rule before issue 52, where v decoded
 * to 0 so) gets m = 0: it would otherwise take the capped step every step, a state no AdamW run has.
 * Returns how many elements that was. */
void adamw8bit_state_get(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, float *m, float *v);
size_t adamw8bit_state_set(AdamW8bitState st, const AdamW8bitSlice *slices, int n_slices, const float *m, const float *v);
