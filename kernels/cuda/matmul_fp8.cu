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
#include <cuda_fp8.h>
extern "C" {
#include "../fp8.h"
#include "../matmul.h"
#include "../../common/util.h"
}

/* ---- the cast --------------------------------------------------------------------------------------- */
#define CAST_ROWS 128   /* a block casts a 128 x 64 tile of x: 256 threads, each 4 rows x 8 columns */
#define CAST_COLS 64
#define CAST_THREADS 256
#define TILE_STRIDE (CAST_ROWS + 4)   /* bytes a row of the transposed tile: 33 words, so a warp's stores fall in 2-way banks at most */

/* v (8) = x[r][c..c+7] as floats, 0 past the edges; vec: K % 8 == 0 and x 16-byte aligned (one 16-byte load) */
__device__ __forceinline__ void load8(float *v, const __nv_bfloat16 *x, int R, int K, int r, int c, bool vec) {
    if (r < R && vec && c + 8 <= K) {
        Vec<__nv_bfloat16, 8> p = vload<__nv_bfloat16, 8>(x + (size_t)r * K + c);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = p.v[i];
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = r < R && c + i < K ? __bfloat162float(x[(size_t)r * K + c + i]) : 0.0f;
    }
}

/* x8 (R,K) = fp8(x * s) and/or xT8 (K,R) = its transpose; *amax = max(*amax, max |x|).
 * The maxima travel as the int bits of |x|: non-negative floats order as their bits, and a NaN's bits (sign cleared)
 * are above inf's, so a NaN is the max. s == 0 or no output: only the max. Outputs need K % 8 == 0 (x8), R % 4 == 0 (xT8). */
__global__ void __launch_bounds__(CAST_THREADS) cast_fp8_kernel(uint8_t *x8 /* (R,K) or NULL */, uint8_t *xT8 /* (K,R) or NULL */,
                                                                float *amax /* (1) */, const __nv_bfloat16 *x /* (R,K) */,
                                                                int R, int K, float s, __nv_fp8_interpretation_t f, bool vec) {
    __shared__ __align__(16) uint8_t tile[CAST_COLS][TILE_STRIDE];   /* tile[k][r]: the FP8 tile, transposed */
    __shared__ int warp_m[CAST_THREADS / 32];
    int r0 = blockIdx.x * CAST_ROWS, k0 = blockIdx.y * CAST_COLS;
    int c = 8 * (threadIdx.x % 8), rq = 4 * (threadIdx.x / 8);   /* this thread's columns c..c+7 and rows rq..rq+3 of the tile */
    bool cast = s != 0.0f && (x8 || xT8);
    int m = 0;
    uint32_t col[8] = {0};   /* col[i]: the 4 FP8 bytes of rows rq..rq+3 at column c+i, for the transposed tile */
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float v[8];
        int r = r0 + rq + j;
        load8(v, x, R, K, r, k0 + c, vec);
#pragma unroll
        for (int i = 0; i < 8; i++) m = max(m, __float_as_int(fabsf(v[i])));
        if (!cast) continue;
        uint32_t word[2] = {0, 0};   /* the 8 FP8 bytes, column c first (x.x goes to the low byte) */
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(v[i] * s, v[i + 1] * s), __NV_SATFINITE, f);
            word[i / 4] |= (uint32_t)p << (8 * (i % 4));
        }
        if (x8 && r < R && k0 + c < K) *reinterpret_cast<uint2 *>(x8 + (size_t)r * K + k0 + c) = make_uint2(word[0], word[1]);
#pragma unroll
        for (int i = 0; i < 8; i++) col[i] |= ((word[i / 4] >> (8 * (i % 4))) & 0xffu) << (8 * j);
    }
    /* the block's max, then one atomic, skipped when the record already holds as much (it only grows) */
    m = __reduce_max_sync(0xffffffffu, m);
    if (threadIdx.x % 32 == 0) warp_m[threadIdx.x / 32] = m;
    if (xT8 && cast) {
#pragma unroll
        for (int i = 0; i < 8; i++) *reinterpret_cast<uint32_t *>(&tile[c + i][rq]) = col[i];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < CAST_THREADS / 32 ? warp_m[threadIdx.x] : 0;
        m = __reduce_max_sync(0xffffffffu, m);
        int *rec = reinterpret_cast<int *>(amax);
        if (threadIdx.x == 0 && m > *(volatile int *)rec) atomicMax(rec, m);
    }
    if (!(xT8 && cast)) return;
    /* the transposed tile out: a warp writes 128 contiguous bytes of one row k of xT8 */
#pragma unroll
    for (int j = 0; j < CAST_ROWS * CAST_COLS / 4 / CAST_THREADS; j++) {
        int w = threadIdx.x + j * CAST_THREADS, k = w / (CAST_ROWS / 4), r = 4 * (w % (CAST_ROWS / 4));
        if (k0 + k < K && r0 + r < R)
            *reinterpret_cast<uint32_t *>(xT8 + (size_t)(k0 + k) * R + r0 + r) = *reinterpret_cast<const uint32_t *>(&tile[k][r]);
    }
}

/* x8 (R,K) and/or xT8 (K,R) = fp8(x (R,K) * s) in format f, max |x| folded into *amax; s == 0 or both NULL: the max only */
static void cast_fp8(uint8_t *x8, uint8_t *xT8, float *amax, const void *x, int R, int K, float s, __nv_fp8_interpretation_t f) {
    if ((size_t)R * K == 0) return;
    if (s == 0.0f) x8 = xT8 = NULL;
    if ((x8 && K % 8) || (xT8 && R % 4) || ceil_div(K, CAST_COLS) > 65535)
        die("internal: cast_fp8 of a (%d,%d) tensor: FP8 copies need K %% 8 == 0 (row-major), R %% 4 == 0 (transposed), "
            "K <= %d", R, K, 65535 * CAST_COLS);
    bool vec = K % 8 == 0 && (uintptr_t)x % 16 == 0;
    dim3 grid(ceil_div(R, CAST_ROWS), ceil_div(K, CAST_COLS));
    cast_fp8_kernel<<<grid, CAST_THREADS, 0, cuda_stream>>>(x8, xT8, amax, (const __nv_bfloat16 *)x, R, K, s, f, vec);
    launchCheck();
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
        cast_fp8(NULL, NULL, &q->amax[0], inp, N, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[1], weight, OC, IC, 0, __NV_E4M3);
        matmul_forward_cuda(out, inp, weight, N, IC, OC, add);
        return;
    }
    need_fp8_shape("matmul_fp8_forward", N, IC, OC);
    char *p = (char *)q->scratch;
    uint8_t *x8 = carve(&p, (size_t)N * IC);    /* (N,IC) E4M3 */
    uint8_t *w8 = carve(&p, (size_t)OC * IC);   /* (OC,IC) E4M3 */
    cast_fp8(x8, NULL, &q->amax[0], inp, N, IC, sx, __NV_E4M3);
    cast_fp8(w8, NULL, &q->amax[1], weight, OC, IC, sw, __NV_E4M3);
    if (N == 0 || OC == 0) return;
    lt_matmul(out, w8, x8, add, OC, N, IC, IC, IC, OC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF,
              1.0f / (sx * sw), add ? 1.0f : 0.0f);
}

/* dinp (N,IC) = q(dout) @ q(weight);    column-major: dinp^T (IC,N) = Wt8^T-op (IC,OC) @ dout8 (OC,N), E4M3 x E5M2
 * dweight (OC,IC) += q(dout)^T @ q(inp); column-major: dW^T (IC,OC) += xT8^T-op (IC,N) @ doutT8 (N,OC), fp32 C = D */
extern "C" void matmul_fp8_backward_cuda(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight,
                                         int N, int IC, int OC, const Fp8Matmul *q) {
    need_bf16("matmul_fp8_backward");
    float sx = q->x_scale, sw = q->w_scale, sdy = q->dout_scale;
    if (sx == 0 || sw == 0 || sdy == 0) {
        cast_fp8(NULL, NULL, &q->amax[0], inp, N, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[1], weight, OC, IC, 0, __NV_E4M3);
        cast_fp8(NULL, NULL, &q->amax[2], dout, N, OC, 0, __NV_E5M2);
        matmul_backward_cuda(dinp, dweight, dout, inp, weight, N, IC, OC);
        return;
    }
    need_fp8_shape("matmul_fp8_backward", N, IC, OC);
    char *p = (char *)q->scratch;
    uint8_t *dy8 = carve(&p, (size_t)N * OC);    /* (N,OC) E5M2 */
    uint8_t *dyT8 = carve(&p, (size_t)N * OC);   /* (OC,N) E5M2 */
    uint8_t *wT8 = carve(&p, (size_t)OC * IC);   /* (IC,OC) E4M3 */
    uint8_t *xT8 = carve(&p, (size_t)N * IC);    /* (IC,N) E4M3 */
    cast_fp8(dinp ? dy8 : NULL, dyT8, &q->amax[2], dout, N, OC, sdy, __NV_E5M2);
    cast_fp8(NULL, dinp ? wT8 : NULL, &q->amax[1], weight, OC, IC, sw, __NV_E4M3);   /* without dinp: the max only */
    cast_fp8(NULL, xT8, &q->amax[0], inp, N, IC, sx, __NV_E4M3);
    if (N == 0 || OC == 0 || IC == 0) return;
    if (dinp)
        lt_matmul(dinp, wT8, dy8, NULL, IC, N, OC, OC, OC, IC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF,
                  1.0f / (sdy * sw), 0.0f);
    lt_matmul(dweight, xT8, dyT8, NULL, IC, OC, N, N, N, IC, 1, 0, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F,
              1.0f / (sx * sdy), 1.0f);
}
