/* kernels/cuda/attention_mma.cu — the fast path of causal GQA attention for
 * bf16 and fp16 with HD = 64: flash attention 2 on the tensor cores through
 * mma.sync m16n8k16 (fp32 accumulators), q, k, v read in place from qkv.
 *
 * The idea: every product is X (m x k) @ Y (k x n) with X held as row-major
 * "A fragments" in registers and Y staged in shared memory, either as n rows of
 * contiguous k (read by ldmatrix) or k-major (v in P @ V, k in dS @ K, q and
 * dout in the dk/dv products; read transposed by ldmatrix .trans). Each warp
 * owns 16 rows (queries in the forward and the dq kernel, keys in the dk/dv
 * kernel) held in registers for the whole block; the block streams tiles of 64
 * of the other side through shared memory with cp.async, two stages deep, so
 * the next tile is in flight while the tensor cores work on this one. Scores
 * stay in registers and are reused as the A operand of the next product
 * (P @ V, dS @ K, ...). Only tiles that cross the diagonal (or the end T) are
 * masked; a warp skips a tile that is wholly above its diagonal. Blocks are
 * launched heaviest first (the tile index is the slow grid dimension) so the
 * causal triangle's long rows do not end up alone at the tail of the grid.
 * Template knobs: NW warps a block (16*NW rows), MINB blocks per SM the
 * registers are capped for, SPLIT parts the streamed tile is handled in (two
 * halves keep fewer scores live, which is what lets the backward fit 3 blocks).
 *
 * The backward is two kernels that each own what they write (dq per query
 * tile; dk, dv per key tile summed over the G query heads of the KV head), so
 * there are no atomics and the results are deterministic. The dq kernel also
 * computes Dsum = rowwise dout . out for its queries in its prologue (out staged
 * beside dout) and stores it for the dk/dv kernel: no separate pass over dout
 * and out (0.048 ms at l124m). Rows and keys past T
 * are zero-filled and masked, so any T works.
 *
 * The same kernels run the offset form of kernels/attention.h (context
 * parallelism): FaShape says where the rows are — Tq queries of qkv at
 * positions q0.., keys and values in a buffer of their own (qkv itself for the
 * whole sequence) — and the dk/dv kernel ADDS into an fp32 dkv instead of
 * storing into dqkv. Positions in the masks are global, rows in memory local;
 * the whole-sequence form is q0 = 0, Tq = Tk = T, kv = qkv. */
#include "common.cuh"
#include "tensor_core.cuh"
#include <math.h>
extern "C" {
#include "../attention.h"
}

#define FA_HD 64                 /* head dim of this path */
#define FA_BN 64                 /* rows of a streamed tile (keys, or queries in the dk/dv kernel) */
#define FA_LD (FA_HD + 8)        /* shared row pitch in elements: +16 bytes spreads the banks */
#define FA_TILE (FA_BN * FA_LD)  /* elements of one staged tile */

/* ---- fragments ---------------------------------------------------------------- */
/* c (16x8 fp32) += a (16x16) @ b (16x8) */
template <typename T> __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* A fragment of rows r0..r0+15, k0..k0+15 of a row-major shared matrix */
template <typename T> __device__ __forceinline__ void load_a(uint32_t a[4], const T *M, int r0, int k0, int ld) {
    int l = threadIdx.x % 32;
    uint32_t addr = smem_addr(M + (r0 + l % 16) * ld + k0 + (l / 16) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(addr));
}
/* B fragments of two n-tiles (n0, n0+8) over k0..k0+15 from a shared matrix stored n-major (row n holds its k contiguous) */
template <typename T> __device__ __forceinline__ void load_b2(uint32_t b0[2], uint32_t b1[2], const T *M, int n0, int k0, int ld) {
    int l = threadIdx.x % 32;
    uint32_t addr = smem_addr(M + (n0 + (l / 16) * 8 + l % 8) * ld + k0 + (l / 8) % 2 * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b0[0]), "=r"(b0[1]), "=r"(b1[0]), "=r"(b1[1]) : "r"(addr));
}
/* B fragments of two n-tiles (n0, n0+8) over k0..k0+15 from a shared matrix stored k-major (row k holds
 * its n contiguous, as v, k, q and dout tiles are): ldmatrix .trans transposes on the way */
template <typename T> __device__ __forceinline__ void load_bt2(uint32_t b0[2], uint32_t b1[2], const T *M, int k0, int n0, int ld) {
    int l = threadIdx.x % 32;
    uint32_t addr = smem_addr(M + (k0 + l % 16) * ld + n0 + (l / 16) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b0[0]), "=r"(b0[1]), "=r"(b1[0]), "=r"(b1[1]) : "r"(addr));
}
/* scores of 16 rows (C fragments of 8 columns each) as the A operand over k-step kk (columns 16kk..16kk+15) */
template <typename T> __device__ __forceinline__ void scores_as_a(uint32_t a[4], const float s[][4], int kk) {
    a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}
/* s (16 x 8NT) = a (16 x 64, 4 k-steps of A fragments) @ M^T, M staged rows (8NT, FA_LD) of contiguous k */
template <typename T, int NT> __device__ __forceinline__ void rows_times_tile(float s[NT][4], const uint32_t a[FA_HD / 16][4], const T *M) {
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++)
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b0[2], b1[2];
            load_b2(b0, b1, M, nt * 8, kk * 16, FA_LD);
            mma<T>(s[nt], a[kk], b0);
            mma<T>(s[nt + 1], a[kk], b1);
        }
}
/* acc (16 x 64) += p (16 x 8NT scores) @ M, M staged rows (8NT, FA_LD) read k-major */
template <typename T, int NT> __device__ __forceinline__ void scores_times_tile(float acc[FA_HD / 8][4], const float p[NT][4], const T *M) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[4];
        scores_as_a<T>(a, p, kk);
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt += 2) {
            uint32_t b0[2], b1[2];
            load_bt2(b0, b1, M, kk * 16, nt * 8, FA_LD);
            mma<T>(acc[nt], a, b0);
            mma<T>(acc[nt + 1], a, b1);
        }
    }
}

/* ---- asynchronous tile loads (cp.async, tensor_core.cuh) ---------------------------- */
/* rows r0..r0+nrows-1 of a (rows, stride) global tensor into shared (nrows, FA_LD); rows >= nvalid are zero */
template <typename T> __device__ __forceinline__ void load_rows_async(T *dst, const T *src, int r0, int nrows, int nvalid, size_t stride) {
    for (int e = threadIdx.x; e < nrows * FA_HD / 8; e += blockDim.x) {
        int r = e / (FA_HD / 8), c = e % (FA_HD / 8) * 8;
        bool ok = r0 + r < nvalid;
        cp_async16(dst + r * FA_LD + c, src + (ok ? (size_t)(r0 + r) * stride + c : 0), ok);
    }
}

/* Where a kernel's rows are: Tq queries (rows of qkv, q part) at positions q0 .. q0+Tq-1, keys 0 .. Tk-1 in rows of
 * kv_stride elements (k of KV head 0 at column k_col, v at v_col); keys from q0+Tq on are never read (the end) */
struct FaShape {
    int Tq, q0, Tk;
    size_t kv_stride;
    int k_col, v_col;
    __host__ __device__ int end() const { return q0 + Tq; }
};

/* ---- forward ---------------------------------------------------------------------- */
/* out (B,Tq,NH*HD), lse (B,NH,Tq) from the queries of qkv (B,Tq,(NH+2*NKV)*HD) and the keys of kv (FaShape);
 * block = 16*NW queries of one (b, h); grid (B*NH, query tiles), the last (longest) query tile first */
template <typename T, int NW> __global__ void __launch_bounds__(NW * 32) flash_forward_kernel(T *out, float *lse, const T *qkv, const T *kv,
                                                                                          FaShape sh, int NH, int NKV, float scale) {
    constexpr int BQ = 16 * NW;
    static_assert(BQ <= 2 * FA_BN, "q is staged in stage 1 (two tiles)");
    __shared__ __align__(128) T sm[4 * FA_TILE];   /* K, V of stage 0, K, V of stage 1; q first passes through stage 1 */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int lq0 = (gridDim.y - 1 - blockIdx.y) * BQ, q0 = sh.q0 + lq0, end = sh.end();   /* local row, global position */
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * sh.Tq * QKV, *kbase = kv + (size_t)b * sh.Tk * sh.kv_stride;
    const T *Kg = kbase + sh.k_col + kvh * FA_HD, *Vg = kbase + sh.v_col + kvh * FA_HD;
    float sl2 = scale * LOG2E;
    int nk = (min(q0 + BQ, end) + FA_BN - 1) / FA_BN;   /* key tiles this block sees */
    load_rows_async<T>(sm + 2 * FA_TILE, base + h * FA_HD, lq0, BQ, sh.Tq, QKV);
    cp_commit();
    load_rows_async<T>(sm, Kg, 0, FA_BN, end, sh.kv_stride);
    load_rows_async<T>(sm + FA_TILE, Vg, 0, FA_BN, end, sh.kv_stride);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    uint32_t qa[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) load_a(qa[kk], sm + 2 * FA_TILE, w * 16, kk * 16, FA_LD);
    __syncthreads();
    float o[FA_HD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};   /* m: running max of the raw scores */
    int r0 = q0 + w * 16, row[2] = {r0 + g, r0 + g + 8};
    for (int j = 0; j < nk; j++) {
        int k0 = j * FA_BN;
        if (j + 1 < nk) {   /* prefetch tile j+1 into the other stage (freed by the barrier closing iteration j-1) */
            T *st = sm + ((j + 1) & 1) * 2 * FA_TILE;
            load_rows_async<T>(st, Kg, k0 + FA_BN, FA_BN, end, sh.kv_stride);
            load_rows_async<T>(st + FA_TILE, Vg, k0 + FA_BN, FA_BN, end, sh.kv_stride);
        }
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const T *Ks = sm + (j & 1) * 2 * FA_TILE, *Vs = Ks + FA_TILE;
        if (k0 <= r0 + 15) {   /* else every key of the tile is after every row of this warp */
            float s[8][4] = {};
            rows_times_tile<T, 8>(s, qa, Ks);
            if (k0 + FA_BN - 1 > r0 || k0 + FA_BN > end) {   /* the tile crosses the diagonal or the end: mask */
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int col = k0 + nt * 8 + 2 * t + (e & 1);
                        if (col > row[e / 2] || col >= end) s[nt][e] = -INFINITY;
                    }
            }
            float mx[2] = {m[0], m[1]}, corr[2], ms[2], sum[2] = {0, 0};
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                corr[r] = exp2f((m[r] - mx[r]) * sl2);   /* m = -inf on the first tile: 0 (mx is finite: key 0 is seen) */
                m[r] = mx[r];
                ms[r] = mx[r] * sl2;
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = exp2f(fmaf(s[nt][e], sl2, -ms[e / 2]));
                    sum[e / 2] += s[nt][e];
                }
#pragma unroll
            for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r];   /* per-thread partial sums: reduced at the end */
#pragma unroll
            for (int nt = 0; nt < FA_HD / 8; nt++) { o[nt][0] *= corr[0]; o[nt][1] *= corr[0]; o[nt][2] *= corr[1]; o[nt][3] *= corr[1]; }
            scores_times_tile<T, 8>(o, s, Vs);   /* o += P @ V */
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        if (row[r] >= end) continue;
        int lr = row[r] - sh.q0;   /* the local row */
        T *y = out + ((size_t)b * sh.Tq + lr) * NH * FA_HD + h * FA_HD;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++)
            *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
        if (t == 0) lse[((size_t)b * NH + h) * sh.Tq + lr] = m[r] * scale + logf(l[r]);
    }
}

/* ---- backward --------------------------------------------------------------------- */
/* dq part of dqkv (B,Tq,QKV): block = 16*NW queries of one (b, h), key tiles 0..the diagonal; grid (B*NH, query tiles),
 * longest first */
template <typename T, int NW, int MINB, int SPLIT> __global__ void __launch_bounds__(NW * 32, MINB) flash_backward_dq_kernel(T *dqkv, const T *dout, const T *qkv,
                                                                                              const T *kv, const T *out, const float *lse,
                                                                                              float *Dsum, FaShape sh, int NH, int NKV,
                                                                                              float scale) {
    constexpr int BQ = 16 * NW;
    static_assert(BQ <= FA_BN, "q, out and dout are staged in tiles 0, 1 and 2");
    __shared__ __align__(128) T sm[4 * FA_TILE];   /* K, V of stage 0, K, V of stage 1; q, out and dout first pass through */
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    int lq0 = (gridDim.y - 1 - blockIdx.y) * BQ, q0 = sh.q0 + lq0, end = sh.end(), Tq = sh.Tq;   /* local row, global position */
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * Tq * QKV, *kbase = kv + (size_t)b * sh.Tk * sh.kv_stride;
    const T *Kg = kbase + sh.k_col + kvh * FA_HD, *Vg = kbase + sh.v_col + kvh * FA_HD;
    float sl2 = scale * LOG2E;
    int nk = (min(q0 + BQ, end) + FA_BN - 1) / FA_BN;
    /* q and dout rows of this warp into registers, staged through the tiles */
    load_rows_async<T>(sm, base + h * FA_HD, lq0, BQ, Tq, QKV);
    load_rows_async<T>(sm + 2 * FA_TILE, dout + (size_t)b * Tq * NH * FA_HD + h * FA_HD, lq0, BQ, Tq, (size_t)NH * FA_HD);
    if (out) load_rows_async<T>(sm + FA_TILE, out + (size_t)b * Tq * NH * FA_HD + h * FA_HD, lq0, BQ, Tq, (size_t)NH * FA_HD);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    uint32_t qa[FA_HD / 16][4], da[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) {
        load_a(qa[kk], sm, w * 16, kk * 16, FA_LD);
        load_a(da[kk], sm + 2 * FA_TILE, w * 16, kk * 16, FA_LD);
    }
    int r0 = q0 + w * 16, row[2] = {r0 + g, r0 + g + 8}, lrow[2] = {row[0] - sh.q0, row[1] - sh.q0};   /* global, local */
    float L[2], D[2];
    if (out) {   /* D = rowwise dout . out of this warp's 16 rows: lane l sums half l%2 of row l/2 (rows past T are zeros) */
        int l = threadIdx.x % 32, rr = w * 16 + l / 2;
        const T *dy = sm + 2 * FA_TILE + rr * FA_LD + (l % 2) * 32, *y = sm + FA_TILE + rr * FA_LD + (l % 2) * 32;
        float d = 0;
#pragma unroll
        for (int c = 0; c < 32; c += 8) {
            Vec<T, 8> a = vload<T, 8>(dy + c), o = vload<T, 8>(y + c);
#pragma unroll
            for (int e = 0; e < 8; e++) d += a.v[e] * o.v[e];
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        if (l % 2 == 0 && r0 + l / 2 < end) Dsum[((size_t)b * NH + h) * Tq + r0 - sh.q0 + l / 2] = d;   /* for the dk/dv kernel */
        D[0] = __shfl_sync(0xffffffffu, d, 2 * g);
        D[1] = __shfl_sync(0xffffffffu, d, 2 * (g + 8));
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++) D[r] = row[r] < end ? Dsum[((size_t)b * NH + h) * Tq + lrow[r]] : 0.0f;
    }
    __syncthreads();
    load_rows_async<T>(sm, Kg, 0, FA_BN, end, sh.kv_stride);
    load_rows_async<T>(sm + FA_TILE, Vg, 0, FA_BN, end, sh.kv_stride);
    cp_commit();
#pragma unroll
    for (int r = 0; r < 2; r++) L[r] = row[r] < end ? lse[((size_t)b * NH + h) * Tq + lrow[r]] * LOG2E : 0.0f;
    float dq[FA_HD / 8][4] = {};
    for (int j = 0; j < nk; j++) {
        int k0 = j * FA_BN;
        if (j + 1 < nk) {
            T *st = sm + ((j + 1) & 1) * 2 * FA_TILE;
            load_rows_async<T>(st, Kg, k0 + FA_BN, FA_BN, end, sh.kv_stride);
            load_rows_async<T>(st + FA_TILE, Vg, k0 + FA_BN, FA_BN, end, sh.kv_stride);
        }
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const T *Ks = sm + (j & 1) * 2 * FA_TILE, *Vs = Ks + FA_TILE;
        bool edge = k0 + FA_BN - 1 > r0 || k0 + FA_BN > end;
#pragma unroll
        for (int c0 = 0; c0 < FA_BN; c0 += FA_BN / SPLIT) {   /* the tile's keys in SPLIT parts (fewer live registers) */
            constexpr int NT = FA_BN / SPLIT / 8;
            if (k0 + c0 > r0 + 15) continue;   /* every key of the part is after every row of this warp */
            float s[NT][4] = {}, dp[NT][4] = {};
            rows_times_tile<T, NT>(s, qa, Ks + c0 * FA_LD);   /* s = q k^T */
            rows_times_tile<T, NT>(dp, da, Vs + c0 * FA_LD);  /* dp = dout v^T */
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {   /* s becomes ds = p * (dp - D) * scale */
                    int col = k0 + c0 + nt * 8 + 2 * t + (e & 1), r = e / 2;
                    float p = exp2f(fmaf(s[nt][e], sl2, -L[r]));
                    if (edge && (col > row[r] || col >= end)) p = 0.0f;
                    s[nt][e] = p * (dp[nt][e] - D[r]) * scale;
                }
            scores_times_tile<T, NT>(dq, s, Ks + c0 * FA_LD);   /* dq += dS @ K */
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= end) continue;
        T *y = dqkv + ((size_t)b * Tq + lrow[r]) * QKV + h * FA_HD;
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++)
            *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(dq[nt][2 * r], dq[nt][2 * r + 1]);
    }
}

/* dk, dv parts of dqkv (whole sequence; dkv NULL) or ADDED into dkv (B,Tk,2*NKV*HD) fp32 (offset form): block = 16*NW keys
 * of one (b, kv head); every head of the group, query tiles from the diagonal, streamed as one sequence of (head, query
 * tile) items; grid (B*NKV, key tiles up to the end), the first (longest) key tile first */
template <typename T, int NW, int MINB, int SPLIT> __global__ void __launch_bounds__(NW * 32, MINB) flash_backward_dkv_kernel(T *dqkv, float *dkv, const T *dout,
                                                                                               const T *qkv, const T *kv, const float *lse,
                                                                                               const float *Dsum, FaShape sh, int NH,
                                                                                               int NKV, float scale) {
    constexpr int BK = 16 * NW;
    static_assert(BK <= 2 * FA_BN && BK % FA_BN == 0, "k and v are staged in the four tiles");
    __shared__ __align__(128) T sm[4 * FA_TILE];   /* q, dout of stage 0, q, dout of stage 1; k and v first pass through */
    __shared__ float LD[2][2][FA_BN];              /* [stage][lse, Dsum][query] */
    int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV, G = NH / NKV;
    int k0 = blockIdx.y * BK, end = sh.end(), Tq = sh.Tq;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * Tq * QKV, *kbase = kv + (size_t)b * sh.Tk * sh.kv_stride;
    float sl2 = scale * LOG2E;
    load_rows_async<T>(sm, kbase + sh.k_col + kvh * FA_HD, k0, BK, end, sh.kv_stride);
    load_rows_async<T>(sm + 2 * FA_TILE, kbase + sh.v_col + kvh * FA_HD, k0, BK, end, sh.kv_stride);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    uint32_t ka[FA_HD / 16][4], va[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) {
        load_a(ka[kk], sm, w * 16, kk * 16, FA_LD);
        load_a(va[kk], sm + 2 * FA_TILE, w * 16, kk * 16, FA_LD);
    }
    __syncthreads();
    int first = k0 > sh.q0 ? k0 - sh.q0 : 0;   /* the local row of the first query at or after this block's first key */
    int nq = (Tq - first + FA_BN - 1) / FA_BN, items = G * nq;   /* query tiles from there, of each head */
    /* item i: head kvh*G + i/nq, local queries first + (i%nq)*64 .. +63, with their lse and Dsum */
    auto load_item = [&](int i, int st) {
        int h = kvh * G + i / nq, lq0 = first + i % nq * FA_BN;
        load_rows_async<T>(sm + st * 2 * FA_TILE, base + h * FA_HD, lq0, FA_BN, Tq, QKV);
        load_rows_async<T>(sm + st * 2 * FA_TILE + FA_TILE, dout + (size_t)b * Tq * NH * FA_HD + h * FA_HD, lq0, FA_BN, Tq,
                           (size_t)NH * FA_HD);
        if (threadIdx.x < 2 * FA_BN) {
            int which = threadIdx.x / FA_BN, c = threadIdx.x % FA_BN;
            const float *src = (which ? Dsum : lse) + ((size_t)b * NH + h) * Tq;
            cp_async4(&LD[st][which][c], src + (lq0 + c < Tq ? lq0 + c : 0), lq0 + c < Tq);
        }
    };
    load_item(0, 0);
    cp_commit();
    int kw = k0 + w * 16, key[2] = {kw + g, kw + g + 8};
    float dk[FA_HD / 8][4] = {}, dv[FA_HD / 8][4] = {};
    for (int i = 0; i < items; i++) {
        int lq0 = first + i % nq * FA_BN, q0 = sh.q0 + lq0;   /* local row, global position */
        if (i + 1 < items) load_item(i + 1, (i + 1) & 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const T *Qs = sm + (i & 1) * 2 * FA_TILE, *Ds = Qs + FA_TILE;
        const float *Ls = LD[i & 1][0], *Dl = LD[i & 1][1];
        bool edge = q0 < kw + 15 || lq0 + FA_BN > Tq;
#pragma unroll
        for (int c0 = 0; c0 < FA_BN; c0 += FA_BN / SPLIT) {   /* the tile's queries in SPLIT parts (fewer live registers) */
            constexpr int NT = FA_BN / SPLIT / 8;
            if (q0 + c0 + FA_BN / SPLIT - 1 < kw) continue;   /* every query of the part is before every key of this warp */
            float s[NT][4] = {}, dp[NT][4] = {};   /* transposed: rows are keys, columns queries */
            rows_times_tile<T, NT>(s, ka, Qs + c0 * FA_LD);    /* s = k q^T */
            rows_times_tile<T, NT>(dp, va, Ds + c0 * FA_LD);   /* dp = v dout^T */
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {   /* s becomes p, dp becomes ds */
                    int c = c0 + nt * 8 + 2 * t + (e & 1), q = q0 + c, r = e / 2;
                    float p = exp2f(fmaf(s[nt][e], sl2, -Ls[c] * LOG2E));
                    if (edge && (q < key[r] || q >= end)) p = 0.0f;
                    s[nt][e] = p;
                    dp[nt][e] = p * (dp[nt][e] - Dl[c]) * scale;
                }
            scores_times_tile<T, NT>(dv, s, Ds + c0 * FA_LD);   /* dv += P^T @ dout */
            scores_times_tile<T, NT>(dk, dp, Qs + c0 * FA_LD);  /* dk += dS^T @ q */
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= end) continue;
        if (dkv) {   /* the offset form: this block owns these rows of dkv, so a plain read-add-write is exact */
            size_t KVW = (size_t)2 * NKV * FA_HD;
            float *gk = dkv + ((size_t)b * sh.Tk + key[r]) * KVW + kvh * FA_HD, *gv = gk + (size_t)NKV * FA_HD;
#pragma unroll
            for (int nt = 0; nt < FA_HD / 8; nt++) {
                float2 *pk = reinterpret_cast<float2 *>(gk + nt * 8 + 2 * t), *pv = reinterpret_cast<float2 *>(gv + nt * 8 + 2 * t);
                float2 a = *pk, c = *pv;
                *pk = make_float2(a.x + dk[nt][2 * r], a.y + dk[nt][2 * r + 1]);
                *pv = make_float2(c.x + dv[nt][2 * r], c.y + dv[nt][2 * r + 1]);
            }
            continue;
        }
        T *yk = dqkv + ((size_t)b * sh.Tk + key[r]) * QKV + (NH + kvh) * FA_HD, *yv = yk + (size_t)NKV * FA_HD;
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++) {
            *reinterpret_cast<uint32_t *>(yk + nt * 8 + 2 * t) = pack2<T>(dk[nt][2 * r], dk[nt][2 * r + 1]);
            *reinterpret_cast<uint32_t *>(yv + nt * 8 + 2 * t) = pack2<T>(dv[nt][2 * r], dv[nt][2 * r + 1]);
        }
    }
}

/* ---- launchers (attention.cu decides when this path applies) ---- */
extern "C" int attention_mma_supported(int HD, const void *a, const void *b, const void *c) {
    return cuda_act != DTYPE_FP32 && HD == FA_HD && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* Measured at l124m on the H200 (bf16, B=16 T=1024 NH=12 NKV=4): the forward is 0.143 ms with 8 warps (128 queries) a
 * block, 0.147 with 4; the backward 0.477 ms with both kernels at 4 warps capped to 168 registers (3 blocks per SM) and
 * the streamed tile handled in halves, against 0.50-0.58 for 8 warps, uncapped, or whole tiles. */
/* The whole sequence: queries, keys and values all in qkv */
static FaShape whole(int T_, int NH, int NKV) {
    return FaShape{T_, 0, T_, (size_t)(NH + 2 * NKV) * FA_HD, NH * FA_HD, (NH + NKV) * FA_HD};
}
/* The offset form: Tq queries at q0 against the packed k|v rows of kv (B,Tk,2*NKV*HD) */
static FaShape at(int Tq, int q0, int Tk, int NKV) { return FaShape{Tq, q0, Tk, (size_t)2 * NKV * FA_HD, 0, NKV * FA_HD}; }

template <typename T> static void forward(void *out, float *lse, const void *qkv, const void *kv, FaShape sh, int B, int NH, int NKV,
                                          float scale) {
    flash_forward_kernel<T, 8><<<dim3(B * NH, ceil_div(sh.Tq, 128)), 256, 0, cuda_stream>>>((T *)out, lse, (const T *)qkv, (const T *)kv, sh,
                                                                                          NH, NKV, scale);
    launchCheck();
}

extern "C" void attention_forward_mma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)FA_HD);
    if (cuda_act == DTYPE_BF16) forward<__nv_bfloat16>(out, lse, qkv, qkv, whole(T_, NH, NKV), B, NH, NKV, scale);
    else forward<__half>(out, lse, qkv, qkv, whole(T_, NH, NKV), B, NH, NKV, scale);
}

extern "C" void attention_forward_at_mma(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int q0, int Tk, int NH,
                                         int NKV) {
    float scale = 1.0f / sqrtf((float)FA_HD);
    if (cuda_act == DTYPE_BF16) forward<__nv_bfloat16>(out, lse, qkv, kv, at(Tq, q0, Tk, NKV), B, NH, NKV, scale);
    else forward<__half>(out, lse, qkv, kv, at(Tq, q0, Tk, NKV), B, NH, NKV, scale);
}

template <typename T> static void backward(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                                           const float *lse, float *Dsum, FaShape sh, int B, int NH, int NKV, float scale) {
    flash_backward_dq_kernel<T, 4, 3, 2><<<dim3(B * NH, ceil_div(sh.Tq, 64)), 128, 0, cuda_stream>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)kv, (const T *)out, lse, Dsum, sh, NH, NKV, scale);
    launchCheck();
    flash_backward_dkv_kernel<T, 4, 3, 2><<<dim3(B * NKV, ceil_div(sh.end(), 64)), 128, 0, cuda_stream>>>(
        (T *)dqkv, dkv, (const T *)dout, (const T *)qkv, (const T *)kv, lse, Dsum, sh, NH, NKV, scale);
    launchCheck();
}

/* Dsum (B,NH,T): scratch; with out given, the dq kernel computes the row sums dout . out and writes them there for the
 * dk/dv kernel (no separate pass); with out = 0, Dsum holds them already */
extern "C" void attention_backward_mma(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                       float *Dsum, int B, int T_, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)FA_HD);
    FaShape sh = whole(T_, NH, NKV);
    if (cuda_act == DTYPE_BF16) backward<__nv_bfloat16>(dqkv, NULL, dout, qkv, qkv, out, lse, Dsum, sh, B, NH, NKV, scale);
    else backward<__half>(dqkv, NULL, dout, qkv, qkv, out, lse, Dsum, sh, B, NH, NKV, scale);
}

/* The offset form (kernels/attention.h): dq into the q part of dqkv (B,Tq,QKV), dk|dv ADDED into dkv (B,Tk,2*NKV*HD) fp32 */
extern "C" void attention_backward_at_mma(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                                          const float *lse, float *Dsum, int B, int Tq, int q0, int Tk, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)FA_HD);
    FaShape sh = at(Tq, q0, Tk, NKV);
    if (cuda_act == DTYPE_BF16) backward<__nv_bfloat16>(dqkv, dkv, dout, qkv, kv, out, lse, Dsum, sh, B, NH, NKV, scale);
    else backward<__half>(dqkv, dkv, dout, qkv, kv, out, lse, Dsum, sh, B, NH, NKV, scale);
}
