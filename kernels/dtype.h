/* kernels/dtype.h — the element types activations and compute weights can have.
 * Master weights, gradients, optimizer state and statistics are always fp32;
 * the backend's `act` dtype is what the forward and backward passes run in. */
#pragma once
#include <stddef.h>

typedef enum { DTYPE_FP32 = 0, DTYPE_BF16 = 1, DTYPE_FP16 = 2 } DType;

static inline size_t dtype_size(DType t) { return t == DTYPE_FP32 ? 4 : 2; }
/* Element i of a host array of dtype t, as float (bf16: the top 16 bits of an
 * fp32; fp16: IEEE half, subnormals included). */
static inline float dtype_to_float(const void *p, DType t, size_t i) {
    if (t == DTYPE_FP32) return ((const float *)p)[i];
    unsigned short h = ((const unsigned short *)p)[i];
    union { unsigned int u; float f; } x;
    if (t == DTYPE_BF16) { x.u = (unsigned int)h << 16; return x.f; }
    unsigned int sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (e == 0x1f) x.u = sign | 0x7f800000u | (mant << 13);                      /* inf, nan */
    else if (e == 0) { x.f = mant * (1.0f / 16777216.0f); x.u |= sign; }         /* zero, subnormal: mant * 2^-24 */
    else x.u = sign | ((e + 112) << 23) | (mant << 13);
    return x.f;
}

/* Element i of a host array of dtype t set from x, rounded to nearest even
 * (fp16 overflows to inf, as the GPU's conversion does). */
static inline void dtype_from_float(void *p, DType t, size_t i, float x) {
    if (t == DTYPE_FP32) { ((float *)p)[i] = x; return; }
    union { float f; unsigned int u; } v = {x};
    if (t == DTYPE_FP16) {
        unsigned int sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu, r;
        if (a > 0x7f800000u) r = sign | 0x7e00u;                            /* nan */
        else if (a >= 0x477ff000u) r = sign | 0x7c00u;                      /* rounds past 65504: inf */
        else if (a < 0x33000000u) r = sign;                                 /* below half the smallest subnormal */
        else if (a < 0x38800000u) {                                         /* subnormal */
            unsigned int man = (a & 0x7fffffu) | 0x800000u, shift = 126 - (a >> 23);
            unsigned int q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
            r = sign | (q + (rem > half || (rem == half && (q & 1))));
        } else r = sign | ((a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13);
        ((unsigned short *)p)[i] = (unsigned short)r;
        return;
    }
    if ((v.u & 0x7fffffffu) > 0x7f800000u) { ((unsigned short *)p)[i] = (unsigned short)((v.u >> 16) | 0x40); return; }
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    ((unsigned short *)p)[i] = (unsigned short)(v.u >> 16);
}

/* x rounded to the nearest IEEE half (ties to even; past 65504 to inf; nan
 * stays nan), back as float: what storing x in fp16 keeps. Integer code, so
 * every compiler builds it (clang 14 has no _Float16 on x86). */
static inline float dtype_round_fp16(float x) {
    union { float f; unsigned int u; } v = {x};
    unsigned int sign = v.u & 0x80000000u, a = v.u & 0x7fffffffu;
    if (a >= 0x7f800000u) return x;                                   /* inf, nan */
    if (a >= 0x477ff000u) v.u = sign | 0x7f800000u;                   /* rounds past 65504: inf */
    else if (a >= 0x38800000u) v.u = sign | ((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u);   /* normal: drop 13 bits, to even */
    else { v.u = a; v.f = __builtin_rintf(v.f * 16777216.0f) * (1.0f / 16777216.0f); v.u |= sign; }   /* subnormal: to a multiple of 2^-24 */
    return v.f;
}

static inline const char *dtype_name(DType t) { return t == DTYPE_FP32 ? "fp32" : t == DTYPE_BF16 ? "bf16" : "fp16"; }
