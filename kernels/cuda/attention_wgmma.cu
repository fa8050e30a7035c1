/* kernels/cuda/attention_wgmma.cu — the Hopper path of causal GQA attention for
 * bf16 and fp16 with HD = 64: the same flash-attention forward as
 * attention_mma.cu (online softmax), with every product issued by a warpgroup
 * (4 warps, 128 threads) as wgmma m64n64k16 instead of per-warp mma.sync
 * m16n8k16. This file holds the forward; attention_wgmma_backward.cu the
 * deterministic backward in which every kernel owns what it writes (after
 * attention.cu's Dsum pass, a dk/dv kernel per key tile and a dq kernel per
 * query tile; up to ATTENTION_DS_MAX_T the dk/dv kernel stores each dS tile and
 * the dq kernel is one product a tile, above it the dq kernel computes dS
 * again: its "the two backwards" says why); attention_wgmma.cuh what they share.
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
#include "attention_wgmma.cuh"
#include <math.h>
#include <stdio.h>

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

template <typename T> static void forward(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV, float scale) {
    size_t smem = (size_t)(1 + 2 * WG_STAGES) * WG_TILE;   /* 56 KB: four blocks an SM */
    WG_LAUNCH(wg_forward_kernel<T>, dim3(B * NH, ceil_div(T_, WG_BN)), smem, (T *)out, lse, (const T *)qkv, T_, NH, NKV, scale);
}
/* the same contracts as attention_forward_mma / attention_backward_mma (attention_mma_supported() decides the shapes) */
extern "C" void attention_forward_wgmma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)WG_HD);
    if (cuda_act == DTYPE_BF16) forward<__nv_bfloat16>(out, lse, qkv, B, T_, NH, NKV, scale);
    else forward<__half>(out, lse, qkv, B, T_, NH, NKV, scale);
}
