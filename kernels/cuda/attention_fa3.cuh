/* kernels/cuda/attention_fa3.cuh — the Hopper pieces the warp-specialized
 * attention forward (attention_fa3.cu) adds to wgmma.cuh: the m64n128k16
 * products (a 64 x 128 tile of fp32 accumulators, 64 a thread), descriptors
 * with a chosen stride between 64-column swizzle atoms, the mbarriers a
 * producer and its consumers hand shared-memory stages over with, the bulk
 * tensor copy (TMA) that fills a stage and signals its barrier, and setmaxnreg.
 *
 * The idea: one thread of a producer warpgroup asks the copy engine for a tile
 * (a box of a tensor map, written into shared memory in wgmma's 128-byte
 * swizzle) and tells the tile's "full" barrier how many bytes to expect; the
 * consumer warpgroups wait on that barrier, compute, and arrive on the stage's
 * "empty" barrier, which the producer waits on before it refills the stage.
 * A barrier's phase flips each time it completes; waiters name the parity of
 * the phase they wait for. Everything is empty outside sm_90a device code
 * (WG_ASM), as in wgmma.cuh. */
#pragma once
#include "wgmma.cuh"
#include <cuda.h>   /* CUtensorMap (the type only: the map is made through the runtime's driver entry point) */

#define FA_D64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define FA_IO64(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FA_NEW64(d) "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), \
    "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), \
    "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), \
    "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), \
    "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), \
    "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), \
    "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), \
    "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])

/* descriptor of a 128-byte-swizzled tile at shared address a with `atom` bytes between 64-column atoms (the
 * leading offset: an MN-major operand wider than 64 columns) and 1024 bytes between groups of 8 rows */
__device__ __forceinline__ uint64_t fa_desc(uint32_t a, uint32_t atom) {
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)((atom & 0x3FFFF) >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* d (64 x 128) (+)= A (64 x 16, K-major in shared) @ B (16 x 128, B^T K-major in shared); acc = 0 overwrites d */
template <typename T> __device__ __forceinline__ void fa_ss128(float d[64], uint64_t a, uint64_t b, int acc) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : FA_IO64(d) : "l"(a), "l"(b), "r"(acc));
    else
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : FA_IO64(d) : "l"(a), "l"(b), "r"(acc));
}
/* the first k-step: d = A @ B, d written only */
template <typename T> __device__ __forceinline__ void fa_ss128_first(float d[64], uint64_t a, uint64_t b) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : FA_NEW64(d) : "l"(a), "l"(b));
    else
        WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : FA_NEW64(d) : "l"(a), "l"(b));
}
/* d (64 x 128) += A (64 x 16 in registers, mma.sync's A layout per warp) @ B (16 x 128, MN-major in shared) */
template <typename T> __device__ __forceinline__ void fa_rs128(float d[64], const uint32_t a[4], uint64_t b) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        WG_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_D64 ", {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
               : FA_IO64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    else
        WG_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_D64 ", {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
               : FA_IO64(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/* ---- mbarriers (8 bytes of shared memory each, addressed as 32-bit shared-window addresses) ---- */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    WG_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* makes the initialised barriers visible to the copy engine (before the block's first barrier) */
__device__ __forceinline__ void mbar_init_fence() {
    WG_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* the producer's arrival that also says `bytes` are on their way (the phase completes when they have landed) */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    WG_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    WG_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* until the phase of parity `parity` has completed (a fresh barrier counts its parity-1 phase as completed) */
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    WG_ASM("{\n.reg .pred p;\nFA_WAIT:\n"
           "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
           "@p bra.uni FA_DONE;\nbra.uni FA_WAIT;\nFA_DONE:\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
/* the box at (c0, c1, c2) of the 3-d tensor map tm into shared memory at dst, completing on barrier bar */
__device__ __forceinline__ void tma_load3(uint32_t dst, const CUtensorMap *tm, int c0, int c1, int c2, uint32_t bar) {
    WG_ASM("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
           ::"r"(dst), "l"((uint64_t)tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
/* named barrier id over `threads` threads: wait there (sync) or only count this thread in (arrive) */
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* The register split of a block of one producer and two consumer warpgroups (384 threads, one block an SM): the launch
 * gives each thread 65,536 / 384 rounded down to 8 = 168, and setmaxnreg.inc takes registers only from what the block's
 * own .dec gave back, so 128 x PRODUCER + 256 x CONSUMER must not pass 384 x 168, or the consumers wait for ever
 * (2026-12-07: 32 and 240 hung every fa3 backward on an H100) */
#define FA_REGS_PRODUCER 24
#define FA_REGS_CONSUMER 240
static_assert(128 * FA_REGS_PRODUCER + 256 * FA_REGS_CONSUMER <= 384 * (65536 / 384 / 8 * 8),
              "setmaxnreg: the consumers would ask for more registers than the producer gives back");
/* a warpgroup gives back registers (the producer) or takes them (the consumers): all 128 threads, one branch each */
template <int N> __device__ __forceinline__ void regs_down() { WG_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void regs_up() { WG_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/* (host) the tensor map over a (B, T, cols) bf16/fp16 tensor in boxes of 64 columns x box_rows rows x 1 sequence,
 * 128-byte swizzled, rows past T zero-filled (attention_fa3.cu) */
CUtensorMap fa3_tensor_map(const void *base, int B, int T, int cols, int box_rows);
/* (host) the same over only the first `rows` rows of each sequence (rows past them arrive as zeros too): context
 * parallelism's gathered k|v, read up to a chunk's last key and never after it */
CUtensorMap fa3_tensor_map_rows(const void *base, int B, int T, int rows, int cols, int box_rows);
