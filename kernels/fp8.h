/* kernels/fp8.h — FP8 numbers (E4M3, E5M2) and the linear layer with FP8 operands.
 *
 * The idea: precision=fp8 is bf16 training whose four block matmuls a layer
 * (q|k|v, o, gate|up, down; forward and both backward products) multiply FP8
 * operands with fp32 accumulation: the input x and the weight in E4M3 (3
 * mantissa bits, largest 448), the output gradient in E5M2 (2 mantissa bits,
 * largest 57344). Before its cast each operand is multiplied by a power-of-two
 * scale, and the product is divided by both scales again; a value the scale
 * carries past the largest FP8 number saturates to it. Which scales: model/fp8.c
 * (delayed: from the history of each operand's max |value|). These ops cast with
 * the scales they are given and fold every operand's max |value| into an amax
 * record, the input of the next steps' scales. A scale of 0 means "no history
 * yet": the op runs the plain act-dtype matmul and only records the maxima.
 *
 * The CPU backend emulates it exactly: each operand is rounded as the cast
 * rounds it (nearest even, saturating), then multiplied in fp32 — what the
 * FP8 tensor cores compute, up to the order of the fp32 sums. */
#pragma once
#include <stddef.h>

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } Fp8Format;
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
static inline float fp8_max(Fp8Format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

/* x rounded to the nearest FP8 number of format f (ties to even; past the
 * largest finite number it saturates to it, infinities too; NaN stays NaN):
 * what CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f) keeps, as float. */
static inline float fp8_round(float x, Fp8Format f) {
    int mant = f == FP8_E4M3 ? 3 : 2;                     /* mantissa bits */
    float min_normal = f == FP8_E4M3 ? 0x1p-6f : 0x1p-14f, max = fp8_max(f);
    union { float f; unsigned int u; } v = {x};
    unsigned int sign = v.u & 0x80000000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return x;                        /* NaN */
    v.u = a;
    if (v.f >= min_normal) {                              /* normal: keep `mant` of fp32's 23 mantissa bits, to even */
        unsigned int drop = 23 - mant;
        v.u = (a + (1u << (drop - 1)) - 1 + ((a >> drop) & 1u)) & ~((1u << drop) - 1);
        if (v.f > max) v.f = max;                         /* saturate (inf included) */
    } else {                                              /* subnormal: a multiple of min_normal / 2^mant */
        float step = min_normal / (float)(1 << mant);
        v.f = __builtin_rintf(v.f / step) * step;
    }
    v.u |= sign;
    return v.f;
}

/* The scales and records of one FP8 linear layer's call. */
typedef struct {
    float x_scale;          /* power of two that x and (backward) x again are multiplied by before their E4M3 cast; 0: no history */
    float w_scale;          /* the same for the weight */
    float dout_scale;       /* the same for the output gradient, cast to E5M2 (backward only) */
    float *amax;            /* (3) backend memory: max |x|, max |weight|, max |dout| are folded in (max with what is there) */
    void *scratch;          /* matmul_fp8_scratch_bytes(...) of backend memory: the FP8 copies of the operands */
    int x_cast;             /* x was cast by its producer (RmsnormForwardFp8, SwigluForwardFp8): inp holds its cast form, not act-dtype values */
    int dout_cast;          /* dout was cast by its producer (SwigluBackwardFp8): its copies are in the scratch; dout is not read */
} Fp8Matmul;

/* forward:  out (N,OC) = q(x) @ q(weight)^T (+ add), in the act dtype
 * backward: dinp (N,IC) = q(dout) @ q(weight) (skipped when NULL); dweight (OC,IC) = q(dout)^T @ q(x), fp32, or += it
 *           when accumulate (kernels/matmul.h)
 * where q(t) = fp8_round(t * scale, format) / scale, the scale of t's role. The amaxes of the operands the call
 * reads are recorded whether or not it casts them (x and weight in the forward, all three in the backward). */
typedef void MatmulFp8Forward(void *out /* (N,OC) */, const void *inp /* (N,IC) */, const void *weight /* (OC,IC) */,
                              int N, int IC, int OC, const void *add /* (N,OC) or NULL */, const Fp8Matmul *q);
typedef void MatmulFp8Backward(void *dinp /* (N,IC) or NULL */, float *dweight /* (OC,IC) = or += */, const void *dout /* (N,OC) */,
                               const void *inp /* (N,IC) */, const void *weight /* (OC,IC) */, int N, int IC, int OC, int accumulate,
                               const Fp8Matmul *q);
/* x_cast / dout_cast: the operand's max was recorded, and its copies made, by its producer with the same q and
 * every scale of q set (a producer never runs with a scale of 0: the model calls the plain op then). */
MatmulFp8Forward matmul_fp8_forward_cpu, matmul_fp8_forward_cuda;
MatmulFp8Backward matmul_fp8_backward_cpu, matmul_fp8_backward_cuda;

/* Scratch one call of either op needs, for element size e (1: the GPU's FP8 bytes; 4: the CPU's emulated fp32):
 * the backward's dout, dout^T, weight^T and x^T copies (the forward's x and weight copies fit in the same). */
static inline size_t matmul_fp8_scratch_bytes(size_t e, int N, int IC, int OC) {
    size_t pad = 4 * 256;   /* each copy starts 256-aligned */
    return e * (2 * (size_t)N * OC + (size_t)N * IC + (size_t)OC * IC) + pad;
}

/* Producers that cast: RMSNorm and SwiGLU write their outputs straight into the FP8 copies the next matmul reads, so
 * no pass reads the act-dtype tensor again to cast it (every value rounded to the act dtype first, as the plain op
 * stores it, then cast: the copies are the ones the matmul would have made). Called only with all of q's scales set.
 *  - RMSNorm forward: out gets the cast form of rmsnorm(inp) (N,C) for the q|k|v or gate|up matmul (x_cast), laid
 *    out as SwiGLU's below; rstd (N) as rmsnorm_forward writes it. max |out| goes to q->amax[0].
 *  - forward: hs gets the *cast form* of swiglu(h13) (N,F) for the down matmul, q its Fp8Matmul: a buffer of the
 *    act-dtype tensor's bytes holding, on the GPU, the E4M3 row-major copy (N,F) then the transposed copy (F,N) —
 *    the forward reads the first, the backward's weight gradient the second; on the CPU (emulated) the values
 *    fp8_round(v * s) / s in place. max |hs| goes to q->amax[0]. The down matmul then runs with q->x_cast.
 *  - backward: dh13 (N,2F) = swiglu's backward of dout (N,F), cast to E5M2 straight into q's scratch, where the
 *    gate|up matmul's backward (q, dout_cast) reads its copies; max |dh13| goes to q->amax[2]. */
typedef void RmsnormForwardFp8(void *out /* cast form of (N,C) */, float *rstd /* (N) */, const void *inp /* (N,C) */,
                               const void *weight /* (C) */, int N, int C, float eps, const Fp8Matmul *q);
typedef void SwigluForwardFp8(void *hs /* cast form of (N,F) */, const void *h13 /* (N,2F) */, int N, int F, const Fp8Matmul *q);
typedef void SwigluBackwardFp8(const void *dout /* (N,F) */, const void *h13 /* (N,2F) */, int N, int F, const Fp8Matmul *q);
RmsnormForwardFp8 rmsnorm_forward_fp8_cuda;
SwigluForwardFp8 swiglu_forward_fp8_cuda;
SwigluBackwardFp8 swiglu_backward_fp8_cuda;
/* The CPU's pieces of them (kernels/backend_cpu.c runs the op, rounds, then these): max |t| into *amax, then t (n)
 * = fp8_round(t * scale, f) / scale in place; and where matmul_fp8_backward_cpu finds a producer's dout copy. */
void fp8_cast_in_place_cpu(float *t, size_t n, float scale, Fp8Format f, float *amax);
float *matmul_fp8_dout_copy_cpu(void *scratch);
