/* kernels/cuda/attention_fa3.cu — the causal GQA attention forward on Hopper in
 * FlashAttention-3's shape (LLM3D_ATTENTION=fa3): warp-specialized, TMA-fed,
 * two consumer warpgroups a block, head dims 64 and 128, bf16 and fp16. The
 * backward in this style is attention_fa3_backward.cu's.
 *
 * The idea: a block owns 128 queries of one (sequence, head) and has three
 * warpgroups. The first is the producer: it gives most of its registers back
 * (setmaxnreg) and one of its threads asks the copy engine (TMA, through a
 * tensor map over qkv seen as (B, T, columns)) for the queries once and then for
 * each key tile's K and V, 128 rows a tile, into a ring of shared-memory stages
 * (four at HD = 64, two at 128), each stage with a barrier that says K landed,
 * one that says V landed, and two that say both consumers are done with its K
 * and with its V. K is given back as soon as its scores are in registers, a
 * whole tile before V (FlashAttention-3 pipelines K and V apart the same way):
 * with two stages the next K could otherwise only be asked for once the slower
 * consumer had finished the tile, and each tile would wait for its copy.
 * The other two warpgroups are consumers of 64 query rows each, sharing every
 * K/V tile: S = Q K^T as wgmma m64n128k16 from shared memory, the online
 * softmax on the registers S came back in, and O += P V with P packed straight
 * from those registers as the A operand (m64n64 at HD = 64, m64n128 at 128).
 * Within a consumer the exponentials of one tile run under the products of the
 * tile before (as attention_wgmma.cu: S of tile j+1 and P_j V_j are issued
 * together, the wait takes S alone). The key tiles are walked from the diagonal
 * down, so the first tile is the only one masked (causality and the sequence's
 * end; the copy engine zero-fills rows past T) and the rest run unmasked.
 * Tiles of a sequence past T are never read across into the next sequence: the
 * map's middle dimension is T, its outer one the batch.
 *
 * The same kernel runs context parallelism's chunks (kernels/attention.h's
 * offset form): queries at positions qoff.. against K/V from a second map over
 * the gathered k|v that ends at the chunk's last key; a query tile can then
 * straddle two key tiles, so the first two of the walk may be masked, and a
 * query can see no key of the first (its row stays empty until the second).
 *
 * Output goes from registers to global memory (4-byte stores, as the wgmma
 * forward). The grid is a block a work item (query tile of a sequence and
 * head) or, up to T = 4096 (FA3_PERSIST_MAX_T, measured), one block an SM
 * walking the items in a zigzag, so that the next item's copies run under this
 * one's output. Not yet here: a TMA store of O. The maps over rows
 * (fa3_tensor_map, fa3_tensor_map_rows) are the backward's too. */
#include "attention_fa3.cuh"
#include "attention_wgmma.cuh"
#include <math.h>
#include <stdio.h>
extern "C" {
#include "cuda_extras.h"
}

#define FA3_BM 128   /* queries a block: two consumer warpgroups of 64 */
#define FA3_BN 128   /* keys a tile */
#define FA3_THREADS 384
#define FA3_TURN 1       /* named barriers 1 and 2: consumer 0's and consumer 1's turn to issue products (ping-pong) */

/* scores s (64 rows x 128 keys from k0) -> probabilities packed as the A operand pa (8 k-steps) of P @ V, the running
 * max m (raw scores) and partial sums l of this thread's rows updated, corr = how much the old output shrinks; mask:
 * keys past the row or the sequence's end are out */
template <typename T> __device__ __forceinline__ void fa3_softmax(float s[64], uint32_t pa[8][4], float m[2], float l[2], float corr[2],
                                                                  int k0, const int row[2], int T_, float sl2, bool mask) {
    int t = threadIdx.x % 4;
    if (mask) {
#pragma unroll
        for (int i = 0; i < 64; i++) {
            int col = k0 + i / 4 * 8 + 2 * t + (i & 1);
            if (col > row[i % 4 / 2] || col >= T_) s[i] = -INFINITY;
        }
    }
    float mx[2] = {m[0], m[1]}, ms[2], sum[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 64; i++) mx[i % 4 / 2] = fmaxf(mx[i % 4 / 2], s[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        /* a row with no key yet (at an offset, the first tile can lie wholly after a query): nothing to add, m stays
         * -inf; else m = -inf before the first tile gives corr 0 */
        float mu = mask && mx[r] == -INFINITY ? 0.0f : mx[r];
        corr[r] = ex2((m[r] - mu) * sl2);
        m[r] = mx[r];
        ms[r] = mu * sl2;
    }
#pragma unroll
    for (int i = 0; i < 64; i++) {
        s[i] = ex2(fmaf(s[i], sl2, -ms[i % 4 / 2]));
        sum[i % 4 / 2] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r];
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        pa[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

/* s = Q (64 rows at q, HD columns in 64-column halves qhalf bytes apart) @ K^T (128 rows at k, halves khalf apart) */
template <typename T, int HD> __device__ __forceinline__ void fa3_scores(float s[64], uint32_t q, uint32_t k, uint32_t qhalf, uint32_t khalf) {
    fa_ss128_first<T>(s, fa_desc(q, 0), fa_desc(k, 0));
#pragma unroll
    for (int kk = 1; kk < HD / 16; kk++) {
        uint32_t hf = kk / 4, col = 32 * (kk % 4);
        fa_ss128<T>(s, fa_desc(q + hf * qhalf + col, 0), fa_desc(k + hf * khalf + col, 0), 1);
    }
}
/* o += P (64 x 128 in registers) @ V (128 rows at v, HD columns in halves vhalf bytes apart): 8 k-steps of 16 keys */
template <typename T, int HD> __device__ __forceinline__ void fa3_pv(float o[HD / 2], const uint32_t pa[8][4], uint32_t v, uint32_t vhalf) {
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        if constexpr (HD == 64) wg_rs<T>(o, pa[kk], fa_desc(v + 2048 * kk, vhalf));
        else fa_rs128<T>(o, pa[kk], fa_desc(v + 2048 * kk, vhalf));
    }
}
/* the block's n-th work item: rounds of gridDim.x items, walked forward in even rounds and backward in odd ones, so
 * that on a persistent grid, where items shrink with their index (the longest first), every block's items add up to
 * about the same work (at T = 8192, B = 2, 132 SMs a plain stride gave block 0 8% more than the average, the zigzag
 * 0.2%; the persistent grid with the stride was 4-8% slower there, 2026-12-08). Only the last round is partial, so
 * the first n past the items ends the walk; a grid of a block an item has one round. */
__device__ __forceinline__ int fa3_item(int n) {
    return n * gridDim.x + (n & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
}
template <int N> __device__ __forceinline__ void fa3_keep(uint32_t (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < 4 * N; i++) asm volatile("" : "+r"(a[i / 4][i % 4])::"memory");
}

/* out (B,Tq,NH*HD), lse (B,NH,Tq) from the queries of qkv (B,Tq,(NH+2*NKV)*HD), read through tq, at positions
 * qoff .. qoff+Tq-1 against the keys 0 .. Tk-1 read through tkv, K of KV head g at column kcol + g*HD and its V at
 * kcol + (NKV+g)*HD (both maps' boxes: 64 columns x 128 rows x 1 sequence). The whole sequence: tkv = tq, kcol =
 * NH*HD, qoff = 0, Tk = Tq; a chunk at an offset (kernels/attention.h's offset form): tkv over kv (B,Tk,2*NKV*HD),
 * kcol = 0. Work items: the BNH = B*NH (sequence, head) pairs times the query tiles, item i = query tile
 * ntq-1 - i/BNH of pair i%BNH (the last, longest tiles first); block x takes one item a round (fa3_item). A grid of
 * one block an item runs each once; a persistent grid (one block an SM, where cuda_attention_fa3_persistent says) walks them,
 * its producer copying the next item's Q and first K/V tiles while the consumers write this one's output.
 * The K/V ring's stages and phases run on across items, and Q has two buffers (item n's is n % 2), so the next
 * item's queries can be copied while this one's are still read. Shared: Q's two buffers (each two 64-column halves
 * of 128 rows), then K of stages 0..S-1, V of stages 0..S-1, then the barriers. kearly = 1
 * (cuda_attention_fa3_early_k): a stage's K is given back when its scores are in registers; 0: with its V, once
 * the tile's P V is done (as before 2026-12-07, kept to measure the difference). */
template <typename T, int HD, int S, bool PP> __global__ void __launch_bounds__(FA3_THREADS, 1)
fa3_forward_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tkv, T *out, float *lse, int Tq, int qoff,
                   int Tk, int BNH, int NH, int NKV, int kcol, float scale, int kearly) {
#if WG_ON
    WG_TILES;
    constexpr uint32_t HALF_Q = FA3_BM * 128, HALF_K = FA3_BN * 128;   /* bytes of one 64-column half */
    constexpr uint32_t QBYTES = HALF_Q * (HD / 64), KBYTES = HALF_K * (HD / 64);
    uint32_t sQ = tiles_base(smraw), sK = sQ + 2 * QBYTES, sV = sK + S * KBYTES, bars = sV + S * KBYTES;
    /* barQ + 8 * buffer: Q landed, barQE + 8 * buffer: the consumers are done with it; barK + 8 * stage, ...: K landed,
     * V landed, the consumers are done with K (barEK) and with V (barEV) */
    uint32_t barQ = bars, barQE = bars + 16, barK = bars + 32, barV = barK + 8 * S, barEK = barV + 8 * S, barEV = barEK + 8 * S;
    int ntq = (Tq + FA3_BM - 1) / FA3_BM, items = ntq * BNH;
    int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int qb = 0; qb < 2; qb++) {
            mbar_init(barQ + 8 * qb, 1);
            mbar_init(barQE + 8 * qb, 8);   /* one arrival a consumer warp */
        }
        for (int st = 0; st < S; st++) {
            mbar_init(barK + 8 * st, 1);
            mbar_init(barV + 8 * st, 1);
            mbar_init(barEK + 8 * st, 8);
            mbar_init(barEV + 8 * st, 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   /* ---- the producer ---- */
        regs_down<FA_REGS_PRODUCER>();
        if (threadIdx.x == 0) {
            int u = 0;   /* K/V tiles copied so far: stage u % S, phase (u / S) & 1 */
            for (int n = 0, item; (item = fa3_item(n)) < items; n++) {
                int bh = item % BNH, b = bh / NH, h = bh % NH, kvh = h / (NH / NKV), q0 = (ntq - 1 - item / BNH) * FA3_BM;
                int nk = (qoff + min(q0 + FA3_BM, Tq) - 1) / FA3_BN + 1;
                uint32_t qb = n & 1, bq = barQ + 8 * qb;
                mbar_wait(barQE + 8 * qb, ((n >> 1) & 1) ^ 1);   /* the item before last's queries are done with */
                mbar_expect_tx(bq, QBYTES);
#pragma unroll
                for (int hf = 0; hf < HD / 64; hf++) tma_load3(sQ + qb * QBYTES + hf * HALF_Q, &tq, h * HD + hf * 64, q0, b, bq);
                for (int it = 0; it < nk; it++, u++) {
                    int j = nk - 1 - it, st = u % S, ph = ((u / S) & 1) ^ 1;
                    mbar_wait(barEK + 8 * st, ph);
                    mbar_expect_tx(barK + 8 * st, KBYTES);
#pragma unroll
                    for (int hf = 0; hf < HD / 64; hf++)
                        tma_load3(sK + st * KBYTES + hf * HALF_K, &tkv, kcol + kvh * HD + hf * 64, j * FA3_BN, b, barK + 8 * st);
                    mbar_wait(barEV + 8 * st, ph);
                    mbar_expect_tx(barV + 8 * st, KBYTES);
#pragma unroll
                    for (int hf = 0; hf < HD / 64; hf++)
                        tma_load3(sV + st * KBYTES + hf * HALF_K, &tkv, kcol + (NKV + kvh) * HD + hf * 64, j * FA3_BN, b, barV + 8 * st);
                }
            }
        }
        return;
    }
    /* ---- the consumers: warpgroup c owns query rows q0 + 64c .. q0 + 64c + 63 of each item ---- */
    regs_up<FA_REGS_CONSUMER>();
    int c = wg - 1, tid = threadIdx.x % 128, w = tid / 32, g = tid % 32 / 4, t = tid % 4;
    bool lane0 = tid % 32 == 0;
    float sl2 = scale * LOG2E;
    int u = 0;   /* K/V tiles consumed so far, as the producer counts them */
    for (int n = 0, item; (item = fa3_item(n)) < items; n++) {
        int bh = item % BNH, b = bh / NH, h = bh % NH, q0 = (ntq - 1 - item / BNH) * FA3_BM, g0 = qoff + q0;
        /* key tiles 0..nk-1: the last holds the tile's last query's own key. At qoff = 0 (BM = BN) it is the diagonal
         * tile and the only one masked; at an offset the tile's queries can straddle two key tiles, both masked */
        int nk = (qoff + min(q0 + FA3_BM, Tq) - 1) / FA3_BN + 1;
        int row[2] = {g0 + 64 * c + 16 * w + g, g0 + 64 * c + 16 * w + g + 8};   /* positions in the sequence */
        float s[64], o[HD / 2], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, corr[2];
        uint32_t pa[8][4], pn[8][4];
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] = 0;
        int st0 = u % S, qb = n & 1;
        uint32_t qa = sQ + qb * QBYTES + c * 64 * 128;   /* this consumer's 64 rows of the item's queries */
        mbar_wait(barQ + 8 * qb, (n >> 1) & 1);
        mbar_wait(barK + 8 * st0, (u / S) & 1);
        if (PP && c == 1) named_arrive(FA3_TURN, 256);   /* consumer 0 issues first */
        if (PP) named_sync(FA3_TURN + c, 256);
        wg_fence();
        fa3_scores<T, HD>(s, qa, sK + st0 * KBYTES, HALF_Q, HALF_K);   /* the diagonal tile first, the only one masked */
        wg_commit();
        if (PP) named_arrive(FA3_TURN + 1 - c, 256);
        wg_wait<0>();
        wg_keep(s);
        if (kearly && lane0) mbar_arrive(barEK + 8 * st0);   /* the first tile's K is done with */
        fa3_softmax<T>(s, pa, m, l, corr, (nk - 1) * FA3_BN, row, Tk, sl2, true);
        for (int it = 0; it < nk; it++) {
            bool more = it + 1 < nk;
            int st = (u + it) % S, sn = (u + it + 1) % S;
            /* the last iteration scores Q against its own V tile, unused: every iteration issues the same products (no
             * branch around a wgmma), and this stage's V is still this consumer's (its K may already hold the next
             * item's keys) */
            uint32_t knext = more ? sK + sn * KBYTES : sV + st * KBYTES;
            if (more) mbar_wait(barK + 8 * sn, ((u + it + 1) / S) & 1);
            mbar_wait(barV + 8 * st, ((u + it) / S) & 1);
            if (PP) named_sync(FA3_TURN + c, 256);
            wg_fence();
            fa3_scores<T, HD>(s, qa, knext, HALF_Q, HALF_K);   /* scores of the next tile */
            wg_commit();
            fa3_pv<T, HD>(o, pa, sV + st * KBYTES, HALF_K);     /* o += P V of this one, still running while ... */
            wg_commit();
            if (PP && (c == 0 || more)) named_arrive(FA3_TURN + 1 - c, 256);   /* (consumer 1's last turn is never waited for) */
            wg_wait<1>();
            wg_keep(s);
            if (kearly && more && lane0) mbar_arrive(barEK + 8 * sn);   /* the next tile's K is done with */
            /* ... these run; a tile is masked where it holds a key after the block's first query (never at qoff = 0) */
            if (more) fa3_softmax<T>(s, pn, m, l, corr, (nk - 2 - it) * FA3_BN, row, Tk, sl2, (nk - 1 - it) * FA3_BN > g0 + 1);
            wg_wait<0>();
            wg_keep(o);
            fa3_keep(pa);
            if (lane0) {   /* this warp is done with the stage's V (and, kearly = 0, its K) */
                mbar_arrive(barEV + 8 * st);
                if (!kearly) mbar_arrive(barEK + 8 * st);
            }
            if (more) {
#pragma unroll
                for (int i = 0; i < HD / 2; i++) o[i] *= corr[i % 4 / 2];
#pragma unroll
                for (int i = 0; i < 32; i++) pa[i / 4][i % 4] = pn[i / 4][i % 4];
            }
        }
        u += nk;
        if (lane0) mbar_arrive(barQE + 8 * qb);   /* this warp is done with the buffer: the producer may refill it */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            int tr = row[r] - qoff;   /* the query's row in the chunk */
            if (tr >= Tq) continue;
            T *y = out + ((size_t)b * Tq + tr) * NH * HD + h * HD;
            float inv = 1.0f / l[r];
#pragma unroll
            for (int nt = 0; nt < HD / 8; nt++)
                *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(o[4 * nt + 2 * r] * inv, o[4 * nt + 2 * r + 1] * inv);
            if (t == 0) lse[((size_t)b * NH + h) * Tq + tr] = m[r] * scale + logf(l[r]);
        }
    }
#endif
}

/* ---- the launcher ---- */
typedef CUresult (*EncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* the map over a (B, T, cols) tensor of 2-byte values seen as (columns, T, B): boxes of 64 columns (128 bytes, the
 * swizzle's width) x box_rows rows x 1 sequence, written into shared memory in the 128-byte swizzle; rows past T
 * arrive as zeros, and a box never reaches into the next sequence. The backward (attention_fa3_backward.cu) maps
 * qkv and dout with it too. */
static EncodeTiled encoder(void) {
    static EncodeTiled encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult found;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !encode)
            die("attention (fa3): the CUDA driver has no cuTensorMapEncodeTiled\n  hint: LLM3D_ATTENTION=wgmma runs the other Hopper kernels");
    }
    return encode;
}
/* the map over the first `rows` rows of each of B sequences of T_ rows (rows past `rows` arrive as zeros too) */
CUtensorMap fa3_tensor_map_rows(const void *base, int B, int T_, int rows, int cols, int box_rows) {
    EncodeTiled encode = encoder();
    CUtensorMap tm;
    cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)B};
    cuuint64_t strides[2] = {(cuuint64_t)cols * 2, (cuuint64_t)cols * 2 * T_};
    cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1}, estride[3] = {1, 1, 1};
    CUresult r = encode(&tm, cuda_act == DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, (void *)base,
                        dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) die("attention (fa3): cuTensorMapEncodeTiled failed (%d) for B=%d T=%d columns=%d", (int)r, B, T_, cols);
    return tm;
}
CUtensorMap fa3_tensor_map(const void *base, int B, int T_, int cols, int box_rows) { return fa3_tensor_map_rows(base, B, T_, T_, cols, box_rows); }
long cuda_attention_fa3_launches = 0;

int cuda_attention_fa3_pingpong = 1;
int cuda_attention_fa3_early_k = 1;
/* 0: the persistent grid up to FA3_PERSIST_MAX_T queries, a block an item past it; 1: always persistent; 2: never.
 * H100, 2026-12-08 (bench_attention, ~16k tokens a call; before fa3_item's zigzag): persistent against a block an item,
 * TFLOP/s, HD 64: 230/204 at 1k, 294/275 at 2k, 341/339 at 4k, 365/381 at 8k, 385/405 at 16k; HD 128: 353/319,
 * 462/435, 532/525, 550/597, 596/633. At short T a block's work is a few key tiles, and the next item's Q and first
 * K/V copied under this one's output pay; at long T it gained nothing and its fixed walk left some SMs idle at the end. */
#define FA3_PERSIST_MAX_T 4096
int cuda_attention_fa3_persistent = 0;
long cuda_attention_fa3_persistent_launches = 0;

template <typename T, int HD, int S, bool PP> static void launch_as(const CUtensorMap &tq, const CUtensorMap &tkv, void *out, float *lse,
                                                                     int B, int Tq, int qoff, int Tk, int NH, int NKV, int kcol) {
    size_t smem = 2 * (size_t)FA3_BM * HD * 2 + 2 * S * (size_t)FA3_BN * HD * 2 + 8 * (4 + 4 * S);
    static size_t raised = 0;
    static int sms = 0;
    if (raised < smem) {
        cudaCheck(cudaFuncSetAttribute(fa3_forward_kernel<T, HD, S, PP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        raised = smem;
    }
    if (!sms) {
        int dev;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    int persistent = cuda_attention_fa3_persistent == 1 || (cuda_attention_fa3_persistent == 0 && Tq <= FA3_PERSIST_MAX_T);
    int items = ceil_div(Tq, FA3_BM) * B * NH, grid = persistent ? min(items, sms) : items;   /* one block an SM */
    cuda_attention_fa3_persistent_launches += persistent;
    fa3_forward_kernel<T, HD, S, PP><<<grid, FA3_THREADS, smem, cuda_stream>>>(tq, tkv, (T *)out, lse, Tq, qoff, Tk, B * NH, NH, NKV, kcol,
                                                                             1.0f / sqrtf((float)HD), cuda_attention_fa3_early_k);
    launchCheck();
}
/* kv NULL: the whole sequence, K and V from qkv; else the chunk of Tq queries at qoff against kv's Tk keys */
template <typename T, int HD, int S> static void launch(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int qoff,
                                                        int Tk_all, int NH, int NKV) {
    int Tk = Tk_all;
    CUtensorMap tq = fa3_tensor_map(qkv, B, Tq, (NH + 2 * NKV) * HD, FA3_BN);
    /* at an offset the map ends at the chunk's last key: the tiles past it arrive as zeros, as past a sequence's end
     * (kernels/attention.h: the keys after the chunk are never read, and may hold anything) */
    if (kv) Tk = qoff + Tq;
    CUtensorMap tkv = kv ? fa3_tensor_map_rows(kv, B, Tk_all, Tk, 2 * NKV * HD, FA3_BN) : tq;
    int kcol = kv ? 0 : NH * HD;
    if (cuda_attention_fa3_pingpong) launch_as<T, HD, S, true>(tq, tkv, out, lse, B, Tq, qoff, Tk, NH, NKV, kcol);
    else launch_as<T, HD, S, false>(tq, tkv, out, lse, B, Tq, qoff, Tk, NH, NKV, kcol);
    cuda_attention_fa3_launches++;
}
static void launch_any(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int qoff, int Tk, int NH, int NKV, int HD) {
    if (B <= 0 || Tq <= 0) return;
    if (cuda_act == DTYPE_BF16) {
        if (HD == 64) launch<__nv_bfloat16, 64, 4>(out, lse, qkv, kv, B, Tq, qoff, Tk, NH, NKV);
        else launch<__nv_bfloat16, 128, 2>(out, lse, qkv, kv, B, Tq, qoff, Tk, NH, NKV);
    } else {
        if (HD == 64) launch<__half, 64, 4>(out, lse, qkv, kv, B, Tq, qoff, Tk, NH, NKV);
        else launch<__half, 128, 2>(out, lse, qkv, kv, B, Tq, qoff, Tk, NH, NKV);
    }
}

/* 1 when this forward takes the shape: bf16/fp16, HD 64 or 128, 16-byte aligned tensors (the map's base and rows) */
extern "C" int attention_fa3_supported(int HD, const void *out, const void *qkv) {
    return cuda_act != DTYPE_FP32 && (HD == 64 || HD == 128) && ((uintptr_t)out | (uintptr_t)qkv) % 16 == 0;
}
/* attention_forward_cuda's contract; attention_fa3_supported() first, and attention_wgmma_available() */
extern "C" void attention_forward_fa3(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV, int HD) {
    launch_any(out, lse, qkv, NULL, B, T_, 0, T_, NH, NKV, HD);
}
/* attention_forward_at_cuda's contract (context parallelism's chunks); attention_fa3_supported() first, for kv too */
extern "C" void attention_forward_at_fa3(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int q0, int Tk, int NH,
                                         int NKV, int HD) {
    launch_any(out, lse, qkv, kv, B, Tq, q0, Tk, NH, NKV, HD);
}
