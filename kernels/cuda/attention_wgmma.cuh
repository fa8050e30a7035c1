/* kernels/cuda/attention_wgmma.cuh — what the Hopper attention kernels share
 * (attention_wgmma.cu: the forward; attention_wgmma_backward.cu: the backward):
 * the tile geometry, the exponential on the special-function unit, score tiles
 * repacked as A operands, the two kinds of 64 x 64 product, the swizzled tile
 * copies, the three-stage pipeline's depth and the launch that raises a
 * kernel's shared-memory limit. attention_wgmma.cu's header says the idea. */
#pragma once
#include "common.cuh"
#include "tensor_core.cuh"
#include "wgmma.cuh"
#include <math.h>
#include <stdio.h>
extern "C" {
#include "../attention.h"
#include "../rope.h"
#include "../../common/util.h"
}

#define WG_HD 64                      /* head dim of this path */
#define WG_BN 64                      /* rows of a tile (one warpgroup's rows, or a streamed tile) */
#define WG_TILE (WG_BN * WG_HD * 2)   /* bytes of one tile: 64 rows x 128 bytes */

/* 2^x on the special-function unit (-inf -> 0): the exponentials, not the products, bound attention at HD = 64 */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* the four 16-column A operands (k-steps) of a 64-column score tile held as wgmma accumulators */
template <typename T> __device__ __forceinline__ void scores_as_a4(uint32_t a[4][4], const float s[32]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        a[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        a[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        a[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}
/* a score tile's ds = p * (dp - D) * scale, p = 2^(s*scale*log2 e - L), L = lse * log2 e: masked where the query is
 * before the key or past T; packs p (when pp, the dk/dv kernel's P^T @ dout) and ds as A operands. COLS: the dk/dv
 * kernel's transposed tile (rows keys r0.., columns queries c0..; lse and D per column, indexed in shared memory,
 * lse in base e and scaled here: no pass and barrier over the staged values); else the dq kernel's (rows queries
 * r0.., columns keys c0..; L and D of this thread's two rows). RAW (the fa3 backward): COLS's lse already times
 * log2 e where it was staged, and ds = p * (dp - D) without the scale, which the kernel applies once to each
 * product's sum instead (dK, dQ: a multiply a value a block, not one a score a tile). Both Hopper backwards use it
 * (attention_wgmma_backward.cu, attention_fa3_backward.cu) */
template <typename T, bool COLS, bool RAW = false>
__device__ __forceinline__ void probs_and_grads(float s[32], float dp[32], uint32_t (*pp)[4], uint32_t ds[4][4], const float *L, const float *D,
                                                int r0, int c0, int T_, float sl2, float scale, bool mask) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, w = threadIdx.x % 128 / 32;   /* w: the warp in its warpgroup */
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int rl = w * 16 + g + (i % 4 / 2) * 8, cl = i / 4 * 8 + 2 * t + (i & 1);   /* row, column within the tile */
        int q = COLS ? c0 + cl : r0 + rl, k = COLS ? r0 + rl : c0 + cl;
        float Li = COLS ? (RAW ? L[cl] : L[cl] * LOG2E) : L[i % 4 / 2], Di = COLS ? D[cl] : D[i % 4 / 2];
        float p = ex2(fmaf(s[i], sl2, -Li));
        if (mask && (k > q || q >= T_)) p = 0.0f;
        s[i] = p;
        dp[i] = RAW ? p * (dp[i] - Di) : p * (dp[i] - Di) * scale;
    }
    if (pp) scores_as_a4<T>(pp, s);
    scores_as_a4<T>(ds, dp);
}
/* the A operand ds (dS^T: this warpgroup's 64 keys x 64 queries, scores_as_a4's layout) into the swizzled shared tile
 * at dst (rows w*16.. of the tile for warp w of its warpgroup; every row's 16-byte chunk lands in another bank group: no conflicts); the writes are fenced for the bulk
 * copy that takes the tile to global memory or the wgmma that reads it (the fa3 backward's dQ) */
__device__ __forceinline__ void stage_ds_tile(uint8_t *dst, const uint32_t ds[4][4]) {
    int w = threadIdx.x % 128 / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) {   /* row g (+8 for e odd), columns 16kk + 2t (+8 for e >= 2): chunk 2kk + e/2 */
            int r = w * 16 + g + 8 * (e & 1), c = 2 * kk + (e >> 1);
            *reinterpret_cast<uint32_t *>(dst + r * 128 + ((c ^ g) << 4) + 4 * t) = ds[kk][e];
        }
    fence_to_async();
}
/* d = X (64 x 64, K-major tile at x) @ Y^T (Y: 64 x 64, K-major tile at y): four k-steps of 16 columns (32 bytes) */
template <typename T> __device__ __forceinline__ void wg_rows_times_rows(float d[32], uint32_t x, uint32_t y) {
    wg_ss_first<T>(d, wg_desc(x), wg_desc(y));
#pragma unroll
    for (int kk = 1; kk < 4; kk++) wg_ss<T>(d, wg_desc(x + 32 * kk), wg_desc(y + 32 * kk), 1);
}
/* d += A (64 x 64 in registers) @ M (64 x 64 MN-major tile at m): four k-steps of 16 rows (2048 bytes) */
template <typename T> __device__ __forceinline__ void wg_regs_times_tile(float d[32], const uint32_t a[4][4], uint32_t m) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wg_rs<T>(d, a[kk], wg_desc(m + 2048 * kk));
}

/* rows r0..r0+nrows-1 of a (rows, stride) global tensor into the swizzled tile(s) at shared address dst; rows >= nvalid are zero */
template <typename T> __device__ __forceinline__ void load_tile_sw(uint32_t dst, const T *src, int r0, int nrows, int nvalid, size_t stride) {
    for (int e = threadIdx.x; e < nrows * 8; e += blockDim.x) {
        int r = e >> 3, c = e & 7;
        bool ok = r0 + r < nvalid;
        cp_async16_to(dst + r * 128 + ((c ^ (r & 7)) << 4), src + (ok ? (size_t)(r0 + r) * stride + c * 8 : 0), ok);
    }
}
/* shared base of the dynamic tiles: 1024-aligned (the swizzle repeats every 8 rows of 128 bytes), as each kernel declares
 * it, which makes the toolchain pad the static shared memory before it; a base that is not stops the kernel */
#define WG_TILES extern __shared__ __align__(1024) uint8_t smraw[]
__device__ __forceinline__ uint32_t tiles_base(const void *sm) {
    uint32_t a = smem_addr(sm);
    if (a & 1023) __trap();
    return a;
}

/* ---- the pipeline ---------------------------------------------------------------------------
 * A block is one warpgroup: 64 rows of its own, and a stream of 64-row tiles of the other side held in
 * shared memory three stages deep. Iteration j issues the scores of tile j+1 and then the second product of
 * tile j (both asynchronous), waits for the scores only, computes tile j+1's probabilities on the
 * special-function units while the tensor cores still run tile j's product, then waits for that. So at
 * HD = 64, where one exponential costs about as much as the 256 multiply-adds around it, neither unit waits
 * for the other. Tile j+2 is copied in meanwhile; the barrier that opens an iteration is what frees the
 * stage it goes to (tile j-1's, whose products finished in iteration j-1). */
#define WG_STAGES 3

/* key tile j (k at stage j % 3, v after it) of the nk a block streams, as one commit group (empty past the end) */
template <typename T> __device__ __forceinline__ void load_kv_tile(uint32_t sKV, const T *Kg, const T *Vg, int j, int nk, int T_, size_t QKV) {
    if (j < nk) {
        uint32_t st = sKV + j % WG_STAGES * 2 * WG_TILE;
        load_tile_sw<T>(st, Kg, j * WG_BN, WG_BN, T_, QKV);
        load_tile_sw<T>(st + WG_TILE, Vg, j * WG_BN, WG_BN, T_, QKV);
    }
    cp_commit();
}
/* launch with `smem` bytes of dynamic shared memory, raising the kernel's limit the first time it is needed */
#define WG_LAUNCH(kernel, grid, smem, ...) do { \
        static size_t raised_ = 0; \
        if (raised_ < (smem)) { cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem))); raised_ = (smem); \
                                cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100)); } \
        kernel<<<grid, 128, smem, cuda_stream>>>(__VA_ARGS__); \
        launchCheck(); \
    } while (0)
