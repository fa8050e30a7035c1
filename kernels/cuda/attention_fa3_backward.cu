/* kernels/cuda/attention_fa3_backward.cu — the causal GQA attention backward on
 * Hopper in FlashAttention-3's shape (warp-specialized, TMA-fed, two consumer
 * warpgroups a block), head dims 64 and 128, bf16 and fp16: a dk/dv kernel and
 * a dq kernel after attention.cu's Dsum pass, each owning what it writes (no
 * atomics: the same bits every run, which resume and the layout proofs need).
 *
 * The idea. dk/dv: a block owns 128 keys of one (sequence, KV head), 64 for
 * each consumer warpgroup, and keeps their dK and dV in registers while the
 * producer warpgroup streams, for every query head of the group, the query
 * tiles at and after the block's keys (64 rows of Q and of dout a tile, by TMA,
 * into a ring of shared-memory stages; one of its warps copies the tile's lse
 * and Dsum beside them). A consumer computes S^T = K Q^T and dP^T = V dout^T,
 * P^T = exp(S^T scale - lse) and dS^T = P^T (dP^T - Dsum) scale on the
 * registers they came back in, and accumulates dV += P^T dout and dK += dS^T Q
 * with P^T and dS^T straight from those registers as A operands. dq: the
 * forward's shape (128 queries a block, two consumers of 64), streaming K and V
 * tiles of 64 keys from the diagonal down, computing S, dP and dS again and
 * accumulating dQ += dS K. That second sweep costs two products a tile more
 * than one kernel that adds dQ with atomics, and buys run-to-run identical bits
 * and memory linear in T; docs/performance.md has the measurement.
 *
 * Within a consumer, tile i's dV/dK (or dQ) products run while tile i+1's S and
 * dP are issued; the two consumers of a block fill each other's gaps. RoPE's
 * backward is folded into the epilogues (the contract of kernels/attention.h). */
#include "attention_fa3.cuh"
#include "attention_wgmma.cuh"
#include <math.h>
extern "C" {
#include "cuda_extras.h"
}

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

/* dk, dv parts of dqkv (B,T,(NH+2*NKV)*HD) for 128 keys of one (b, kv head): grid (B*NKV, key blocks), the longest
 * (the first keys) first. tq maps qkv, tdo dout (B,T,NH*HD), both in 64-row boxes. Shared: K, V (128 rows each), then
 * stages 0..S-1 of (Q tile, dout tile), then [stage][lse, Dsum][64] floats, then the barriers. */
template <typename T, int HD, int S> __global__ void __launch_bounds__(FB_THREADS, 1)
fa3_dkv_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo, T *dqkv, const float *lse, const float *Dsum,
               int T_, int NH, int NKV, float scale, const FbRope fr) {
#if WG_ON
    WG_TILES;
    constexpr uint32_t KHALF = 2 * FB_BOX, KB = KHALF * (HD / 64), QB = FB_BOX * (HD / 64);
    uint32_t sK = tiles_base(smraw), sV = sK + KB, sQ0 = sV + KB;   /* stage st: Q at sQ0 + 2*st*QB, dout after it */
    float *LD = reinterpret_cast<float *>(smraw + 2 * KB + 2 * S * QB);
    uint32_t barKV = smem_addr(LD + S * 128), barF = barKV + 8, barE = barF + 8 * S;   /* + 8 * stage */
    int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV, G = NH / NKV, k0 = blockIdx.y * 128;
    int qt0 = k0 / 64, nq = (T_ + 63) / 64 - qt0, items = G * nq;   /* item it: head kvh*G + it/nq, query tile qt0 + it%nq */
    int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        mbar_init(barKV, 1);
        for (int st = 0; st < S; st++) {
            mbar_init(barF + 8 * st, 1 + 32);   /* the copy's arrival (with its bytes) and warp 1's 32 */
            mbar_init(barE + 8 * st, 8);        /* one arrival a consumer warp */
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   /* ---- the producer ---- */
        regs_down<24>();
        if (threadIdx.x == 0) {
            mbar_expect_tx(barKV, 2 * KB);
#pragma unroll
            for (int hf = 0; hf < HD / 64; hf++)
#pragma unroll
                for (int rb = 0; rb < 2; rb++) {
                    tma_load3(sK + hf * KHALF + rb * FB_BOX, &tq, (NH + kvh) * HD + hf * 64, k0 + 64 * rb, b, barKV);
                    tma_load3(sV + hf * KHALF + rb * FB_BOX, &tq, (NH + NKV + kvh) * HD + hf * 64, k0 + 64 * rb, b, barKV);
                }
            for (int it = 0; it < items; it++) {
                int h = kvh * G + it / nq, q0 = (qt0 + it % nq) * 64, st = it % S;
                uint32_t q = sQ0 + 2 * st * QB;
                mbar_wait(barE + 8 * st, ((it / S) & 1) ^ 1);
                mbar_expect_tx(barF + 8 * st, 2 * QB);
#pragma unroll
                for (int hf = 0; hf < HD / 64; hf++) {
                    tma_load3(q + hf * FB_BOX, &tq, h * HD + hf * 64, q0, b, barF + 8 * st);
                    tma_load3(q + QB + hf * FB_BOX, &tdo, h * HD + hf * 64, q0, b, barF + 8 * st);
                }
            }
        } else if (threadIdx.x / 32 == 1) {   /* warp 1: each item's lse and Dsum beside its tiles */
            int lane = threadIdx.x % 32;
            for (int it = 0; it < items; it++) {
                int h = kvh * G + it / nq, q0 = (qt0 + it % nq) * 64, st = it % S;
                mbar_wait(barE + 8 * st, ((it / S) & 1) ^ 1);
                float *ld = LD + st * 128;
                for (int e = lane; e < 64; e += 32) {
                    int q = q0 + e;
                    size_t at = ((size_t)b * NH + h) * T_ + q;
                    ld[e] = q < T_ ? lse[at] : 0.0f;
                    ld[64 + e] = q < T_ ? Dsum[at] : 0.0f;
                }
                mbar_arrive(barF + 8 * st);
            }
        }
        return;
    }
    /* ---- the consumers: warpgroup c owns keys kc .. kc+63 ---- */
    regs_up<240>();
    int c = wg - 1, tid = threadIdx.x % 128, w = tid / 32, g = tid % 32 / 4, kc = k0 + 64 * c;
    uint32_t ka = sK + c * FB_BOX, va = sV + c * FB_BOX;
    float sl2 = scale * LOG2E, s[32], dp[32], dk[HD / 2], dv[HD / 2];
    uint32_t pa[4][4], da[4][4];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.0f;
    wg_keep(dk);   /* (pinned here: a zero the compiler sinks into the loop would serialize the products) */
    wg_keep(dv);
    mbar_wait(barKV, 0);
    for (int it = 0; it < items; it++) {
        /* every item runs the same products (no branch around a wgmma): a tile wholly before our keys (the first of
         * each head for the second consumer) is masked to nothing */
        int q0 = (qt0 + it % nq) * 64, st = it % S;
        uint32_t q = sQ0 + 2 * st * QB;
        mbar_wait(barF + 8 * st, (it / S) & 1);
        wg_fence();
        fb_rows<T, HD>(s, ka, q, KHALF, FB_BOX);        /* S^T = K Q^T */
        fb_rows<T, HD>(dp, va, q + QB, KHALF, FB_BOX);  /* dP^T = V dout^T */
        wg_commit();
        wg_wait<0>();   /* (the previous item's dV, dK too) */
        wg_keep(s);
        wg_keep(dp);
        wg_keep(dv);
        wg_keep(dk);
        wg_keep(pa);
        wg_keep(da);
        if (it && tid % 32 == 0) mbar_arrive(barE + 8 * ((it - 1) % S));   /* this warp is done with the previous stage */
        const float *L = LD + st * 128;
        probs_and_grads<T, true>(s, dp, pa, da, L, L + 64, kc, q0, T_, sl2, scale, q0 < kc + 64 || q0 + 64 > T_);
        wg_fence();
        fb_regs_times<T, HD>(dv, pa, q + QB, FB_BOX);   /* dV += P^T dout */
        fb_regs_times<T, HD>(dk, da, q, FB_BOX);        /* dK += dS^T Q, both running while the next item's S^T, dP^T are issued */
        wg_commit();
        if constexpr (HD == 128) {   /* no registers for both at once (dK, dV are 128 a thread): the other consumer overlaps */
            wg_wait<0>();
            wg_keep(dv);
            wg_keep(dk);
        }
    }
    wg_wait<0>();
    wg_keep(dv);
    wg_keep(dk);
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    int pos[2] = {kc + w * 16 + g, kc + w * 16 + g + 8};
    T *yk[2], *yv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        yk[r] = pos[r] < T_ ? dqkv + ((size_t)b * T_ + pos[r]) * QKV + (NH + kvh) * HD : nullptr;
        yv[r] = yk[r] ? yk[r] + (size_t)NKV * HD : nullptr;
    }
    fb_store<T, HD>(dv, pos, yv, nullptr);
    fb_store<T, HD>(dk, pos, yk, fr.on ? &fr : nullptr);
#endif
}

/* dq part of dqkv for 128 queries of one (b, head): grid (B*NH, query blocks), the longest (the last queries) first.
 * Shared: Q, dout (128 rows each), then stages 0..S-1 of (K tile, V tile) of 64 keys, then the barriers. */
template <typename T, int HD, int S> __global__ void __launch_bounds__(FB_THREADS, 1)
fa3_dq_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo, T *dqkv, const float *lse, const float *Dsum,
              int T_, int NH, int NKV, float scale, const FbRope fr) {
#if WG_ON
    WG_TILES;
    constexpr uint32_t QHALF = 2 * FB_BOX, QB = QHALF * (HD / 64), KB = FB_BOX * (HD / 64);
    uint32_t sQ = tiles_base(smraw), sDO = sQ + QB, sKV0 = sDO + QB;   /* stage st: K at sKV0 + 2*st*KB, V after it */
    uint32_t barQ = sKV0 + 2 * S * KB, barF = barQ + 8, barE = barF + 8 * S;
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * 128, nkt = (T_ + 63) / 64;
    int nk = min(q0 / 64 + 2, nkt);   /* key tiles 0..nk-1, walked from the last (the diagonal) down */
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
        regs_down<24>();
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
                    tma_load3(k + hf * FB_BOX, &tq, (NH + kvh) * HD + hf * 64, 64 * j, b, barF + 8 * st);
                    tma_load3(k + KB + hf * FB_BOX, &tq, (NH + NKV + kvh) * HD + hf * 64, 64 * j, b, barF + 8 * st);
                }
            }
        }
        return;
    }
    /* ---- the consumers: warpgroup c owns queries qc .. qc+63 ---- */
    regs_up<240>();
    int c = wg - 1, tid = threadIdx.x % 128, w = tid / 32, g = tid % 32 / 4, qc = q0 + 64 * c;
    int pos[2] = {qc + w * 16 + g, qc + w * 16 + g + 8};
    float L[2], D[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        size_t at = ((size_t)b * NH + h) * T_ + pos[r];
        L[r] = pos[r] < T_ ? lse[at] * LOG2E : 0.0f;
        D[r] = pos[r] < T_ ? Dsum[at] : 0.0f;
    }
    uint32_t qa = sQ + c * FB_BOX, oa = sDO + c * FB_BOX;
    float sl2 = scale * LOG2E, s[32], dp[32], dq[HD / 2];
    uint32_t da[4][4];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq[i] = 0.0f;
    wg_keep(dq);
    mbar_wait(barQ, 0);
    for (int it = 0; it < nk; it++) {
        /* every tile runs the same products: one wholly after our queries (the last for the first consumer) is masked */
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
        if (it && tid % 32 == 0) mbar_arrive(barE + 8 * ((it - 1) % S));
        probs_and_grads<T, false>(s, dp, nullptr, da, L, D, qc, 64 * j, T_, sl2, scale, 64 * j + 63 > qc);
        wg_fence();
        fb_regs_times<T, HD>(dq, da, k, FB_BOX);   /* dQ += dS K, running while the next tile's S, dP are issued */
        wg_commit();
    }
    wg_wait<0>();
    wg_keep(dq);
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    T *y[2];
#pragma unroll
    for (int r = 0; r < 2; r++) y[r] = pos[r] < T_ ? dqkv + ((size_t)b * T_ + pos[r]) * QKV + h * HD : nullptr;
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

template <typename T, int HD, int S> static void backward(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum,
                                                          int B, int T_, int NH, int NKV, const FbRope &fr) {
    CUtensorMap tq = fa3_tensor_map(qkv, B, T_, (NH + 2 * NKV) * HD, 64), tdo = fa3_tensor_map(dout, B, T_, NH * HD, 64);
    float scale = 1.0f / sqrtf((float)HD);
    size_t tile = (size_t)64 * HD * 2;   /* bytes of a 64-row tile */
    size_t smem_kv = 4 * tile + 2 * S * tile + (size_t)S * 128 * 4 + 8 * (1 + 2 * S);
    size_t smem_q = 4 * tile + 2 * S * tile + 8 * (1 + 2 * S);
    static size_t raised_kv = 0, raised_q = 0;
    raise_smem(fa3_dkv_kernel<T, HD, S>, smem_kv, &raised_kv);
    raise_smem(fa3_dq_kernel<T, HD, S>, smem_q, &raised_q);
    fa3_dkv_kernel<T, HD, S><<<dim3(B * NKV, ceil_div(T_, 128)), FB_THREADS, smem_kv, cuda_stream>>>(tq, tdo, (T *)dqkv, lse, Dsum, T_, NH,
                                                                                                     NKV, scale, fr);
    launchCheck();
    fa3_dq_kernel<T, HD, S><<<dim3(B * NH, ceil_div(T_, 128)), FB_THREADS, smem_q, cuda_stream>>>(tq, tdo, (T *)dqkv, lse, Dsum, T_, NH,
                                                                                                  NKV, scale, fr);
    launchCheck();
    cuda_attention_fa3_backward_launches++;
}

/* attention_backward_cuda's contract after the Dsum pass, where attention_fa3_supported() holds for dqkv, qkv, dout
 * and out, on an sm_90a GPU; dq and dk leave rotated back through RoPE when rope_theta > 0 */
extern "C" void attention_backward_fa3(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum, int B, int T_,
                                       int NH, int NKV, int HD, float rope_theta) {
    if (B <= 0 || T_ <= 0) return;
    FbRope fr;
    fr.on = rope_theta > 0;
    for (int i = 0; i < 64; i++) fr.f[i] = fr.on && i < HD / 2 ? rope_inv_freq(rope_theta, i, HD) : 0.0f;
    if (cuda_act == DTYPE_BF16) {
        if (HD == 64) backward<__nv_bfloat16, 64, 4>(dqkv, dout, qkv, lse, Dsum, B, T_, NH, NKV, fr);
        else backward<__nv_bfloat16, 128, 3>(dqkv, dout, qkv, lse, Dsum, B, T_, NH, NKV, fr);
    } else {
        if (HD == 64) backward<__half, 64, 4>(dqkv, dout, qkv, lse, Dsum, B, T_, NH, NKV, fr);
        else backward<__half, 128, 3>(dqkv, dout, qkv, lse, Dsum, B, T_, NH, NKV, fr);
    }
}
