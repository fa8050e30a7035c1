/* kernels/cuda/attention_wgmma.cu — the Hopper path of causal GQA attention for
 * bf16 and fp16 with HD = 64: the same flash-attention forward as
 * attention_mma.cu (online softmax), with every product issued by a warpgroup
 * (4 warps, 128 threads) as wgmma m64n64k16 instead of per-warp mma.sync
 * m16n8k16, and a deterministic backward in which every kernel owns what it
 * writes: after attention.cu's Dsum pass, a dk/dv kernel per key tile that also
 * stores each dS tile it computes, and a dq kernel that is then one product a
 * tile (see "the dS tiles" below: 5 products and one exponential a score, where
 * the mma.sync path's two kernels recompute the scores and dP, 7 and two).
 *
 * The idea: a warpgroup owns 64 rows (queries in the forward and the dq kernel,
 * keys in the dk/dv kernel). Its 64 x 64 products are asynchronous wgmma
 * instructions that read their B operand (and, for the first product of a pair,
 * their A operand) straight from shared memory through a descriptor, so no warp
 * loads fragments with ldmatrix; the scores come back in registers in the same
 * layout mma.sync uses and are packed into the A operand of the next product
 * (P @ V, P^T @ dout, dS^T @ q) without touching shared memory; the dq
 * kernel's dS @ K reads both operands from shared memory.
 * Shared tiles are 64 rows of 64 elements (128 bytes a row) in wgmma's 128-byte
 * swizzle: the eight 16-byte chunks of row r sit at chunk c ^ (r % 8), so the
 * tensor cores read 8 rows without bank conflicts. One layout serves both
 * ways a tile is read: "K-major" (rows of the tile are the rows of B^T: k in
 * q k^T, v in dout v^T, q and dout in the dk/dv kernel's scores) and
 * "MN-major" (rows are the reduction index: v in P @ V, dS^T and k in dS @ K,
 * dout and q in the dk/dv products), the second through the transpose bits.
 * A block is one warpgroup, and its loop is software-pipelined (see "the
 * pipeline" below): the scores of the next tile are computed on the tensor
 * cores while this tile's exponentials run, with tiles copied by cp.async three
 * stages deep (no tensor maps, no producer warps: every thread copies, then
 * computes; only the dS tiles leave through the bulk-copy engine).
 * The kernels are latency-bound at HD = 64 with few warps an SM (Nsight
 * Compute, 2026-12-03: 45-58% of issue slots busy, L2 at a quarter of its
 * rate), so shared memory is sized to the block: the forward's 56 KB let four
 * blocks share an SM (the register limit) where 57 KB let three. Measured on
 * the H200 at l124m (2026-12-03): forward 0.118 ms, backward 0.370 ms a layer
 * (RoPE's backward included; 0.383 when its dq kernel recomputed the scores),
 * against 0.145 / 0.482 for mma.sync; without the pipeline (two stages, wait
 * after every product) the backward took 0.44-0.50 ms.
 *
 * The backward also takes dq and dk back through RoPE before it stores them
 * (rope_back_rows: a row's pair i, i + 32 sits in one thread's accumulators),
 * so the model runs no rope_backward kernel on this path.
 *
 * This needs sm_90a (the build's default CUDA_ARCH compiles it); on any other
 * GPU, or in a binary without sm_90a code, attention_wgmma_available() is 0
 * and attention.cu runs the mma.sync kernels, saying so once. */
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

/* scores s (64 rows x 64 keys from k0, raw q.k) -> probabilities packed as the A operand pa of P @ V, with the
 * running max m and this thread's partial sums l of rows row[2] updated, and corr = how much the old o shrinks */
template <typename T> __device__ __forceinline__ void online_softmax(float s[32], uint32_t pa[4][4], float m[2], float l[2], float corr[2],
                                                                     int k0, const int row[2], int T_, float sl2, bool mask) {
    int t = threadIdx.x % 4;
    if (mask) {   /* the tile crosses the diagonal or the end */
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int col = k0 + i / 4 * 8 + 2 * t + (i & 1);
            if (col > row[i % 4 / 2] || col >= T_) s[i] = -INFINITY;
        }
    }
    float mx[2] = {m[0], m[1]}, ms[2], sum[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 32; i++) mx[i % 4 / 2] = fmaxf(mx[i % 4 / 2], s[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        corr[r] = ex2((m[r] - mx[r]) * sl2);   /* m = -inf on the first tile: 0 (mx is finite: key 0 is seen) */
        m[r] = mx[r];
        ms[r] = mx[r] * sl2;
    }
#pragma unroll
    for (int i = 0; i < 32; i++) {
        s[i] = ex2(fmaf(s[i], sl2, -ms[i % 4 / 2]));
        sum[i % 4 / 2] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r];
    scores_as_a4<T>(pa, s);
}

/* key tile j (k at stage j % 3, v after it) of the nk a block streams, as one commit group (empty past the end) */
template <typename T> __device__ __forceinline__ void load_kv_tile(uint32_t sKV, const T *Kg, const T *Vg, int j, int nk, int T_, size_t QKV) {
    if (j < nk) {
        uint32_t st = sKV + j % WG_STAGES * 2 * WG_TILE;
        load_tile_sw<T>(st, Kg, j * WG_BN, WG_BN, T_, QKV);
        load_tile_sw<T>(st + WG_TILE, Vg, j * WG_BN, WG_BN, T_, QKV);
    }
    cp_commit();
}

/* ---- forward ---------------------------------------------------------------------------- */
/* out (B,T,NH*HD), lse (B,NH,T) from qkv (B,T,(NH+2*NKV)*HD); block = 64 queries of one (b, h); grid (B*NH, query
 * tiles), the last (longest) first. Shared: q, then k, v of stages 0..2. Key tiles 0..nk-1 all meet the block's
 * queries (BQ = BN), only the last crosses the diagonal. */
template <typename T> __global__ void __launch_bounds__(128) wg_forward_kernel(T *out, float *lse, const T *qkv, int T_, int NH, int NKV,
                                                                               float scale) {
#if WG_ON
    WG_TILES;
    uint32_t sQ = tiles_base(smraw), sKV = sQ + WG_TILE;   /* stage st: k at sKV + 2*st*WG_TILE, v after it */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * WG_BN;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD;
    const T *base = qkv + (size_t)b * T_ * QKV, *Kg = base + (NH + kvh) * WG_HD, *Vg = base + (NH + NKV + kvh) * WG_HD;
    float sl2 = scale * LOG2E;
    int nk = q0 / WG_BN + 1;
    load_tile_sw<T>(sQ, base + h * WG_HD, q0, WG_BN, T_, QKV);
    load_kv_tile<T>(sKV, Kg, Vg, 0, nk, T_, QKV);
    load_kv_tile<T>(sKV, Kg, Vg, 1, nk, T_, QKV);
    cp_wait<1>();
    fence_to_async();
    __syncthreads();
    int row[2] = {q0 + w * 16 + g, q0 + w * 16 + g + 8};
    float s[32], o[32] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, corr[2];   /* m: running max of the raw scores */
    uint32_t pa[4][4], pn[4][4];
    wg_fence();
    wg_rows_times_rows<T>(s, sQ, sKV);   /* tile 0 */
    wg_commit();
    wg_wait<0>();
    wg_keep(s);
    online_softmax<T>(s, pa, m, l, corr, 0, row, T_, sl2, nk == 1 || WG_BN > T_);
    for (int j = 0; j < nk; j++) {
        bool more = j + 1 < nk;
        __syncthreads();   /* every warp is past tile j-1's products: its stage takes tile j+2 */
        load_kv_tile<T>(sKV, Kg, Vg, j + 2, nk, T_, QKV);
        cp_wait<1>();      /* tile j+1 has landed */
        fence_to_async();
        __syncthreads();
        /* the last iteration scores tile j again, unused: every iteration issues the same products (no branch
         * around a wgmma, which would make ptxas serialise them) */
        uint32_t sV = sKV + j % WG_STAGES * 2 * WG_TILE + WG_TILE, sK1 = sKV + (j + more) % WG_STAGES * 2 * WG_TILE;
        wg_fence();
        wg_rows_times_rows<T>(s, sQ, sK1);   /* scores of tile j+1 */
        wg_commit();
        wg_regs_times_tile<T>(o, pa, sV);   /* o += P_j @ V_j, still running while ... */
        wg_commit();
        wg_wait<1>();
        wg_keep(s);
        if (more) {
            int k0 = (j + 1) * WG_BN;   /* ... tile j+1's probabilities are computed */
            online_softmax<T>(s, pn, m, l, corr, k0, row, T_, sl2, j + 2 == nk || k0 + WG_BN > T_);
        }
        wg_wait<0>();
        wg_keep(o);
        wg_keep(pa);
        if (more) {
#pragma unroll
            for (int i = 0; i < 32; i++) o[i] *= corr[i % 4 / 2];
#pragma unroll
            for (int i = 0; i < 16; i++) pa[i / 4][i % 4] = pn[i / 4][i % 4];
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        if (row[r] >= T_) continue;
        T *y = out + ((size_t)b * T_ + row[r]) * NH * WG_HD + h * WG_HD;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(o[4 * nt + 2 * r] * inv, o[4 * nt + 2 * r + 1] * inv);
        if (t == 0) lse[((size_t)b * NH + h) * T_ + row[r]] = m[r] * scale + logf(l[r]);
    }
#endif
}

/* ---- backward ----------------------------------------------------------------------------- */
/* RoPE's backward folded into the epilogues: on, the frequency of each pair (rope_inv_freq, from the host) */
struct RopeFreq { int on; float f[WG_HD / 2]; };
/* the rows at positions pos[2] of a 64 x 64 accumulator tile d (this thread's 32) rotated by -angle, as
 * kernels/cpu/rope.c's backward: column i pairs with i + 32, which this thread also holds (fragment nt + 4) */
__device__ __forceinline__ void rope_back_rows(float d[32], const int pos[2], const RopeFreq &fr) {
    int t = threadIdx.x % 4;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int i = nt * 8 + 2 * t + e, a = 4 * nt + 2 * r + e, b = a + 16;
                float angle = (float)pos[r] * fr.f[i], c = cosf(angle), s = -sinf(angle);
                float x1 = d[a], x2 = d[b];
                d[a] = x1 * c - x2 * s;
                d[b] = x2 * c + x1 * s;
            }
}

/* the dk/dv kernel's tile (rows keys r0.., columns queries c0..): ds = p * (dp - D) * scale, p = 2^(s*scale*log2 e - L)
 * with L = lse * log2 e and D = Dsum per column, masked where the query is before the key or past T; packs p and ds
 * as A operands */
template <typename T> __device__ __forceinline__ void probs_and_grads(float s[32], float dp[32], uint32_t pp[4][4], uint32_t ds[4][4],
                                                                      const float *L, const float *D, int r0, int c0, int T_, float sl2,
                                                                      float scale, bool mask) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, w = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int cl = i / 4 * 8 + 2 * t + (i & 1), q = c0 + cl, k = r0 + w * 16 + g + (i % 4 / 2) * 8;
        float p = ex2(fmaf(s[i], sl2, -L[cl]));
        if (mask && (k > q || q >= T_)) p = 0.0f;
        s[i] = p;
        dp[i] = p * (dp[i] - D[cl]) * scale;
    }
    scores_as_a4<T>(pp, s);
    scores_as_a4<T>(ds, dp);
}

/* ---- the dS tiles ---------------------------------------------------------------------------
 * The dk/dv kernel computes every dS = P * (dP - D) * scale once; it is the A operand of dk += dS^T @ q
 * there, and it is stored (bf16/fp16, the same rounded values) for dq = dS @ k, which is then one product
 * a tile instead of three (no scores, dP or exponentials recomputed). Tile (b, h, query tile qt, key tile
 * kt <= qt) is 64 keys x 64 queries at slot ((b*NH + h)*ntri + qt*(qt+1)/2 + kt), ntri = nt*(nt+1)/2, stored
 * as the bytes of the 128-byte-swizzled shared tile, so the dq kernel copies it back with no rearranging and
 * reads it as an MN-major A operand. The price is memory: 2 bytes a score of the causal half (13.4 MB a
 * sequence at l124m), written and read once. Measured on the H200 (2026-12-03, l124m, Nsight Compute's locked
 * clocks, per slice of 8 sequences): Dsum 17 us (the whole batch), dk/dv 164 us, dq 55 us, where the two
 * recomputing kernels took 219 (dq) + 275 (dk/dv) us for 16 sequences; the same dk/dv kernel without the
 * stores took the backward from 0.370 to 0.335 ms, so writing dS is what is left to hide. */
__host__ __device__ inline size_t ds_slot(int b, int h, int NH, int qt, int kt, int ntri) {
    return ((size_t)b * NH + h) * ntri + (size_t)qt * (qt + 1) / 2 + kt;
}
/* the A operand ds (dS^T: this warpgroup's 64 keys x 64 queries, scores_as_a4's layout) into the swizzled shared tile
 * at dst (every row's 16-byte chunk lands in another bank group: no conflicts); the writes are fenced for the bulk
 * copy that takes the tile to global memory */
__device__ __forceinline__ void stage_ds_tile(uint8_t *dst, const uint32_t ds[4][4]) {
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) {   /* row g (+8 for e odd), columns 16kk + 2t (+8 for e >= 2): chunk 2kk + e/2 */
            int r = w * 16 + g + 8 * (e & 1), c = 2 * kk + (e >> 1);
            *reinterpret_cast<uint32_t *>(dst + r * 128 + ((c ^ g) << 4) + 4 * t) = ds[kk][e];
        }
    fence_to_async();
}

/* dq part of dqkv: block = 64 queries of one (b, h); dq = sum over key tiles 0..the diagonal of dS_j @ K_j, with
 * dS from the dk/dv kernel; grid (B*NH, query tiles), longest first. Shared: dS^T then k, stages 0..2. */
template <typename T> __global__ void __launch_bounds__(128) wg_backward_dq_kernel(T *dqkv, const T *qkv, const uint8_t *dS, int T_, int NH,
                                                                                   int NKV, int ntri, const RopeFreq fr) {
#if WG_ON
    WG_TILES;
    uint32_t sT = tiles_base(smraw);   /* stage st: dS^T at sT + 2*st*WG_TILE, k after it */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * WG_BN, nk = qt + 1;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD;
    const T *Kg = qkv + (size_t)b * T_ * QKV + (NH + kvh) * WG_HD;
    const uint8_t *tiles = dS + ds_slot(b, h, NH, qt, 0, ntri) * WG_TILE;   /* key tiles 0..qt, one after another */
    auto load = [&](int j) {
        if (j < nk) {
            uint32_t st = sT + j % WG_STAGES * 2 * WG_TILE;
            for (int e = threadIdx.x; e < WG_TILE / 16; e += blockDim.x) cp_async16_to(st + e * 16, tiles + (size_t)j * WG_TILE + e * 16, true);
            load_tile_sw<T>(st + WG_TILE, Kg, j * WG_BN, WG_BN, T_, QKV);
        }
        cp_commit();
    };
    load(0);
    load(1);
    float dq[32] = {};
    for (int j = 0; j < nk; j++) {
        cp_wait<1>();   /* tile j has landed */
        fence_to_async();
        __syncthreads();   /* ... in every thread, and tile j-1's product is done in every warp: its stage takes tile j+2 */
        load(j + 2);
        uint32_t st = sT + j % WG_STAGES * 2 * WG_TILE;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wg_ss_mn<T>(dq, wg_desc(st + 2048 * kk), wg_desc(st + WG_TILE + 2048 * kk));   /* dq += dS_j @ K_j */
        wg_commit();
        wg_wait<0>();
        wg_keep(dq);
    }
    int lr = w * 16 + g, pos[2] = {q0 + lr, q0 + lr + 8};
    if (fr.on) rope_back_rows(dq, pos, fr);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = q0 + lr + 8 * r;
        if (q >= T_) continue;
        T *y = dqkv + ((size_t)b * T_ + q) * QKV + h * WG_HD;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(dq[4 * nt + 2 * r], dq[4 * nt + 2 * r + 1]);
    }
#endif
}

/* dk, dv parts of dqkv: block = 64 keys of one (b, kv head); every head of the group, query tiles from the diagonal,
 * streamed as one sequence of (head, query tile) items; grid (B*NKV, key tiles), the first (longest) key tile first.
 * Each item's dS tile goes to the workspace dS for the dq kernel through shared memory and one bulk copy (stored
 * straight from the registers, 4 bytes a thread across 8 rows, the kernel took 193 us a slice under Nsight Compute
 * against 164 us this way, 2026-12-03).
 * Shared: k, v, then q, dout of stages 0..2 (with each item's lse and Dsum), then two dS buffers. */
template <typename T> __global__ void __launch_bounds__(128) wg_backward_dkv_kernel(T *dqkv, uint8_t *dS, const T *dout, const T *qkv,
                                                                                    const float *lse, const float *Dsum, int T_, int NH,
                                                                                    int NKV, int ntri, float scale, const RopeFreq fr) {
#if WG_ON
    WG_TILES;
    __shared__ float LD[WG_STAGES][2][WG_BN];   /* [stage][lse * log2 e, Dsum][query] */
    uint32_t sK = tiles_base(smraw), sV = sK + WG_TILE, sQD = sV + WG_TILE;   /* stage st: q at sQD + 2*st*WG_TILE, dout after */
    uint8_t *stg = smraw + (2 + 2 * WG_STAGES) * WG_TILE;   /* item i's dS tile waits in stg + i%2 * WG_TILE for its bulk copy */
    int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV, G = NH / NKV;
    int k0 = blockIdx.y * WG_BN;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD, OS = (size_t)NH * WG_HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    float sl2 = scale * LOG2E;
    int nq = (T_ - k0 + WG_BN - 1) / WG_BN, items = G * nq;   /* query tiles q0 = k0, k0+64, ... of each head */
    /* item i: head kvh*G + i/nq, queries q0 = k0 + (i%nq)*64 .. +63, with their lse and Dsum */
    auto load_item = [&](int i) {
        if (i < items) {
            int h = kvh * G + i / nq, q0 = k0 + i % nq * WG_BN, st = i % WG_STAGES;
            uint32_t sq = sQD + st * 2 * WG_TILE;
            load_tile_sw<T>(sq, base + h * WG_HD, q0, WG_BN, T_, QKV);
            load_tile_sw<T>(sq + WG_TILE, dout + (size_t)b * T_ * OS + h * WG_HD, q0, WG_BN, T_, OS);
            int which = threadIdx.x / WG_BN, c = threadIdx.x % WG_BN;   /* 128 threads: lse and Dsum of 64 queries */
            const float *src = (which ? Dsum : lse) + ((size_t)b * NH + h) * T_;
            cp_async4(&LD[st][which][c], src + (q0 + c < T_ ? q0 + c : 0), q0 + c < T_);
        }
        cp_commit();
    };
    load_tile_sw<T>(sK, base + (NH + kvh) * WG_HD, k0, WG_BN, T_, QKV);
    load_tile_sw<T>(sV, base + (NH + NKV + kvh) * WG_HD, k0, WG_BN, T_, QKV);
    load_item(0);
    load_item(1);
    cp_wait<1>();
    __syncthreads();
    for (int c = threadIdx.x; c < WG_BN; c += blockDim.x) LD[0][0][c] *= LOG2E;   /* lse in base 2 */
    fence_to_async();
    __syncthreads();
    float s[32], dp[32], dk[32] = {}, dv[32] = {};   /* s, dp transposed: rows are keys, columns queries */
    uint32_t pa[4][4], da[4][4], pn[4][4], dn[4][4];
    wg_fence();
    wg_rows_times_rows<T>(s, sK, sQD);              /* s = k q^T, item 0 */
    wg_rows_times_rows<T>(dp, sV, sQD + WG_TILE);   /* dp = v dout^T */
    wg_commit();
    wg_wait<0>();
    wg_keep(s);
    wg_keep(dp);
    probs_and_grads<T>(s, dp, pa, da, LD[0][0], LD[0][1], k0, k0, T_, sl2, scale, true);
    stage_ds_tile(stg, da);
    for (int i = 0; i < items; i++) {
        bool more = i + 1 < items;
        int st = i % WG_STAGES, st1 = (i + 1) % WG_STAGES;
        if (threadIdx.x == 0) bulk_wait_read();   /* item i-1's copy (issued an iteration ago) has read its buffer ... */
        __syncthreads();                          /* ... which item i+1's dS takes below; item i's is staged in every thread */
        if (threadIdx.x == 0)
            bulk_store(dS + ds_slot(b, kvh * G + i / nq, NH, blockIdx.y + i % nq, blockIdx.y, ntri) * WG_TILE, smem_addr(stg + i % 2 * WG_TILE),
                       WG_TILE);
        load_item(i + 2);
        cp_wait<1>();
        __syncthreads();
        if (more)
            for (int c = threadIdx.x; c < WG_BN; c += blockDim.x) LD[st1][0][c] *= LOG2E;
        fence_to_async();
        __syncthreads();
        uint32_t sQ = sQD + st * 2 * WG_TILE, sQ1 = more ? sQD + st1 * 2 * WG_TILE : sQ;   /* last: item i again, unused */
        wg_fence();
        wg_rows_times_rows<T>(s, sK, sQ1);
        wg_rows_times_rows<T>(dp, sV, sQ1 + WG_TILE);
        wg_commit();
        wg_regs_times_tile<T>(dv, pa, sQ + WG_TILE);   /* dv += P^T @ dout */
        wg_regs_times_tile<T>(dk, da, sQ);             /* dk += dS^T @ q, both running while item i+1's are computed */
        wg_commit();
        wg_wait<1>();
        wg_keep(s);
        wg_keep(dp);
        if (more) {
            int q0 = k0 + (i + 1) % nq * WG_BN;
            probs_and_grads<T>(s, dp, pn, dn, LD[st1][0], LD[st1][1], k0, q0, T_, sl2, scale, q0 == k0 || q0 + WG_BN > T_);
            stage_ds_tile(stg + (i + 1) % 2 * WG_TILE, dn);   /* for the dq kernel */
        }
        wg_wait<0>();
        wg_keep(dv);
        wg_keep(dk);
        wg_keep(pa);
        wg_keep(da);
        if (more) {
#pragma unroll
            for (int e = 0; e < 16; e++) pa[e / 4][e % 4] = pn[e / 4][e % 4], da[e / 4][e % 4] = dn[e / 4][e % 4];
        }
    }
    if (threadIdx.x == 0) bulk_wait();   /* the last dS tile is in global memory, and no copy reads shared memory any more */
    int pos[2] = {k0 + w * 16 + g, k0 + w * 16 + g + 8};
    if (fr.on) rope_back_rows(dk, pos, fr);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = k0 + w * 16 + g + 8 * r;
        if (key >= T_) continue;
        T *yk = dqkv + ((size_t)b * T_ + key) * QKV + (NH + kvh) * WG_HD, *yv = yk + (size_t)NKV * WG_HD;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            *reinterpret_cast<uint32_t *>(yk + nt * 8 + 2 * t) = pack2<T>(dk[4 * nt + 2 * r], dk[4 * nt + 2 * r + 1]);
            *reinterpret_cast<uint32_t *>(yv + nt * 8 + 2 * t) = pack2<T>(dv[4 * nt + 2 * r], dv[4 * nt + 2 * r + 1]);
        }
    }
#endif
}

/* ---- launchers (attention.cu decides when this path applies) ---- */
__global__ void wg_probe_kernel(int *on) { *on = WG_ON; }

/* 1 when this binary carries sm_90a code and the GPU runs it (asked once) */
extern "C" int attention_wgmma_available(void) {
    static int known = -1;
    if (known >= 0) return known;
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    known = 0;
    if (major == 9 && minor == 0) {
        int *on, h = 0;
        cudaCheck(cudaMalloc(&on, sizeof(int)));
        wg_probe_kernel<<<1, 1>>>(on);
        launchCheck();
        cudaCheck(cudaMemcpy(&h, on, sizeof(int), cudaMemcpyDeviceToHost));
        cudaCheck(cudaFree(on));
        known = h;
    }
    return known;
}

/* launch with `smem` bytes of dynamic shared memory, raising the kernel's limit the first time it is needed */
#define WG_LAUNCH(kernel, grid, smem, ...) do { \
        static size_t raised_ = 0; \
        if (raised_ < (smem)) { cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem))); raised_ = (smem); \
                                cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100)); } \
        kernel<<<grid, 128, smem, cuda_stream>>>(__VA_ARGS__); \
        launchCheck(); \
    } while (0)

template <typename T> static void forward(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV, float scale) {
    size_t smem = (size_t)(1 + 2 * WG_STAGES) * WG_TILE;   /* 56 KB: four blocks an SM */
    WG_LAUNCH(wg_forward_kernel<T>, dim3(B * NH, ceil_div(T_, WG_BN)), smem, (T *)out, lse, (const T *)qkv, T_, NH, NKV, scale);
}
/* dS tiles are stored for at most cuda_attention_ds_cap bytes at once (ATTENTION_DS_CAP, kernels/attention.h; the
 * op test lowers it to check that slices give the same bits): a larger batch runs both kernels on slices of it.
 * Two slices keep the dk/dv kernel's first wave full at l124m and l350m (B = 16: eight sequences x 4 kv heads of
 * key tile 0, the longest blocks, start together); three would leave SMs idle behind those blocks. They lie in
 * the caller's lent scratch when it holds them (the model's h13: l124m and l350m at B = 16), else in our own. */
extern "C" {
size_t cuda_attention_ds_cap = ATTENTION_DS_CAP;
}

template <typename T> static void backward(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dsum, int B, int T_, int NH,
                                           int NKV, float scale, const RopeFreq &fr, void *work, size_t work_bytes) {
    static void *buf = 0;
    static size_t cap = 0;
    int nt = ceil_div(T_, WG_BN), ntri = nt * (nt + 1) / 2;
    size_t per_seq = (size_t)NH * ntri * WG_TILE, bytes = attention_ds_bytes(B, T_, NH, WG_HD, cuda_attention_ds_cap);
    if (!bytes) die("internal: attention_backward_wgmma for T=%d: one sequence's dS tiles exceed the cap", T_);
    int seqs = (int)(bytes / per_seq);
    uint8_t *dS = (uint8_t *)(work && work_bytes >= bytes ? work : cuda_scratch(&buf, &cap, bytes, "attention backward dS tiles"));
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD, smem = (size_t)(2 + 2 * WG_STAGES + 2) * WG_TILE;   /* k, v, 3 x (q, dout), 2 dS */
    for (int b0 = 0; b0 < B; b0 += seqs) {   /* sequences b0 .. b0+n-1 */
        int n = B - b0 < seqs ? B - b0 : seqs;
        size_t x = (size_t)b0 * T_ * QKV, y = (size_t)b0 * T_ * NH * WG_HD, l = (size_t)b0 * NH * T_;
        WG_LAUNCH(wg_backward_dkv_kernel<T>, dim3(n * NKV, nt), smem, dqkv + x, dS, dout + y, qkv + x, lse + l, Dsum + l, T_, NH, NKV,
                  ntri, scale, fr);
        WG_LAUNCH(wg_backward_dq_kernel<T>, dim3(n * NH, nt), (size_t)2 * WG_STAGES * WG_TILE, dqkv + x, qkv + x, dS, T_, NH, NKV, ntri, fr);
    }
}

/* 1 when the backward's dS tiles for one sequence of T fit in cuda_attention_ds_cap (else attention.cu runs mma.sync's) */
extern "C" int attention_wgmma_backward_fits(int T_, int NH) { return attention_ds_bytes(1, T_, NH, WG_HD, cuda_attention_ds_cap) > 0; }

/* the same contracts as attention_forward_mma / attention_backward_mma (attention_mma_supported() decides the shapes) */
extern "C" void attention_forward_wgmma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)WG_HD);
    if (cuda_act == DTYPE_BF16) forward<__nv_bfloat16>(out, lse, qkv, B, T_, NH, NKV, scale);
    else forward<__half>(out, lse, qkv, B, T_, NH, NKV, scale);
}
extern "C" void attention_backward_wgmma(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum, int B,
                                         int T_, int NH, int NKV, float rope_theta, void *work, size_t work_bytes) {
    float scale = 1.0f / sqrtf((float)WG_HD);
    RopeFreq fr = {rope_theta > 0};
    for (int i = 0; fr.on && i < WG_HD / 2; i++) fr.f[i] = rope_inv_freq(rope_theta, i, WG_HD);
    if (cuda_act == DTYPE_BF16)
        backward((__nv_bfloat16 *)dqkv, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)qkv, lse, Dsum, B, T_, NH, NKV, scale, fr, work,
                 work_bytes);
    else backward((__half *)dqkv, (const __half *)dout, (const __half *)qkv, lse, Dsum, B, T_, NH, NKV, scale, fr, work, work_bytes);
}
