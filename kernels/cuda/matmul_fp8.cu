/* kernels/cuda/matmul_fp8.cu — precision=fp8's linear layer (kernels/fp8.h) on
 * the GPU: matmul_fp8_forward_cuda, matmul_fp8_backward_cuda, and the one cast
 * kernel both use.
 *
 * The idea: each bf16 operand is read once by the cast kernel, which multiplies
 * it by its power-of-two scale, rounds it to FP8 with the cvt instruction
 * (nearest even, saturating: exactly fp8_round), writes the row-major copy, the
 * transposed copy (through a shared-memory tile, so the bf16 reads and the FP8
 * writes are both coalesced) or both, and folds max |x| of the unscaled input
 * into the amax record. cuBLASLt's FP8 kernels take both operands K-contiguous
 * ("TN"): the forward's x (N,IC) and weight (OC,IC) already are; dgrad reads
 * weight^T and dout, wgrad x^T and dout^T, hence the transposed copies. The
 * scales are powers of two known on the host, so alpha = 1 / (s_a * s_b) undoes
 * them exactly. A call missing a scale (0: no history) runs matmul.cu's plain
 * bf16 product and only records the maxima. The FP8 copies live in the caller's
 * scratch (Fp8Matmul.scratch), carved into 256-aligned views. */
#include "common.cuh"
#include "swiglu.cuh"
#include "rmsnorm.cuh"
#include <cuda_fp8.h>
extern "C" {
#include "../fp8.h"
#include "../matmul.h"
#include "../../common/util.h"
}

/* ---- the cast --------------------------------------------------------------------------------------- */
/* A block casts a (32 J) x 64 tile of x: 256 threads, each J rows x 8 columns. J trades the loads one thread keeps in
 * flight against the registers that limit how many blocks an SM holds. CAST_J 1 is the fastest on the H200 (2026-12-05,
 * N = 16384, F = 2048: the SwiGLU backward producer 0.103 ms at J = 1, 0.108 at 2, 0.146 at 4 — 45, ~60, 98 registers;
 * the forward 0.104 / 0.105 / 0.113; plain casts within 10% either way). */
#define CAST_COLS 64
#define CAST_THREADS 256
#ifndef CAST_J
#define CAST_J 1
#endif

/* Where a cast's values come from: a source of H column blocks. The logical tensor is (R, K), K = H * Kh; src(v, r, c)
 * puts in v[h] (8) the values of row r, columns h * Kh + c .. + 7, as floats, each rounded to bf16 as the op that
 * would have stored the tensor rounds it; 0 past the edges. H = 2 lets one load feed two outputs (SwiGLU's backward
 * computes dgate and dup from the same gate, up and dout). */

/* a bf16 tensor x (R,K) itself; vec: K % 8 == 0 and x 16-byte aligned (one 16-byte load) */
struct FromBf16 {
    static constexpr int H = 1;
    const __nv_bfloat16 *x;
    int R, K;
    bool vec;
    __device__ __forceinline__ void operator()(float (*v)[8], int r, int c) const {
        if (r < R && vec && c + 8 <= K) {
            Vec<__nv_bfloat16, 8> p = vload<__nv_bfloat16, 8>(x + (size_t)r * K + c);
#pragma unroll
            for (int i = 0; i < 8; i++) v[0][i] = p.v[i];
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[0][i] = r < R && c + i < K ? __bfloat162float(x[(size_t)r * K + c + i]) : 0.0f;
        }
    }
};

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* swiglu(h13) (N,F) from h13 (N,2F), as swiglu.cu stores it; F % 8 == 0 and h13 16-byte aligned (the producers check) */
struct FromSwiglu {
    static constexpr int H = 1;
    const __nv_bfloat16 *h13;
    int N, F;
    __device__ __forceinline__ void operator()(float (*v)[8], int r, int c) const {
        if (r >= N || c >= F) {
#pragma unroll
            for (int i = 0; i < 8; i++) v[0][i] = 0.0f;
            return;
        }
        const __nv_bfloat16 *row = h13 + (size_t)r * 2 * F;
        Vec<__nv_bfloat16, 8> g = vload<__nv_bfloat16, 8>(row + c), u = vload<__nv_bfloat16, 8>(row + F + c);
#pragma unroll
        for (int i = 0; i < 8; i++) v[0][i] = bf16_round(swiglu_value(g.v[i], u.v[i]));
    }
};

/* swiglu's backward dh13 (N,2F) of dout (N,F), as swiglu.cu stores it: block 0 dgate, block 1 dup (Kh = F) */
struct FromSwigluBackward {
    static constexpr int H = 2;
    const __nv_bfloat16 *dout, *h13;
    int N, F;
    __device__ __forceinline__ void operator()(float (*v)[8], int r, int c) const {
        if (r >= N || c >= F) {
#pragma unroll
            for (int i = 0; i < 8; i++) v[0][i] = v[1][i] = 0.0f;
            return;
        }
        const __nv_bfloat16 *row = h13 + (size_t)r * 2 * F;
        Vec<__nv_bfloat16, 8> g = vload<__nv_bfloat16, 8>(row + c), u = vload<__nv_bfloat16, 8>(row + F + c),
                              dy = vload<__nv_bfloat16, 8>(dout + (size_t)r * F + c);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float dg, du;
            swiglu_grads(g.v[i], u.v[i], dy.v[i], &dg, &du);
            v[0][i] = bf16_round(dg);
            v[1][i] = bf16_round(du);
        }
    }
};

/* rmsnorm(x) (N,C) with its rstd (N) already computed, as rmsnorm.cu stores it; C % 8 == 0, x and w 16-byte aligned */
struct FromRmsnorm {
    static constexpr int H = 1;
    const __nv_bfloat16 *x, *w;
    const float *rstd;
    int N, C;
    __device__ __forceinline__ void operator()(float (*v)[8], int r, int c) const {
        if (r >= N || c >= C) {
#pragma unroll
            for (int i = 0; i < 8; i++) v[0][i] = 0.0f;
            return;
        }
        Vec<__nv_bfloat16, 8> a = vload<__nv_bfloat16, 8>(x + (size_t)r * C + c), b = vload<__nv_bfloat16, 8>(w + c);
        float rs = rstd[r];
#pragma unroll
        for (int i = 0; i < 8; i++) v[0][i] = bf16_round(rmsnorm_value(a.v[i], rs, b.v[i]));
    }
};

/* x8 (R,K) = fp8(x * s) and/or xT8 (K,R) = its transpose, x the values src gives (K = Src::H * Kh); *amax = max(*amax,
 * max |x|). A block casts rows r0..r0+32J-1 of columns k0..k0+63 of each of the H column blocks. The maxima travel as
 * the int bits of |x|: non-negative floats order as their bits, and a NaN's bits (sign cleared) are above inf's, so a
 * NaN is the max. s == 0 or no output: only the max. Outputs need Kh % 8 == 0 (x8), R % 4 == 0 (xT8). */
template <typename Src, int J>
__global__ void __launch_bounds__(CAST_THREADS) cast_fp8_kernel(uint8_t *x8 /* (R,K) or NULL */, uint8_t *xT8 /* (K,R) or NULL */,
                                                                float *amax /* (1) */, Src src, int R, int Kh, float s,
                                                                __nv_fp8_interpretation_t f) {
    constexpr int H = Src::H, ROWS = 32 * J, STRIDE = ROWS + 4;   /* STRIDE: bytes a row of the transposed tile (2-way banks at most) */
    __shared__ __align__(16) uint8_t tile[H][CAST_COLS][STRIDE];   /* tile[h][k][r]: block h's FP8 tile, transposed */
    __shared__ int warp_m[CAST_THREADS / 32];
    int r0 = blockIdx.x * ROWS, k0 = blockIdx.y * CAST_COLS, K = H * Kh;
    int c = 8 * (threadIdx.x % 8), rq = J * (threadIdx.x / 8);   /* this thread's columns c..c+7 and rows rq..rq+J-1 of the tile */
    bool cast = s != 0.0f && (x8 || xT8);
    int m = 0;
    uint32_t col[H][8] = {};   /* col[h][i]: the J FP8 bytes of rows rq.. at column c+i of block h, for the transposed tile */
    float v[J][H][8];   /* every load first: the FP8 stores below may alias the source (bytes), so none would pass them */
#pragma unroll
    for (int j = 0; j < J; j++) src(v[j], r0 + rq + j, k0 + c);
#pragma unroll
    for (int j = 0; j < J; j++) {
        int r = r0 + rq + j;
#pragma unroll
        for (int h = 0; h < H; h++) {
#pragma unroll
            for (int i = 0; i < 8; i++) m = max(m, __float_as_int(fabsf(v[j][h][i])));
            if (!cast) continue;
            uint32_t word[2] = {0, 0};   /* the 8 FP8 bytes, column c first (x.x goes to the low byte) */
#pragma unroll
            for (int i = 0; i < 8; i += 2) {
                __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(v[j][h][i] * s, v[j][h][i + 1] * s), __NV_SATFINITE, f);
                word[i / 4] |= (uint32_t)p << (8 * (i % 4));
            }
            if (x8 && r < R && k0 + c < Kh)
                *reinterpret_cast<uint2 *>(x8 + (size_t)r * K + h * Kh + k0 + c) = make_uint2(word[0], word[1]);
#pragma unroll
            for (int i = 0; i < 8; i++) col[h][i] |= ((word[i / 4] >> (8 * (i % 4))) & 0xffu) << (8 * j);
        }
    }
    /* the block's max, then one atomic, skipped when the record already holds as much (it only grows) */
    m = __reduce_max_sync(0xffffffffu, m);
    if (threadIdx.x % 32 == 0) warp_m[threadIdx.x / 32] = m;
    if (xT8 && cast) {
#pragma unroll
        for (int h = 0; h < H; h++)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                uint8_t *t = &tile[h][c + i][rq];
                if (J == 4) *reinterpret_cast<uint32_t *>(t) = col[h][i];
                else if (J == 2) *reinterpret_cast<uint16_t *>(t) = (uint16_t)col[h][i];
                else *t = (uint8_t)col[h][i];
            }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < CAST_THREADS / 32 ? warp_m[threadIdx.x] : 0;
        m = __reduce_max_sync(0xffffffffu, m);
        int *rec = reinterpret_cast<int *>(amax);
        if (threadIdx.x == 0 && m > *(volatile int *)rec) atomicMax(rec, m);
    }
    if (!(xT8 && cast)) return;
    /* the transposed tiles out: 4 bytes a thread, ROWS contiguous bytes of one row k of xT8 from ROWS / 4 threads */
#pragma unroll
    for (int h = 0; h < H; h++)
#pragma unroll
        for (int j = 0; j < ROWS * CAST_COLS / 4 / CAST_THREADS; j++) {
            int w = threadIdx.x + j * CAST_THREADS, k = w / (ROWS / 4), r = 4 * (w % (ROWS / 4));
            if (k0 + k < Kh && r0 + r < R)
                *reinterpret_cast<uint32_t *>(xT8 + (size_t)(h * Kh + k0 + k) * R + r0 + r) = *reinterpret_cast<const uint32_t *>(&tile[h][k][r]);
        }
}

/* x8 (R,K) and/or xT8 (K,R) = fp8(x (R,K) * s) in format f, x what src gives, max |x| folded into *amax; s == 0 or both
 * NULL: the max only */
template <typename Src, int J = CAST_J>
static void cast_fp8_from(Src src, uint8_t *x8, uint8_t *xT8, float *amax, int R, int K, float s, __nv_fp8_interpretation_t f) {
    if ((size_t)R * K == 0) return;
    if (s == 0.0f) x8 = xT8 = NULL;
    int Kh = K / Src::H;
    if (K % Src::H || (x8 && Kh % 8) || (xT8 && R % 4) || ceil_div(Kh, CAST_COLS) > 65535)
        die("internal: cast_fp8 of a (%d,%d) tensor in %d column blocks: FP8 copies need the blocks' width %% 8 == 0 (row-major), "
            "R %% 4 == 0 (transposed), K <= %d", R, K, Src::H, 65535 * CAST_COLS);
    dim3 grid(ceil_div(R, 32 * J), ceil_div(Kh, CAST_COLS));
    cast_fp8_kernel<Src, J><<<grid, CAST_THREADS, 0, cuda_stream>>>(x8, xT8, amax, src, R, Kh, s, f);
    launchCheck();
}

/* the same of a bf16 tensor x (R,K) */
static void cast_fp8(uint8_t *x8, uint8_t *xT8, float *amax, const void *x, int R, int K, float s, __nv_fp8_interpretation_t f) {
    FromBf16 src = {(const __nv_bfloat16 *)x, R, K, K % 8 == 0 && (uintptr_t)x % 16 == 0};
    cast_fp8_from(src, x8, xT8, amax, R, K, s, f);
}

/* ---- the launchers ---------------------------------------------------------------------------------- */
static void need_bf16(const char *op) {
    if (cuda_act != DTYPE_BF16)
        die("internal: %s runs on bf16 activations (precision=fp8), but the CUDA backend was opened with %s", op, dtype_name(cuda_act));
}
static void need_fp8_shape(const char *op, int N, int IC, int OC) {
    if (N % 16 || IC % 16 || OC % 16)
        die("internal: %s with N=%d IC=%d OC=%d: FP8 matmuls need N, IC and OC multiples of 16 (cuBLASLt's FP8 alignment)",
            op, N, IC, OC);
}
/* a producer casts only when every scale is set (kernels/fp8.h): a cast operand with a scale of 0 is a caller's bug */
static void need_plain(const Fp8Matmul *q, const char *op) {
    if (q->x_cast || q->dout_cast) die("internal: %s with a scale of 0 but an operand its producer cast", op);
}
/* the next view of the scratch: `bytes` from *p rounded up to 256, *p moved past them */
static uint8_t *carve(char **p, size_t bytes) {
    uint8_t *v = (uint8_t *)(((uintptr_t)*p + 255) & ~(uintptr_t)255);
    *p = (char *)v + bytes;
    return v;
}

/* out (N,OC) = q(inp) @ q(weight)^T (+ add); column-major: out^T (OC,N) = W8^T-op (OC,IC) @ X8 (IC,N), both E4M3 */
extern "C" void matmul_fp8_forward_cuda(void *out, const void *inp, const void *weight, int N, int IC, int OC, const void *add,
                                        const Fp8Matmul *q) {
    need_bf16("matmul_fp8_forward");
    float sx = q->x_scale, sw = q->w_scale;
    if (sx == 0 || sw == 0) {   /* no history yet: the plain product, the maxima recorded */
        need_plain(q, "matmul_fp8_forward");
        cast_fp8(NULL, NULL, &q->amax[0], inp, N, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[1], weight, OC, IC, 0, __NV_E4M3);
        matmul_forward_cuda(out, inp, weight, N, IC, OC, add);
        return;
    }
    need_fp8_shape("matmul_fp8_forward", N, IC, OC);
    char *p = (char *)q->scratch;
    uint8_t *x8 = carve(&p, (size_t)N * IC);    /* (N,IC) E4M3 */
    uint8_t *w8 = carve(&p, (size_t)OC * IC);   /* (OC,IC) E4M3 */
    if (q->x_cast) x8 = (uint8_t *)inp;         /* its producer's row-major copy, the cast form's first half */
    else cast_fp8(x8, NULL, &q->amax[0], inp, N, IC, sx, __NV_E4M3);
    cast_fp8(w8, NULL, &q->amax[1], weight, OC, IC, sw, __NV_E4M3);
    if (N == 0 || OC == 0) return;
    lt_matmul(out, w8, x8, add, OC, N, IC, IC, IC, OC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF,
              1.0f / (sx * sw), add ? 1.0f : 0.0f);
}

/* dinp (N,IC) = q(dout) @ q(weight);    column-major: dinp^T (IC,N) = Wt8^T-op (IC,OC) @ dout8 (OC,N), E4M3 x E5M2
 * dweight (OC,IC) (+)= q(dout)^T @ q(inp); column-major: dW^T (IC,OC) (+)= xT8^T-op (IC,N) @ doutT8 (N,OC), fp32 C = D
 * (beta = accumulate) */
extern "C" void matmul_fp8_backward_cuda(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight,
                                         int N, int IC, int OC, int accumulate, const Fp8Matmul *q) {
    need_bf16("matmul_fp8_backward");
    float sx = q->x_scale, sw = q->w_scale, sdy = q->dout_scale;
    if (sx == 0 || sw == 0 || sdy == 0) {
        need_plain(q, "matmul_fp8_backward");
        cast_fp8(NULL, NULL, &q->amax[0], inp, N, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[1], weight, OC, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[2], dout, N, OC, 0, __NV_E5M2);
        matmul_backward_cuda(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate);
        return;
    }
    need_fp8_shape("matmul_fp8_backward", N, IC, OC);
    char *p = (char *)q->scratch;
    uint8_t *dy8 = carve(&p, (size_t)N * OC);    /* (N,OC) E5M2 */
    uint8_t *dyT8 = carve(&p, (size_t)N * OC);   /* (OC,N) E5M2 */
    uint8_t *wT8 = carve(&p, (size_t)OC * IC);   /* (IC,OC) E4M3 */
    uint8_t *xT8 = carve(&p, (size_t)N * IC);    /* (IC,N) E4M3 */
    if (!q->dout_cast) cast_fp8(dinp ? dy8 : NULL, dyT8, &q->amax[2], dout, N, OC, sdy, __NV_E5M2);   /* else: its producer's */
    cast_fp8(NULL, dinp ? wT8 : NULL, &q->amax[1], weight, OC, IC, sw, __NV_E4M3);   /* without dinp: the max only */
    if (q->x_cast) xT8 = (uint8_t *)inp + (size_t)N * IC;                           /* the cast form's transposed half */
    else cast_fp8(NULL, xT8, &q->amax[0], inp, N, IC, sx, __NV_E4M3);
    if (N == 0 || OC == 0 || IC == 0) return;
    if (dinp)
        lt_matmul(dinp, wT8, dy8, NULL, IC, N, OC, OC, OC, IC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF,
                  1.0f / (sdy * sw), 0.0f);
    lt_matmul(dweight, xT8, dyT8, NULL, IC, OC, N, N, N, IC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F,
              1.0f / (sx * sdy), accumulate ? 1.0f : 0.0f);
}

/* ---- the producers that cast (kernels/fp8.h) ------------------------------------------------------------ */
static void need_producer(const char *op, const void *in, int N, int F, const Fp8Matmul *q) {
    need_bf16(op);
    if (q->x_scale == 0 || q->w_scale == 0 || q->dout_scale == 0)
        die("internal: %s with a scale of 0: the model runs the plain op until every scale is set", op);
    if (N % 16 || F % 16 || (uintptr_t)in % 16)
        die("internal: %s with N=%d width=%d: FP8 producers need N and the width multiples of 16 and the input 16-byte aligned",
            op, N, F);
}

/* out = the cast form of rmsnorm(inp) (N,C): E4M3 x8 (N,C) then xT8 (C,N); rstd (N) as rmsnorm_forward_cuda writes it.
 * Two passes: the rows' rstd (rmsnorm.cu's reduction, so the values match its bits), then the cast, which reads inp
 * again (mostly from L2) and writes both copies. */
extern "C" void rmsnorm_forward_fp8_cuda(void *out, float *rstd, const void *inp, const void *weight, int N, int C, float eps,
                                         const Fp8Matmul *q) {
    need_producer("rmsnorm_forward_fp8", inp, N, C, q);
    if ((uintptr_t)weight % 16) die("internal: rmsnorm_forward_fp8: weight not 16-byte aligned");
    rmsnorm_rstd_cuda(rstd, inp, N, C, eps);
    uint8_t *x8 = (uint8_t *)out, *xT8 = x8 + (size_t)N * C;
    cast_fp8_from(FromRmsnorm{(const __nv_bfloat16 *)inp, (const __nv_bfloat16 *)weight, rstd, N, C}, x8, xT8, &q->amax[0], N, C,
                  q->x_scale, __NV_E4M3);
}

/* hs = the cast form of swiglu(h13) (N,F): E4M3 hs8 (N,F) then hsT8 (F,N), one pass over h13 */
extern "C" void swiglu_forward_fp8_cuda(void *hs, const void *h13, int N, int F, const Fp8Matmul *q) {
    need_producer("swiglu_forward_fp8", h13, N, F, q);
    uint8_t *x8 = (uint8_t *)hs, *xT8 = x8 + (size_t)N * F;
    cast_fp8_from(FromSwiglu{(const __nv_bfloat16 *)h13, N, F}, x8, xT8, &q->amax[0], N, F, q->x_scale, __NV_E4M3);
}

/* dh13 (N,2F) of dout (N,F), cast to E5M2 into the scratch views matmul_fp8_backward_cuda reads: dy8 (N,2F), dyT8 (2F,N) */
extern "C" void swiglu_backward_fp8_cuda(const void *dout, const void *h13, int N, int F, const Fp8Matmul *q) {
    need_producer("swiglu_backward_fp8", h13, N, F, q);
    if ((uintptr_t)dout % 16) die("internal: swiglu_backward_fp8: dout not 16-byte aligned");
    char *p = (char *)q->scratch;
    uint8_t *dy8 = carve(&p, (size_t)N * 2 * F), *dyT8 = carve(&p, (size_t)N * 2 * F);   /* as matmul_fp8_backward_cuda carves */
    cast_fp8_from(FromSwigluBackward{(const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)h13, N, F}, dy8, dyT8, &q->amax[2], N,
                  2 * F, q->dout_scale, __NV_E5M2);
}
