/* kernels/cuda/wgmma.cuh — Hopper's warpgroup matrix multiply (wgmma) as C++
 * functions over inline PTX, for kernels where 4 warps (128 threads) issue
 * 64 x 64 x 16 products together: shared-memory descriptors, the products with
 * both operands in shared memory or A in registers, the fences, commits and
 * waits that order them, and the bulk copy that stores a shared tile to global
 * memory (attention_wgmma.cu is the user).
 *
 * The idea: wgmma.mma_async starts a product and returns; its fp32 accumulators
 * (32 a thread for 64 x 64) belong to the tensor cores until a wait says the
 * committed group is done. So the registers it reads and writes are pinned
 * (wg_keep) after the wait, and a kernel can issue the next product before it
 * computes on the last one. Everything compiles to nothing outside sm_90a
 * device code (WG_ON 0, WG_ASM): the caller decides at run time whether it may run. */
#pragma once
#include "common.cuh"
#include <stdint.h>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1   /* compiling device code for sm_90a: wgmma exists */
#else
#define WG_ON 0
#endif
#if WG_ON
#define WG_ASM(...) asm volatile(__VA_ARGS__)   /* an instruction that exists only there */
#else
#define WG_ASM(...) do { } while (0)
#endif

/* descriptor of a tile at shared address a (1024-aligned, or offset along k inside a row): 128-byte swizzle,
 * 1024 bytes between groups of 8 rows (both offsets: only the one the operand's major-ness uses is read) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t a) {
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
#define WG_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define WG_OUT32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* d (64x64 fp32, this thread's 32) (+)= A (64x16, K-major in shared) @ B (16x64; B^T K-major in shared); acc = 0: d = A @ B */
template <typename T> __device__ __forceinline__ void wg_ss(float d[32], uint64_t a, uint64_t b, int acc) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : WG_OUT32(d) : "l"(a), "l"(b), "r"(acc));
    else
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : WG_OUT32(d) : "l"(a), "l"(b), "r"(acc));
}
/* d = A @ B as above, d written only: the first k-step, so no earlier value of d is kept alive for it */
#define WG_NEW32(d) "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), \
    "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), \
    "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), \
    "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
template <typename T> __device__ __forceinline__ void wg_ss_first(float d[32], uint64_t a, uint64_t b) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : WG_NEW32(d) : "l"(a), "l"(b));
    else
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : WG_NEW32(d) : "l"(a), "l"(b));
}
/* d (+)= A (64x16) @ B (16x64), both MN-major in shared (rows are the reduction index): the transpose bits set;
 * acc = 0 overwrites d */
template <typename T> __device__ __forceinline__ void wg_ss_mn(float d[32], uint64_t a, uint64_t b, int acc = 1) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", %32, %33, p, 1, 1, 1, 1;\n}\n"
               : WG_OUT32(d) : "l"(a), "l"(b), "r"(acc));
    else
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D32 ", %32, %33, p, 1, 1, 1, 1;\n}\n"
               : WG_OUT32(d) : "l"(a), "l"(b), "r"(acc));
}
/* d (64x64) += A (64x16 from registers, mma.sync's A-fragment layout per warp) @ B (16x64, MN-major in shared) */
template <typename T> __device__ __forceinline__ void wg_rs(float d[32], const uint32_t a[4], uint64_t b) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
               : WG_OUT32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    else
        WG_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
               : WG_OUT32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
/* before the first wgmma of a batch (registers it reads were written), after issuing it, and waiting for it */
__device__ __forceinline__ void wg_fence() {
    WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
    WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {   /* until at most N committed groups are still running */
    WG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* the compiler must neither read an accumulator nor reuse an A register before the wait: pin them after it */
template <int N> __device__ __forceinline__ void wg_keep(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wg_keep(uint32_t (&a)[4][4]) {
#pragma unroll
    for (int i = 0; i < 16; i++) asm volatile("" : "+r"(a[i / 4][i % 4])::"memory");
}
/* shared memory written by cp.async (the generic proxy) is read by wgmma (the async proxy): fence before the barrier */
__device__ __forceinline__ void fence_to_async() {
    WG_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* the bulk-copy engine (TMA without a tensor map): `bytes` (a multiple of 16) from shared address src to global dst,
 * as one bulk group; the issuing thread later waits until the engine has read the source (it may then be
 * rewritten) or until the whole copy is done */
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes) {
    WG_ASM("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* the same, adding the fp32 values at src to those at dst (in L2, one bulk group) instead of replacing them */
__device__ __forceinline__ void bulk_add_f32(void *dst, uint32_t src, uint32_t bytes) {
    WG_ASM("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
    WG_ASM("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() {
    WG_ASM("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
