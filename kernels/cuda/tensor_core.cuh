/* kernels/cuda/tensor_core.cuh — the small pieces both tensor-core attention
 * paths share (attention_mma.cu on mma.sync, attention_wgmma.cu on Hopper's
 * wgmma): packing two fp32 into a bf16/fp16 pair, shared-memory addresses, and
 * cp.async copies from global to shared memory that bypass the registers.
 *
 * The idea: a tile is copied global -> shared in 16-byte pieces that the
 * hardware moves asynchronously (cp.async); a group of copies is committed and
 * later waited for, so the next tile is in flight while this one is used. A
 * piece whose source row is past the end is zero-filled instead of read. */
#pragma once
#include "common.cuh"
#include <type_traits>

#define LOG2E 1.4426950408889634f

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared (the shared address as a 32-bit shared-window address); zero-fills when !valid */
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) { cp_async16_to(smem_addr(dst), src, valid); }
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
