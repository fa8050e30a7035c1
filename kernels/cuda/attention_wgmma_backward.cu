/* kernels/cuda/attention_wgmma_backward.cu — the Hopper backward of causal GQA
 * attention (bf16/fp16, HD = 64): a dk/dv kernel per key tile and a dq kernel
 * per query tile, each owning what it writes (no atomics: the same bits every
 * run), after attention.cu's Dsum pass. attention_wgmma.cu's header says how a
 * warpgroup's products and the pipeline work; "the two backwards" below says
 * when the dk/dv kernel stores its dS tiles for the dq kernel and when the dq
 * kernel computes them again. */
#include "attention_wgmma.cuh"
#include "cuda_extras.h"
#include <math.h>
#include <stdio.h>

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
                float angle = (float)pos[r] * fr.f[i], c, s;
                sincosf(angle, &s, &c);   /* one range reduction for both: the bits of cosf and sinf, ~10% of the dq kernel */
                s = -s;
                float x1 = d[a], x2 = d[b];
                d[a] = x1 * c - x2 * s;
                d[b] = x2 * c + x1 * s;
            }
}

/* a pipeline's first tile: s = a b^T and dp = c d^T (64 x 64 each, every operand a tile in shared memory), issued
 * together and waited for */
template <typename T> __device__ __forceinline__ void scores_and_dp(float (&s)[32], float (&dp)[32], uint32_t a, uint32_t b, uint32_t c,
                                                                    uint32_t d) {
    wg_fence();
    wg_rows_times_rows<T>(s, a, b);
    wg_rows_times_rows<T>(dp, c, d);
    wg_commit();
    wg_wait<0>();
    wg_keep(s);
    wg_keep(dp);
}

/* a dq kernel's epilogue: this thread's rows q and q + 8 of a 64 x 64 dq tile, rotated back through RoPE when
 * fr.on, into head h's q part of dqkv (rows past T skipped) */
template <typename T> __device__ __forceinline__ void store_dq(T *dqkv, float dq[32], int b, int h, int q, int T_, size_t QKV,
                                                               const RopeFreq &fr) {
    int t = threadIdx.x % 4, pos[2] = {q, q + 8};
    if (fr.on) rope_back_rows(dq, pos, fr);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (q + 8 * r >= T_) continue;
        T *y = dqkv + ((size_t)b * T_ + q + 8 * r) * QKV + h * WG_HD;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(dq[4 * nt + 2 * r], dq[4 * nt + 2 * r + 1]);
    }
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

/* dq part of dqkv: block = 64 queries of one (b, h); dq = sum over key tiles 0..the diagonal of dS_j @ K_j, with
 * dS from the dk/dv kernel; grid (B*NH, query tiles), longest first. Shared: dS^T then k, stages 0..2. */
template <typename T> __global__ void __launch_bounds__(128) wg_backward_dq_kernel(T *dqkv, const T *qkv, const uint8_t *dS, int T_, int NH,
                                                                                   int NKV, int ntri, const RopeFreq fr) {
#if WG_ON
    WG_TILES;
    uint32_t sT = tiles_base(smraw);   /* stage st: dS^T at sT + 2*st*WG_TILE, k after it */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * WG_BN, nk = qt + 1;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
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
    store_dq(dqkv, dq, b, h, q0 + w * 16 + g, T_, QKV, fr);
#endif
}

/* the same dq without stored tiles: block = 64 queries of one (b, h), which computes each key tile's scores, dP and
 * dS again from q, dout, k, v, lse and Dsum (three products a tile: s = q k^T, dp = dout v^T, dq += dS @ k), so its
 * memory is linear in T. Grid (B*NH, query tiles), longest first. Shared: q, dout, then k, v of stages 0..2. */
template <typename T> __global__ void __launch_bounds__(128) wg_backward_dq_recompute_kernel(T *dqkv, const T *dout, const T *qkv,
                                                                                             const float *lse, const float *Dsum, int T_,
                                                                                             int NH, int NKV, float scale,
                                                                                             const RopeFreq fr) {
#if WG_ON
    WG_TILES;
    uint32_t sQ = tiles_base(smraw), sDO = sQ + WG_TILE, sKV = sDO + WG_TILE;   /* stage st: k at sKV + 2*st*WG_TILE, v after it */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * WG_BN, nk = q0 / WG_BN + 1;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, lr = w * 16 + g;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD, OS = (size_t)NH * WG_HD;
    const T *base = qkv + (size_t)b * T_ * QKV, *Kg = base + (NH + kvh) * WG_HD, *Vg = base + (NH + NKV + kvh) * WG_HD;
    float sl2 = scale * LOG2E;
    load_tile_sw<T>(sQ, base + h * WG_HD, q0, WG_BN, T_, QKV);
    load_tile_sw<T>(sDO, dout + (size_t)b * T_ * OS + h * WG_HD, q0, WG_BN, T_, OS);
    load_kv_tile<T>(sKV, Kg, Vg, 0, nk, T_, QKV);
    load_kv_tile<T>(sKV, Kg, Vg, 1, nk, T_, QKV);
    float L[2], D[2];   /* lse * log2 e and Dsum of this thread's rows lr, lr + 8 (0 past T: those rows are not stored) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = q0 + lr + 8 * r;
        size_t at = ((size_t)b * NH + h) * T_ + q;
        L[r] = q < T_ ? lse[at] * LOG2E : 0.0f;
        D[r] = q < T_ ? Dsum[at] : 0.0f;
    }
    cp_wait<1>();
    fence_to_async();
    __syncthreads();
    float s[32], dp[32], dq[32] = {};
    uint32_t da[4][4], dn[4][4];
    scores_and_dp<T>(s, dp, sQ, sKV, sDO, sKV + WG_TILE);   /* s = q k^T, dp = dout v^T: tile 0 */
    probs_and_grads<T, false>(s, dp, nullptr, da, L, D, q0, 0, T_, sl2, scale, nk == 1 || WG_BN > T_);
    for (int j = 0; j < nk; j++) {   /* the pipeline: tile j+1's three products' first two run while tile j's dS meets k */
        bool more = j + 1 < nk;
        __syncthreads();
        load_kv_tile<T>(sKV, Kg, Vg, j + 2, nk, T_, QKV);
        cp_wait<1>();
        fence_to_async();
        __syncthreads();
        uint32_t sK = sKV + j % WG_STAGES * 2 * WG_TILE, sK1 = sKV + (j + more) % WG_STAGES * 2 * WG_TILE;   /* last: tile j again, unused */
        wg_fence();
        wg_rows_times_rows<T>(s, sQ, sK1);
        wg_rows_times_rows<T>(dp, sDO, sK1 + WG_TILE);
        wg_commit();
        wg_regs_times_tile<T>(dq, da, sK);   /* dq += dS_j @ K_j, running while tile j+1's dS is computed */
        wg_commit();
        wg_wait<1>();
        wg_keep(s);
        wg_keep(dp);
        if (more) {
            int k0 = (j + 1) * WG_BN;
            probs_and_grads<T, false>(s, dp, nullptr, dn, L, D, q0, k0, T_, sl2, scale, j + 2 == nk || k0 + WG_BN > T_);
        }
        wg_wait<0>();
        wg_keep(dq);
        wg_keep(da);
        if (more) {
#pragma unroll
            for (int i = 0; i < 16; i++) da[i / 4][i % 4] = dn[i / 4][i % 4];
        }
    }
    store_dq(dqkv, dq, b, h, q0 + lr, T_, QKV, fr);
#endif
}

/* dk, dv parts of dqkv: a block takes 64 keys of one (b, kv head), key tile kt, and when `paired` then the 64 keys of
 * tile nkt-1-kt: the causal mask gives tile kt nkt-kt query tiles and its partner kt+1, so every block does the same
 * nkt+1, and a grid of more blocks than the SMs hold at once ends without a tail (one tile a block, longest first,
 * left a sixth of the SMs idle at the end: Nsight Compute, H100, 2026-12-05); a smaller grid keeps one tile a block,
 * which spreads it over more SMs. For each key tile: every head of the group, query tiles from the diagonal, streamed
 * as one sequence of (head, query tile) items; grid (B*NKV, dkv_grid_y(paired, nkt)). Each item's dS tile goes to the
 * workspace dS for the dq kernel through shared memory and one bulk copy (stored straight from the registers, 4 bytes
 * a thread across 8 rows, the kernel took 193 us a slice under Nsight Compute against 164 us this way, 2026-12-03).
 * Shared: k, v, then q, dout of stages 0..2 (with each item's lse and Dsum), then two dS buffers. */
template <typename T, bool STORE> __global__ void __launch_bounds__(128) wg_backward_dkv_kernel(T *dqkv, uint8_t *dS, const T *dout, const T *qkv,
                                                                                    const float *lse, const float *Dsum, int T_, int NH,
                                                                                    int NKV, int ntri, float scale, const RopeFreq fr,
                                                                                    int paired) {
#if WG_ON
    WG_TILES;
    __shared__ float LD[WG_STAGES][2][WG_BN];   /* [stage][lse, Dsum][query] */
    uint32_t sK = tiles_base(smraw), sV = sK + WG_TILE, sQD = sV + WG_TILE;   /* stage st: q at sQD + 2*st*WG_TILE, dout after */
    uint8_t *stg = smraw + (2 + 2 * WG_STAGES) * WG_TILE;   /* item i's dS tile waits in stg + i%2 * WG_TILE for its bulk copy */
    int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV, G = NH / NKV, nkt = (T_ + WG_BN - 1) / WG_BN;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD, OS = (size_t)NH * WG_HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    float sl2 = scale * LOG2E;
    for (int pass = 0; pass < 2; pass++) {
        int kt = pass ? nkt - 1 - blockIdx.y : blockIdx.y, k0 = kt * WG_BN;
        if (pass) {
            if (!paired || kt == (int)blockIdx.y) break;   /* odd nkt: the middle tile has no partner */
            __syncthreads();   /* the first tile's products and bulk copies are done in every thread: its buffers are free */
        }
        int nq = nkt - kt, items = G * nq;   /* query tiles q0 = k0, k0+64, ... of each head */
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
        fence_to_async();
        __syncthreads();
        float s[32], dp[32], dk[32] = {}, dv[32] = {};   /* s, dp transposed: rows are keys, columns queries */
        uint32_t pa[4][4], da[4][4], pn[4][4], dn[4][4];
        scores_and_dp<T>(s, dp, sK, sQD, sV, sQD + WG_TILE);   /* s = k q^T, dp = v dout^T: item 0 */
        probs_and_grads<T, true>(s, dp, pa, da, LD[0][0], LD[0][1], k0, k0, T_, sl2, scale, true);
        if (STORE) stage_ds_tile(stg, da);
        for (int i = 0; i < items; i++) {
            bool more = i + 1 < items;
            int st = i % WG_STAGES, st1 = (i + 1) % WG_STAGES;
            if (STORE && threadIdx.x == 0) bulk_wait_read();   /* item i-1's copy (issued an iteration ago) has read its buffer ... */
            __syncthreads();                          /* ... which item i+1's dS takes below; item i's is staged in every thread */
            if (STORE && threadIdx.x == 0)
                bulk_store(dS + ds_slot(b, kvh * G + i / nq, NH, kt + i % nq, kt, ntri) * WG_TILE, smem_addr(stg + i % 2 * WG_TILE), WG_TILE);
            load_item(i + 2);
            cp_wait<1>();   /* item i+1 has landed ... */
            fence_to_async();
            __syncthreads();   /* ... in every thread */
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
                probs_and_grads<T, true>(s, dp, pn, dn, LD[st1][0], LD[st1][1], k0, q0, T_, sl2, scale, q0 == k0 || q0 + WG_BN > T_);
                if (STORE) stage_ds_tile(stg + (i + 1) % 2 * WG_TILE, dn);   /* for the dq kernel */
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
        if (STORE && threadIdx.x == 0) bulk_wait();   /* the last dS tile is in global memory, and no copy reads shared memory any more */
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
    }
#endif
}

/* ---- the two backwards ---------------------------------------------------------------------
 * Stored: up to ATTENTION_DS_MAX_T tokens (kernels/attention.h, where the measurement is) the dk/dv kernel, which
 * computes every dS tile anyway, stores them and the dq kernel only multiplies them by K. Computed again: above it,
 * or with LLM3D_ATTENTION=recompute, the dq kernel computes S, P and dP again from q, k, v, dout and lse (two more
 * products a tile) and nothing quadratic is kept: the stored tiles' traffic, T^2, costs more than the products.
 * Stored dS tiles take at most cuda_attention_ds_cap bytes at once (ATTENTION_DS_CAP; the op test lowers it to check
 * that slices give the same bits): a larger batch runs both kernels on slices of it. At l124m and l350m (B = 16)
 * a slice is eight sequences: 8 x 4 kv heads x 8 pairs of key tiles = 256 equal dk/dv blocks, one wave on a
 * 132-SM H100 or H200 (the whole batch at once, 512, would be 1.9 waves). They lie in the caller's lent scratch
 * when it holds them (the model's h13: l124m and l350m at B = 16), else in our own. */
extern "C" {
size_t cuda_attention_ds_cap = ATTENTION_DS_CAP;
int cuda_attention_pairing = -1;
long cuda_attention_paired_launches = 0;
}

/* 1 when the backward stores dS tiles for T: T is at most ATTENTION_DS_MAX_T, one sequence's fit in
 * cuda_attention_ds_cap and LLM3D_ATTENTION=recompute is not set */
extern "C" int attention_wgmma_backward_stores(int T_, int NH) {
    return !cuda_attention_recompute && attention_ds_bytes(1, T_, NH, WG_HD, cuda_attention_ds_cap) > 0;
}

/* 1: the dk/dv kernel pairs key tiles kt and nkt-1-kt in one block, when one tile a block would be more blocks than the
 * SMs hold at once (two a SM: registers and shared memory), or cuda_attention_pairing says so */
static int pair_key_tiles(int groups, int nkt) {
    int wave = 2 * (cuda_num_sms > 0 ? cuda_num_sms : 1);
    int on = cuda_attention_pairing >= 0 ? cuda_attention_pairing : nkt > 1 && (long)groups * nkt > wave;
    cuda_attention_paired_launches += on;
    return on;
}
/* the dk/dv grid's y: pairs of key tiles (the middle one alone when nkt is odd), or key tiles */
static int dkv_grid_y(int paired, int nkt) { return paired ? (nkt + 1) / 2 : nkt; }

template <typename T> static void backward(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dsum, int B, int T_, int NH,
                                           int NKV, float scale, const RopeFreq &fr, void *work, size_t work_bytes) {
    static void *buf = 0;
    static size_t cap = 0;
    int nt = ceil_div(T_, WG_BN), ntri = nt * (nt + 1) / 2;
    size_t QKV = (size_t)(NH + 2 * NKV) * WG_HD;
    size_t smem_kv = (size_t)(2 + 2 * WG_STAGES) * WG_TILE;   /* k, v, 3 x (q, dout); the dq kernels' q, dout, 3 x (k, v) too */
    if (!attention_wgmma_backward_stores(T_, NH)) {   /* linear in T: the dq kernel computes dS again */
        auto *dkv = wg_backward_dkv_kernel<T, false>;
        int paired = pair_key_tiles(B * NKV, nt);
        WG_LAUNCH(dkv, dim3(B * NKV, dkv_grid_y(paired, nt)), smem_kv, dqkv, nullptr, dout, qkv, lse, Dsum, T_, NH, NKV, ntri,
                  scale, fr, paired);
        WG_LAUNCH(wg_backward_dq_recompute_kernel<T>, dim3(B * NH, nt), smem_kv, dqkv, dout, qkv, lse, Dsum, T_, NH, NKV, scale, fr);
        return;
    }
    size_t bytes = attention_ds_bytes(B, T_, NH, WG_HD, cuda_attention_ds_cap), per_seq = (size_t)NH * ntri * WG_TILE;
    int seqs = (int)(bytes / per_seq);
    uint8_t *dS = (uint8_t *)(work && work_bytes >= bytes ? work : cuda_scratch(&buf, &cap, bytes, "attention backward dS tiles"));
    for (int b0 = 0; b0 < B; b0 += seqs) {   /* sequences b0 .. b0+n-1 */
        int n = B - b0 < seqs ? B - b0 : seqs;
        size_t x = (size_t)b0 * T_ * QKV, y = (size_t)b0 * T_ * NH * WG_HD, l = (size_t)b0 * NH * T_;
        auto *dkv = wg_backward_dkv_kernel<T, true>;
        int paired = pair_key_tiles(n * NKV, nt);
        WG_LAUNCH(dkv, dim3(n * NKV, dkv_grid_y(paired, nt)), smem_kv + 2 * WG_TILE /* 2 dS */, dqkv + x, dS, dout + y, qkv + x,
                  lse + l, Dsum + l, T_, NH, NKV, ntri, scale, fr, paired);
        WG_LAUNCH(wg_backward_dq_kernel<T>, dim3(n * NH, nt), (size_t)2 * WG_STAGES * WG_TILE, dqkv + x, qkv + x, dS, T_, NH, NKV, ntri, fr);
    }
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
