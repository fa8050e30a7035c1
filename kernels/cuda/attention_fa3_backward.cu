/* kernels/cuda/attention_fa3_backward.cu — the causal GQA attention backward on
 * Hopper in FlashAttention-3's shape (warp-specialized, TMA-fed, two consumer
 * warpgroups a block), head dims 64 and 128, bf16 and fp16: after attention.cu's
 * Dsum pass, a dk/dv kernel that also adds dQ up in a fixed order (or, switched,
 * a second kernel that sweeps for dQ), the same bits every run (no float atomics
 * in varying order: resume and the layout proofs need it).
 *
 * The idea. dk/dv: a block owns 128 keys of one (sequence, KV head), 64 for
 * each consumer warpgroup, and keeps their dK and dV in registers while the
 * producer warpgroup streams, for every query head of the group, the query
 * tiles at and after the block's keys (64 rows of Q and of dout a tile, by TMA,
 * into a ring of shared-memory stages; one of its warps copies the tile's lse
 * and Dsum beside them). A consumer computes S^T = K Q^T and dP^T = V dout^T,
 * P^T = exp(S^T scale - lse) and dS^T = P^T (dP^T - Dsum) on the
 * registers they came back in, and accumulates dV += P^T dout and
 * dK += dS^T Q with P^T and dS^T straight from those registers as A operands
 * (the softmax scale goes on dK's and dQ's sums once, not on every dS). dq (the sweep): the
 * forward's shape (128 queries a block, two consumers of 64), streaming K and V
 * tiles of 64 keys from the diagonal down, computing S, dP and dS again and
 * accumulating dQ += dS K.
 *
 * dQ without the second sweep (the default where the plan counts the accumulator, attention_backward_scratch:
 * cuda_attention_fa3_dq forces either). The dk/dv kernel already has dS: each consumer writes
 * its dS^T tile to shared memory beside the other's, and dQ over the block's
 * 128 keys is one more product (dS as an MN-major A operand, K from the block's
 * own tiles; at HD 128 each consumer takes a column half, at HD 64 the consumer
 * of the item's parity the whole). The block's part goes through a staged
 * shared tile to an fp32 accumulator in L2 by the copy engine (a bulk store for
 * the first key block, a bulk add for the others), and a turn counter per query
 * tile makes the key blocks add in key order: the same bits every run without
 * float atomics in varying order. Items walk the query tiles from the last
 * down, so every key block of a (b, kv head) meets a tile at the same step and
 * the turns rarely wait; each block waits only on blocks launched before it.
 * A last small kernel rotates dQ back through RoPE into dqkv. Five products a
 * tile instead of seven, for fp32 memory linear in T (B*NH*T*HD*4 bytes);
 * docs/performance.md has both measured. The dQ product needs both consumers'
 * dS^T tiles, so each waits for the other every item; at head dim 64,
 * switched (cuda_attention_fa3_dq_lag, LAG; H100 2026-12-08: within 3% either way, so off), it is issued
 * during the next item instead, when the other's tile is long in. The single
 * products, epilogues and the turns' memory order are attention_fa3_backward.cuh's.
 *
 * Context parallelism's chunks (kernels/attention.h's offset form) run the
 * sweep's two kernels, the whole sequence's arithmetic: queries at positions
 * qoff.. (the masks compare positions), K/V from a second map over the
 * gathered k|v that ends at the chunk's last key (later keys arrive as zeros:
 * never read). A key block starts at the first query tile holding a query at
 * or after its first key; tiles straddle key blocks anywhere and are masked
 * where they must. dK/dV are added in fp32 into dkv (each element one
 * thread's), dQ stored without RoPE; no dQ accumulator (cp keeps none).
 *
 * Within a consumer, tile i's dV/dK (or dQ) products run while tile i+1's S and
 * dP are issued; the two consumers of a block fill each other's gaps. RoPE's
 * backward is folded into the epilogues (the contract of kernels/attention.h). */
#include "attention_fa3_backward.cuh"
#include <math.h>
extern "C" {
#include "cuda_extras.h"
}

/* dk, dv of 128 keys of one (b, kv head), summed over the group's query heads: grid (B*NKV, key blocks), the longest
 * (the first keys) first. tq maps the Tq query rows of qkv (B,Tq,(NH+2*NKV)*HD), tdo dout (B,Tq,NH*HD), tkv the keys
 * (K of KV head g at column kcol + g*HD, V at kcol + (NKV+g)*HD), all in 64-row boxes; lse, Dsum (B,NH,Tq) by warp 1.
 * Queries sit at positions qoff .. qoff+Tq-1 and keys 0 .. qoff+Tq-1 are read (masks at positions). The whole
 * sequence: tkv = tq, kcol = NH*HD, qoff = 0, Tk = Tq, dkv NULL: dK (rotated back through RoPE when fr.on) and dV
 * stored into dqkv's k and v parts. A chunk at an offset (kernels/attention.h's offset form, NSTG = 0 only): tkv over
 * kv (B,Tk,2*NKV*HD) ending at the chunk's last key, kcol = 0, and the fp32 sums ADDED into dkv (B,Tk,2*NKV*HD),
 * each (key, KV head) element this block's alone. (The offset form's arguments come last: placed before the others
 * they cost the NSTG = 2 variant spills.) Items run the query tiles from the last down to the first holding a query
 * at or after the block's first key, the group's heads within each, so every key block of a (b, kv head) meets a
 * tile at the same step.
 * Shared: K, V (128 rows each), stages 0..S-1 of (Q tile, dout tile), with DQ (NSTG > 0) two dS^T tiles (128 keys x
 * 64 queries) and NSTG staged dQ tiles, then [stage][lse, Dsum][64] floats, then the barriers.
 * DQ: dq_acc (B,NH,ntq tiles) of FB_DQ_TILE bytes and turn (B,NH,ntq) zeroed ints; dQ = dS K over this block's 128
 * keys, by each consumer for HD/64 == 2 its column half, for HD 64 the consumer of the item's parity; producer warp
 * 2 adds the staged tile when the tile's counter says the key blocks before this one have. */
template <typename T, int HD, int S, int NSTG, bool LAG = false> __global__ void __launch_bounds__(FB_THREADS, 1)
fa3_dkv_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo, T *dqkv, const float *lse, const float *Dsum,
               int Tq, int NH, int NKV, float scale, const FbRope fr, float *dq_acc, int *turn,
               const __grid_constant__ CUtensorMap tkv, float *dkv, int qoff, int Tk, int kcol) {
#if WG_ON
    WG_TILES;
    constexpr uint32_t KHALF = 2 * FB_BOX, KB = KHALF * (HD / 64), QB = FB_BOX * (HD / 64);
    constexpr bool DQ = NSTG > 0;
    constexpr int NS = DQ ? NSTG : 1;   /* (a divisor in code DQ leaves out) */
    constexpr uint32_t DSB = DQ ? 2 * 16384 : 0, STGB = DQ ? NSTG * FB_DQ_TILE(HD) : 0;
    constexpr int JOBW = 4 * (HD / 64);   /* the warps that compute one item's dQ */
    if constexpr (DQ) { qoff = 0; kcol = NH * HD; }   /* (DQ: the whole sequence only) */
    const CUtensorMap *mkv = DQ ? &tq : &tkv;
    uint32_t sK = tiles_base(smraw), sV = sK + KB, sQ0 = sV + KB;   /* stage st: Q at sQ0 + 2*st*QB, dout after it */
    uint32_t sDS = sQ0 + 2 * S * QB, sSTG = sDS + DSB;              /* (DQ) dS^T tile p at sDS + p*16384; staged dQ after */
    float *LD = reinterpret_cast<float *>(smraw + 2 * KB + 2 * S * QB + DSB + STGB);
    uint32_t barKV = smem_addr(LD + S * 128), barF = barKV + 8, barE = barF + 8 * S;   /* + 8 * stage */
    uint32_t barDF = barE + 8 * S, barDE = barDF + 16, barQF = barDE + 16, barQE = barQF + 8 * NS;   /* (DQ) + 8 * p or staging */
    int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV, G = NH / NKV, kb = blockIdx.y, k0 = kb * 128, Te = qoff + Tq;   /* keys < Te */
    /* local query tiles qt0 .. ntq-1: the first holds the first query at or after key k0 (at an offset, not aligned with it) */
    int ntq = (Tq + 63) / 64, qt0 = max(k0 - qoff, 0) / 64, nq = ntq - qt0, items = G * nq;   /* item it: query tile ntq-1 - it/G, head kvh*G + it%G */
    int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        mbar_init(barKV, 1);
        for (int st = 0; st < S; st++) {
            mbar_init(barF + 8 * st, 1 + 32);   /* the copy's arrival (with its bytes) and warp 1's 32 */
            mbar_init(barE + 8 * st, 256);      /* every consumer thread, after its own reads of the stage's lse, Dsum */
        }
        if constexpr (DQ) {
            for (int p = 0; p < 2; p++) {
                mbar_init(barDF + 8 * p, 8);      /* dS^T tile p written: every consumer warp */
                mbar_init(barDE + 8 * p, JOBW);   /* dS^T tile p read: the warps of its item's dQ products */
            }
            for (int p = 0; p < NSTG; p++) {
                mbar_init(barQF + 8 * p, JOBW);   /* staged dQ tile p written */
                mbar_init(barQE + 8 * p, 1);      /* staged dQ tile p read by the copy engine: warp 2 */
            }
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   /* ---- the producer ---- */
        regs_down<FA_REGS_PRODUCER>();
        if (threadIdx.x == 0) {
            mbar_expect_tx(barKV, 2 * KB);
#pragma unroll
            for (int hf = 0; hf < HD / 64; hf++)
#pragma unroll
                for (int rb = 0; rb < 2; rb++) {
                    tma_load3(sK + hf * KHALF + rb * FB_BOX, mkv, kcol + kvh * HD + hf * 64, k0 + 64 * rb, b, barKV);
                    tma_load3(sV + hf * KHALF + rb * FB_BOX, mkv, kcol + (NKV + kvh) * HD + hf * 64, k0 + 64 * rb, b, barKV);
                }
            for (int it = 0; it < items; it++) {
                int h = kvh * G + it % G, q0 = (ntq - 1 - it / G) * 64, st = it % S;
                uint32_t q = sQ0 + 2 * st * QB;
                mbar_wait(barE + 8 * st, ((it / S) & 1) ^ 1);
                mbar_expect_tx(barF + 8 * st, 2 * QB);
#pragma unroll
                for (int hf = 0; hf < HD / 64; hf++) {
                    tma_load3(q + hf * FB_BOX, &tq, h * HD + hf * 64, q0, b, barF + 8 * st);
                    tma_load3(q + QB + hf * FB_BOX, &tdo, h * HD + hf * 64, q0, b, barF + 8 * st);
                }
            }
        } else if (threadIdx.x / 32 == 1) {   /* warp 1: each item's lse and Dsum (B,NH,Tq) beside its tiles */
            int lane = threadIdx.x % 32;
            for (int it = 0; it < items; it++) {
                int h = kvh * G + it % G, q0 = (ntq - 1 - it / G) * 64, st = it % S;
                mbar_wait(barE + 8 * st, ((it / S) & 1) ^ 1);
                float *ld = LD + st * 128;
                for (int e = lane; e < 64; e += 32) {
                    int q = q0 + e;
                    size_t at = ((size_t)b * NH + h) * Tq + q;
                    ld[e] = q < Tq ? lse[at] * LOG2E : 0.0f;   /* (in log2 units: probs_and_grads' RAW) */
                    ld[64 + e] = q < Tq ? Dsum[at] : 0.0f;
                }
                __syncwarp();
                mbar_arrive(barF + 8 * st);
            }
        } else if (DQ && threadIdx.x == 64) {   /* warp 2: each item's staged dQ into the accumulator, in key-block order */
            for (int it = 0; it < items; it++) {
                int h = kvh * G + it % G, qt = ntq - 1 - it / G, sb = it % NS;
                size_t tile = ((size_t)b * NH + h) * ntq + qt;
                mbar_wait(barQF + 8 * sb, (it / NS) & 1);
                if (kb) {   /* key blocks 0..kb-1 first (all of them meet this tile: it is at or after their keys) */
                    while (ld_acquire(turn + tile) != kb) __nanosleep(64);
                    fence_async_global();
                }
                float *dst = dq_acc + tile * (FB_DQ_TILE(HD) / 4);
                if (kb) bulk_add_f32(dst, sSTG + sb * FB_DQ_TILE(HD), FB_DQ_TILE(HD));
                else bulk_store(dst, sSTG + sb * FB_DQ_TILE(HD), FB_DQ_TILE(HD));
                bulk_wait();   /* in L2: the next key block may add */
                fence_async_global();
                st_release(turn + tile, kb + 1);
                mbar_arrive(barQE + 8 * sb);
            }
        }
        return;
    }
    /* ---- the consumers: warpgroup c owns keys kc .. kc+63 ---- */
    regs_up<FA_REGS_CONSUMER>();
    int c = wg - 1, tid = threadIdx.x % 128, w = tid / 32, g = tid % 32 / 4, kc = k0 + 64 * c;
    uint32_t ka = sK + c * FB_BOX, va = sV + c * FB_BOX;
    float sl2 = scale * LOG2E, s[32], dp[32], dk[HD / 2], dv[HD / 2], dq[32];
    uint32_t pa[4][4], da[4][4];
    int pend = -1;   /* (DQ) the item whose dQ product this consumer has issued and not yet staged */
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.0f;
    wg_keep(dk);   /* (pinned here: a zero the compiler sinks into the loop would serialize the products) */
    wg_keep(dv);
    /* (DQ) after a wait: item pend's dQ (this consumer's column half hf) into its staging tile, and its dS^T tile free */
    auto stage_dq = [&]() {
        int sb = pend % NS, hf = HD == 64 ? 0 : c;
        mbar_wait(barQE + 8 * sb, ((pend / NS) & 1) ^ 1);
        float2 *y = reinterpret_cast<float2 *>(smraw + (sSTG - sK) + sb * FB_DQ_TILE(HD) + hf * 16384) + tid;
#pragma unroll
        for (int j = 0; j < 16; j++) y[j * 128] = make_float2(dq[2 * j], dq[2 * j + 1]);
        fence_to_async();
        __syncwarp();
        if (tid % 32 == 0) {
            mbar_arrive(barQF + 8 * sb);
            mbar_arrive(barDE + 8 * (pend % 2));
        }
        pend = -1;
    };
    /* (DQ) item L's dQ = dS K once both consumers' dS^T tiles of it are in (HD 64: by the consumer of L's parity). LAG:
     * issued while the next item runs rather than right after this consumer's own tile, so that the consumers do not
     * wait for each other every item */
    auto issue_dq = [&](int L) {
        if (HD == 64 && L % 2 != c) return;
        int p = L % 2, hf = HD == 64 ? 0 : c;
        mbar_wait(barDF + 8 * p, (L / 2) & 1);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++)   /* k-steps of 16 keys: dS^T rows (keys) x K rows, both MN-major */
            wg_ss_mn<T>(dq, wg_desc(sDS + p * 16384 + 2048 * kk), wg_desc(sK + hf * KHALF + (kk / 4) * FB_BOX + 2048 * (kk % 4)), kk);
        wg_commit();
        pend = L;
    };
    mbar_wait(barKV, 0);
    for (int it = 0; it < items; it++) {
        /* every item runs the same products (no branch around a wgmma): a tile wholly before our keys (the first of
         * each head for the second consumer) is masked to nothing. q0: the tile's first row, g0 its position */
        int q0 = (ntq - 1 - it / G) * 64, g0 = qoff + q0, st = it % S;
        uint32_t q = sQ0 + 2 * st * QB;
        mbar_wait(barF + 8 * st, (it / S) & 1);
        wg_fence();
        fb_rows<T, HD>(s, ka, q, KHALF, FB_BOX);        /* S^T = K Q^T */
        fb_rows<T, HD>(dp, va, q + QB, KHALF, FB_BOX);  /* dP^T = V dout^T */
        wg_commit();
        wg_wait<0>();   /* (the previous item's dV, dK, and with DQ its dQ, too) */
        wg_keep(s);
        wg_keep(dp);
        wg_keep(dv);
        wg_keep(dk);
        wg_keep(pa);
        wg_keep(da);
        if constexpr (DQ) {
            wg_keep(dq);
            if (pend >= 0) stage_dq();
        }
        /* this thread is done with the previous stage: every thread arrives (CUTLASS's consumer release), after its
         * own reads of warp 1's generic lse/Dsum stores, so the hand-off needs no warp-level step to be ordered */
        if (it) mbar_arrive(barE + 8 * ((it - 1) % S));
        const float *L = LD + st * 128;
        probs_and_grads<T, true, true>(s, dp, pa, da, L, L + 64, kc, g0, Te, sl2, scale, g0 < kc + 64 || g0 + 64 > Te);
        wg_fence();
        fb_regs_times<T, HD>(dv, pa, q + QB, FB_BOX);   /* dV += P^T dout */
        fb_regs_times<T, HD>(dk, da, q, FB_BOX);        /* dK += dS^T Q, both running while the next item's S^T, dP^T are issued */
        wg_commit();
        if constexpr (DQ) {   /* dS^T to shared memory beside the other consumer's, then dQ = dS K over the 128 keys */
            int p = it % 2;
            mbar_wait(barDE + 8 * p, ((it / 2) & 1) ^ 1);
            stage_ds_tile(smraw + (sDS - sK) + p * 16384 + c * 8192, da);
            __syncwarp();
            if (tid % 32 == 0) mbar_arrive(barDF + 8 * p);
            if constexpr (!LAG) issue_dq(it);
            else if (it) issue_dq(it - 1);   /* an item late: the other consumer's dS^T tile is in by then */
        }
        if constexpr (HD == 128) {   /* no registers for both at once (dK, dV are 128 a thread): the other consumer overlaps */
            wg_wait<0>();
            wg_keep(dv);
            wg_keep(dk);
            if constexpr (DQ) {
                wg_keep(dq);
                if (pend >= 0) stage_dq();
            }
        }
    }
    if constexpr (DQ && LAG) {
        if (items) {   /* the last item's dQ, after the one before it is staged (the same registers) */
            wg_wait<0>();
            wg_keep(dq);
            if (pend >= 0) stage_dq();
            issue_dq(items - 1);
        }
    }
    wg_wait<0>();
    wg_keep(dv);
    wg_keep(dk);
    if constexpr (DQ) {
        wg_keep(dq);
        if (pend >= 0) stage_dq();
    }
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] *= scale;   /* (dS^T came without it: probs_and_grads' RAW) */
    int pos[2] = {kc + w * 16 + g, kc + w * 16 + g + 8};   /* keys past Te (zeros from the map) are not stored */
    if (!DQ && dkv) {   /* the offset form: fp32 sums added into dkv's rows b*Tk + key, no RoPE */
        size_t KVW = (size_t)2 * NKV * HD;
        float *yk[2], *yv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            yk[r] = pos[r] < Te ? dkv + ((size_t)b * Tk + pos[r]) * KVW + kvh * HD : nullptr;
            yv[r] = yk[r] ? yk[r] + (size_t)NKV * HD : nullptr;
        }
        fb_add<HD>(dv, yv);
        fb_add<HD>(dk, yk);
        return;
    }
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    T *yk[2], *yv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {   /* (the whole sequence: positions are rows, Tq = T) */
        yk[r] = pos[r] < Te ? dqkv + ((size_t)b * Tq + pos[r]) * QKV + (NH + kvh) * HD : nullptr;
        yv[r] = yk[r] ? yk[r] + (size_t)NKV * HD : nullptr;
    }
    fb_store<T, HD>(dv, pos, yv, nullptr);
    fb_store<T, HD>(dk, pos, yk, fr.on ? &fr : nullptr);
#endif
}

/* (DQ) the accumulated dQ (dq_acc's staged order) times the softmax scale into dqkv's q part, rotated back through RoPE when on: grid
 * (B*NH, query tiles), 128 threads, thread tid taking its accumulators in both halves of RoPE's pairs (column i and
 * i + HD/2: for HD 64 float2 j and j + 8 of one half, for HD 128 float2 j of both halves) */
template <typename T, int HD> __global__ void __launch_bounds__(128) fa3_dq_store_kernel(T *dqkv, const float *dq_acc, int T_, int NH, int NKV,
                                                                                        float scale, const FbRope fr) {
    int b = blockIdx.x / NH, h = blockIdx.x % NH, qt = blockIdx.y, tid = threadIdx.x;
    int w = tid / 32, g = tid % 32 / 4, t = tid % 4;
    const float2 *a = reinterpret_cast<const float2 *>(dq_acc + (((size_t)b * NH + h) * gridDim.y + qt) * (FB_DQ_TILE(HD) / 4)) + tid;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
#pragma unroll
    for (int j = 0; j < (HD == 64 ? 8 : 16); j++) {
        int pos = qt * 64 + w * 16 + g + 8 * (j % 2), col = 8 * (j / 2) + 2 * t;   /* col < HD/2: the pair's first */
        if (pos >= T_) continue;
        float2 x1 = a[j * 128], x2 = a[(HD == 64 ? j + 8 : j + 16) * 128];
        float u[2] = {x1.x * scale, x1.y * scale}, v[2] = {x2.x * scale, x2.y * scale};   /* (the sums of dS K: dS came unscaled) */
        if (fr.on)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float sn, cs;
                sincosf((float)pos * fr.f[col + e], &sn, &cs);
                sn = -sn;
                float p1 = u[e], p2 = v[e];
                u[e] = p1 * cs - p2 * sn;
                v[e] = p2 * cs + p1 * sn;
            }
        T *y = dqkv + ((size_t)b * T_ + pos) * QKV + h * HD + col;
        *reinterpret_cast<uint32_t *>(y) = pack2<T>(u[0], u[1]);
        *reinterpret_cast<uint32_t *>(y + HD / 2) = pack2<T>(v[0], v[1]);
    }
}

/* dq part of dqkv (B,Tq,(NH+2*NKV)*HD) for 128 queries of one (b, head): grid (B*NH, query blocks), the longest (the
 * last queries) first. The queries (rows of tq, tdo) sit at positions qoff.., the keys come from tkv at column kcol
 * (fa3_dkv_kernel's maps); lse, Dsum (B,NH,Tq). The whole sequence: qoff = 0, tkv = tq, kcol = NH*HD, dQ rotated back
 * through RoPE when fr.on; at an offset fr is off. Shared: Q, dout (128 rows each), then stages 0..S-1 of (K tile,
 * V tile) of 64 keys, then the barriers. */
template <typename T, int HD, int S> __global__ void __launch_bounds__(FB_THREADS, 1)
fa3_dq_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo, T *dqkv, const float *lse, const float *Dsum,
              int Tq, int NH, int NKV, float scale, const FbRope fr, const __grid_constant__ CUtensorMap tkv, int qoff, int kcol) {
#if WG_ON
    WG_TILES;
    constexpr uint32_t QHALF = 2 * FB_BOX, QB = QHALF * (HD / 64), KB = FB_BOX * (HD / 64);
    uint32_t sQ = tiles_base(smraw), sDO = sQ + QB, sKV0 = sDO + QB;   /* stage st: K at sKV0 + 2*st*KB, V after it */
    uint32_t barQ = sKV0 + 2 * S * KB, barF = barQ + 8, barE = barF + 8 * S;
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * 128, Te = qoff + Tq;   /* the block's first row; positions end at Te */
    int nk = (qoff + min(q0 + 128, Tq) - 1) / 64 + 1;   /* key tiles 0..nk-1 (the last holds the block's last query's own key), walked down */
    int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        mbar_init(barQ, 1);
        for (int st = 0; st < S; st++) {
            mbar_init(barF + 8 * st, 1);
            mbar_init(barE + 8 * st, 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   /* ---- the producer ---- */
        regs_down<FA_REGS_PRODUCER>();
        if (threadIdx.x == 0) {
            mbar_expect_tx(barQ, 2 * QB);
#pragma unroll
            for (int hf = 0; hf < HD / 64; hf++)
#pragma unroll
                for (int rb = 0; rb < 2; rb++) {
                    tma_load3(sQ + hf * QHALF + rb * FB_BOX, &tq, h * HD + hf * 64, q0 + 64 * rb, b, barQ);
                    tma_load3(sDO + hf * QHALF + rb * FB_BOX, &tdo, h * HD + hf * 64, q0 + 64 * rb, b, barQ);
                }
            for (int it = 0; it < nk; it++) {
                int j = nk - 1 - it, st = it % S;
                uint32_t k = sKV0 + 2 * st * KB;
                mbar_wait(barE + 8 * st, ((it / S) & 1) ^ 1);
                mbar_expect_tx(barF + 8 * st, 2 * KB);
#pragma unroll
                for (int hf = 0; hf < HD / 64; hf++) {
                    tma_load3(k + hf * FB_BOX, &tkv, kcol + kvh * HD + hf * 64, 64 * j, b, barF + 8 * st);
                    tma_load3(k + KB + hf * FB_BOX, &tkv, kcol + (NKV + kvh) * HD + hf * 64, 64 * j, b, barF + 8 * st);
                }
            }
        }
        return;
    }
    /* ---- the consumers: warpgroup c owns the queries at positions qc .. qc+63 ---- */
    regs_up<FA_REGS_CONSUMER>();
    int c = wg - 1, tid = threadIdx.x % 128, w = tid / 32, g = tid % 32 / 4, qc = qoff + q0 + 64 * c;
    int pos[2] = {qc + w * 16 + g, qc + w * 16 + g + 8}, lr[2] = {pos[0] - qoff, pos[1] - qoff};   /* positions, rows */
    float L[2], D[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {   /* (a row past Tq: Q and dout are zeros from the map, so its dS is 0) */
        size_t at = ((size_t)b * NH + h) * Tq + lr[r];
        L[r] = lr[r] < Tq ? lse[at] * LOG2E : 0.0f;
        D[r] = lr[r] < Tq ? Dsum[at] : 0.0f;
    }
    uint32_t qa = sQ + c * FB_BOX, oa = sDO + c * FB_BOX;
    float sl2 = scale * LOG2E, s[32], dp[32], dq[HD / 2];
    uint32_t da[4][4];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq[i] = 0.0f;
    wg_keep(dq);
    mbar_wait(barQ, 0);
    for (int it = 0; it < nk; it++) {
        /* every tile runs the same products: one wholly after our queries (the last for the first consumer) is masked;
         * at an offset a tile can straddle our queries anywhere, and is masked where it holds a key after qc */
        int j = nk - 1 - it, st = it % S;
        uint32_t k = sKV0 + 2 * st * KB;
        mbar_wait(barF + 8 * st, (it / S) & 1);
        wg_fence();
        fb_rows<T, HD>(s, qa, k, QHALF, FB_BOX);        /* S = Q K^T */
        fb_rows<T, HD>(dp, oa, k + KB, QHALF, FB_BOX);  /* dP = dout V^T */
        wg_commit();
        wg_wait<0>();   /* (the previous tile's dQ too) */
        wg_keep(s);
        wg_keep(dp);
        wg_keep(dq);
        wg_keep(da);
        __syncwarp();
        if (it && tid % 32 == 0) mbar_arrive(barE + 8 * ((it - 1) % S));
        probs_and_grads<T, false, true>(s, dp, nullptr, da, L, D, qc, 64 * j, Te, sl2, scale, 64 * j + 63 > qc);
        wg_fence();
        fb_regs_times<T, HD>(dq, da, k, FB_BOX);   /* dQ += dS K, running while the next tile's S, dP are issued */
        wg_commit();
    }
    wg_wait<0>();
    wg_keep(dq);
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq[i] *= scale;   /* (dS came without it: probs_and_grads' RAW) */
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    T *y[2];
#pragma unroll
    for (int r = 0; r < 2; r++) y[r] = lr[r] < Tq ? dqkv + ((size_t)b * Tq + lr[r]) * QKV + h * HD : nullptr;
    fb_store<T, HD>(dq, pos, y, fr.on ? &fr : nullptr);
#endif
}

/* ---- the launcher ---- */
long cuda_attention_fa3_backward_launches = 0;

template <typename K> static void raise_smem(K kernel, size_t smem, size_t *raised) {
    if (*raised >= smem) return;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    *raised = smem;
}

int cuda_attention_fa3_dq_stages128 = 1;   /* HD 128, accumulating: 1 three Q/dout stages and one staged dQ tile; 2 two and two */
int cuda_attention_fa3_dq_lag = 0;   /* 1: at head dim 64 each item's dQ product issued during the next item (issue_dq, LAG); 0: at once */
int cuda_attention_fa3_dq = 0;   /* 0: the accumulator where the plan counts it (attention_backward_scratch); 1: the accumulator; 2: the sweep */
long cuda_attention_fa3_dq_fused_launches = 0;   /* 1: dQ by the second sweep (fa3_dq_kernel) instead of the dk/dv kernel's accumulator */

/* the fp32 dQ accumulator and its per-tile turn counters (zeroed here, on the stream, every call) */
static float *dq_accumulator(int B, int ntq, int NH, int HD, int **turn) {
    static void *buf = 0;
    static size_t cap = 0;
    size_t tiles = (size_t)B * NH * ntq, bytes = tiles * FB_DQ_TILE(HD);
    uint8_t *base = (uint8_t *)cuda_scratch(&buf, &cap, bytes + tiles * sizeof(int), "attention backward dQ accumulator");
    *turn = (int *)(base + bytes);
    cudaCheck(cudaMemsetAsync(*turn, 0, tiles * sizeof(int), cuda_stream));
    return (float *)base;
}

/* S: the sweep's stages (both of its kernels); SF, NSTG: the accumulating dk/dv kernel's Q/dout stages and staged dQ
 * tiles. kv NULL: the whole sequence (Tq = Tk = T, qoff 0), K and V from qkv; else the chunk of Tq queries at qoff
 * against kv's keys (Tk rows a sequence, dkv added to), always by the sweep */
template <typename T, int HD, int S, int SF, int NSTG> static void backward(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv,
                                                                           const float *lse, const float *Dsum, int B, int Tq, int qoff, int Tk,
                                                                           int NH, int NKV, const FbRope &fr) {
    int T_ = Tq, Te = qoff + Tq;   /* (T_: the whole sequence's length, where kv is NULL) */
    CUtensorMap tq = fa3_tensor_map(qkv, B, Tq, (NH + 2 * NKV) * HD, 64), tdo = fa3_tensor_map(dout, B, Tq, NH * HD, 64);
    /* at an offset the keys' map ends at the chunk's last key: the rows after it arrive as zeros and are never read
     * (kernels/attention.h: they may hold anything) */
    CUtensorMap tkv = kv ? fa3_tensor_map_rows(kv, B, Tk, Te, 2 * NKV * HD, 64) : tq;
    int kcol = kv ? 0 : NH * HD;
    float scale = 1.0f / sqrtf((float)HD);
    size_t tile = (size_t)64 * HD * 2;   /* bytes of a 64-row tile */
    size_t smem_kv = 4 * tile + 2 * S * tile + (size_t)S * 128 * 4 + 8 * (1 + 2 * S);
    size_t smem_fused = 4 * tile + 2 * SF * tile + (size_t)SF * 128 * 4 + 8 * (1 + 2 * SF) + 2 * 16384 + NSTG * FB_DQ_TILE(HD) + 8 * (4 + 2 * NSTG);
    size_t smem_q = 4 * tile + 2 * S * tile + 8 * (1 + 2 * S);
    dim3 kv_grid(B * NKV, ceil_div(Te, 128)), q_grid(B * NH, ceil_div(Tq, 128));
    if (!kv && (cuda_attention_fa3_dq == 1 || (cuda_attention_fa3_dq == 0 && attention_backward_scratch(B, T_, NH, HD, cuda_act).dq_accum))) {
        static size_t raised[2] = {0, 0};
        auto kernel = fa3_dkv_kernel<T, HD, SF, NSTG, false>;
        int lag = 0;   /* (head dim 64 only: at 128 the late product spills 128-160 bytes) */
        if constexpr (HD == 64) if ((lag = cuda_attention_fa3_dq_lag != 0)) kernel = fa3_dkv_kernel<T, HD, SF, NSTG, true>;
        raise_smem(kernel, smem_fused, &raised[lag]);
        int ntq = ceil_div(T_, 64), *turn;
        float *acc = dq_accumulator(B, ntq, NH, HD, &turn);
        kernel<<<kv_grid, FB_THREADS, smem_fused, cuda_stream>>>(tq, tdo, (T *)dqkv, lse, Dsum, T_, NH, NKV, scale, fr, acc, turn, tq, nullptr, 0,
                                                                 T_, NH * HD);
        launchCheck();
        fa3_dq_store_kernel<T, HD><<<dim3(B * NH, ntq), 128, 0, cuda_stream>>>((T *)dqkv, acc, T_, NH, NKV, scale, fr);
        launchCheck();
        cuda_attention_fa3_backward_launches++;
        cuda_attention_fa3_dq_fused_launches++;
        return;
    }
    static size_t raised_kv = 0, raised_q = 0;
    raise_smem(fa3_dkv_kernel<T, HD, S, 0>, smem_kv, &raised_kv);
    raise_smem(fa3_dq_kernel<T, HD, S>, smem_q, &raised_q);
    fa3_dkv_kernel<T, HD, S, 0><<<kv_grid, FB_THREADS, smem_kv, cuda_stream>>>(tq, tdo, (T *)dqkv, lse, Dsum, Tq, NH, NKV, scale, fr,
                                                                                    nullptr, nullptr, tkv, dkv, qoff, Tk, kcol);
    launchCheck();
    fa3_dq_kernel<T, HD, S><<<q_grid, FB_THREADS, smem_q, cuda_stream>>>(tq, tdo, (T *)dqkv, lse, Dsum, Tq, NH, NKV, scale, fr, tkv, qoff, kcol);
    launchCheck();
    cuda_attention_fa3_backward_launches++;
}

template <typename T> static void backward_as(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const float *lse,
                                              const float *Dsum, int B, int Tq, int qoff, int Tk, int NH, int NKV, int HD, const FbRope &fr) {
    if (HD == 64) backward<T, 64, 4, 4, 2>(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, qoff, Tk, NH, NKV, fr);
    else if (cuda_attention_fa3_dq_stages128 == 2) backward<T, 128, 3, 2, 2>(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, qoff, Tk, NH, NKV, fr);
    else backward<T, 128, 3, 3, 1>(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, qoff, Tk, NH, NKV, fr);
}
static void backward_any(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const float *lse, const float *Dsum,
                         int B, int Tq, int qoff, int Tk, int NH, int NKV, int HD, float rope_theta) {
    if (B <= 0 || Tq <= 0) return;
    FbRope fr;
    fr.on = rope_theta > 0;
    for (int i = 0; i < 64; i++) fr.f[i] = fr.on && i < HD / 2 ? rope_inv_freq(rope_theta, i, HD) : 0.0f;
    if (cuda_act == DTYPE_BF16) backward_as<__nv_bfloat16>(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, qoff, Tk, NH, NKV, HD, fr);
    else backward_as<__half>(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, qoff, Tk, NH, NKV, HD, fr);
}

/* attention_backward_cuda's contract after the Dsum pass, where attention_fa3_supported() holds for dqkv, qkv, dout
 * and out, on an sm_90a GPU; dq and dk leave rotated back through RoPE when rope_theta > 0 */
extern "C" void attention_backward_fa3(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum, int B, int T_,
                                       int NH, int NKV, int HD, float rope_theta) {
    backward_any(dqkv, nullptr, dout, qkv, nullptr, lse, Dsum, B, T_, 0, T_, NH, NKV, HD, rope_theta);
}
/* attention_backward_at_cuda's contract (context parallelism's chunks) after the Dsum pass (Dsum (B,NH,Tq)), where
 * attention_fa3_supported() holds for dqkv, dout, qkv, kv and out and dkv is 8-byte aligned: dq into dqkv's q part
 * and the fp32 dK|dV of keys 0 .. q0+Tq-1 added into dkv, no RoPE; the sweep's two kernels */
extern "C" void attention_backward_at_fa3(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const float *lse,
                                          const float *Dsum, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    backward_any(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, q0, Tk, NH, NKV, HD, 0.0f);
}
