/* kernels/cuda/attention_fa3_backward.cuh — the pieces the fa3 attention backward
 * (attention_fa3_backward.cu) builds its kernels from: products on 64-row tiles
 * (S^T and dP^T from shared memory, dV/dK/dQ with P^T or dS^T from registers),
 * the epilogues that store an accumulator (rotated back through RoPE) or add it
 * in fp32, and the memory-order primitives of the dQ accumulator's turns.
 *
 * The idea: the kernels' file holds what a block does and in which order; this
 * one what a single product or store is, each small enough to read alone. Empty
 * outside sm_90a device code where it issues Hopper instructions (WG_ASM). */
#pragma once
#include "attention_fa3.cuh"
#include "attention_wgmma.cuh"

#define FB_THREADS 384   /* a producer warpgroup and two consumers */
#define FB_BOX 8192      /* bytes of one TMA box: 64 rows x 64 columns, 128-byte swizzled */

/* RoPE's inverse frequencies (rope_inv_freq), when on */
struct FbRope { int on; float f[64]; };

/* d (64 x 64) = A (64 rows at a, HD columns in 64-column boxes ahalf bytes apart) @ B (64 rows at b, boxes bhalf
 * apart)^T: HD/16 k-steps of 16 columns (32 bytes) */
template <typename T, int HD> __device__ __forceinline__ void fb_rows(float d[32], uint32_t a, uint32_t b, uint32_t ahalf, uint32_t bhalf) {
    wg_ss_first<T>(d, wg_desc(a), wg_desc(b));
#pragma unroll
    for (int kk = 1; kk < HD / 16; kk++) {
        uint32_t hf = kk / 4, col = 32 * (kk % 4);
        wg_ss<T>(d, wg_desc(a + hf * ahalf + col), wg_desc(b + hf * bhalf + col), 1);
    }
}
/* d (64 x HD) += A (64 x 64 in registers, 4 k-steps) @ M (64 rows at m, MN-major, HD columns in boxes mhalf apart) */
template <typename T, int HD> __device__ __forceinline__ void fb_regs_times(float d[HD / 2], const uint32_t a[4][4], uint32_t m, uint32_t mhalf) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        if constexpr (HD == 64) wg_rs<T>(d, a[kk], fa_desc(m + 2048 * kk, mhalf));
        else fa_rs128<T>(d, a[kk], fa_desc(m + 2048 * kk, mhalf));
    }
}

/* this thread's rows pos[2] of a 64 x HD accumulator d, rotated by -angle when fr (kernels/cpu/rope.c's backward:
 * column i pairs with i + HD/2, fragment nt + HD/16 of the same thread), then stored into the HD columns at row
 * pointers y[2] (NULL: past T) */
template <typename T, int HD> __device__ __forceinline__ void fb_store(float d[HD / 2], const int pos[2], T *const y[2], const FbRope *fr) {
    int t = threadIdx.x % 4;
    if (fr) {
#pragma unroll
        for (int nt = 0; nt < HD / 16; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int i = nt * 8 + 2 * t + e, a = 4 * nt + 2 * r + e, b = a + HD / 4;
                    float sn, cs;
                    sincosf((float)pos[r] * fr->f[i], &sn, &cs);
                    sn = -sn;
                    float x1 = d[a], x2 = d[b];
                    d[a] = x1 * cs - x2 * sn;
                    d[b] = x2 * cs + x1 * sn;
                }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!y[r]) continue;
#pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) *reinterpret_cast<uint32_t *>(y[r] + nt * 8 + 2 * t) = pack2<T>(d[4 * nt + 2 * r], d[4 * nt + 2 * r + 1]);
    }
}
/* this thread's rows of a 64 x HD accumulator d added, in fp32, into the HD columns at row pointers y[2] (NULL: none;
 * 8-byte aligned): a plain read-add-write, the element being this thread's alone */
template <int HD> __device__ __forceinline__ void fb_add(const float d[HD / 2], float *const y[2]) {
    int t = threadIdx.x % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!y[r]) continue;
#pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) {
            float2 *p = reinterpret_cast<float2 *>(y[r] + nt * 8 + 2 * t);
            float2 a = *p;
            *p = make_float2(a.x + d[4 * nt + 2 * r], a.y + d[4 * nt + 2 * r + 1]);
        }
    }
}

/* ---- dQ in the dk/dv kernel (DQ): each block adds its keys' part of every query tile's dQ into an fp32 accumulator,
 * the key blocks of a tile one after another in key order (a counter per tile says whose turn it is), so the sum is
 * the same bits every run without a second sweep. A tile of the accumulator is 64 rows x HD fp32 in the staged order:
 * [HD/64 column halves][16 float2 j][128 consumer threads] (thread tid's accumulators 2j, 2j+1 of its half), so a
 * consumer writes it to shared memory without bank conflicts and the copy engine adds it to L2 in one piece. */
#define FB_DQ_TILE(HD) (64 * (HD) * 4)   /* bytes of one query tile's dQ, fp32 */

__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_async_global() {
    WG_ASM("fence.proxy.async.global;\n" ::: "memory");
}
