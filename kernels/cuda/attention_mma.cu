/* kernels/cuda/attention_mma.cu — the fast path of causal GQA attention for
 * bf16 and fp16 with HD = 64: flash attention 2 on the tensor cores through
 * mma.sync m16n8k16 (fp32 accumulators), q, k, v read in place from qkv.
 *
 * The idea: every product is X (m x k) @ Y (k x n) with X held as row-major
 * "A fragments" and Y staged in shared memory as n rows of contiguous k, so a
 * fragment is two 32-bit loads, or stored k-major and read transposed by
 * ldmatrix .trans (v in P @ V, k in dS @ K, q and dout in the dk/dv products). A block has 4 warps; each warp owns 16 rows
 * (queries in the forward and the dq kernel, keys in the dk/dv kernel) and the
 * block walks tiles of 64 of the other side. Scores stay in registers and are
 * reused as the A operand of the next product (P @ V, dS @ K, ...). The
 * backward is two kernels that each own what they write (dq per query tile;
 * dk, dv per key tile summed over the G query heads of the KV head), so there
 * are no atomics and the results are deterministic. Rows and keys past T are
 * zero-filled and masked, so any T works. */
#include "common.cuh"
#include <math.h>
extern "C" {
#include "../attention.h"
}

#define FA_HD 64          /* head dim of this path */
#define FA_B 64           /* rows (queries or keys) per tile */
#define FA_LD (FA_HD + 8) /* shared row pitch in elements: +16 bytes spreads the banks */
#define LOG2E 1.4426950408889634f

/* ---- fragments ---------------------------------------------------------------- */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
/* c (16x8 fp32) += a (16x16) @ b (16x8) */
template <typename T> __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    if constexpr (sizeof(T) == 2 && std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ uint32_t ld32(const void *p) { return *reinterpret_cast<const uint32_t *>(p); }
/* A fragment of rows r0..r0+15, k0..k0+15 of a row-major shared matrix */
template <typename T> __device__ __forceinline__ void load_a(uint32_t a[4], const T *M, int r0, int k0, int ld) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    a[0] = ld32(M + (r0 + g) * ld + k0 + 2 * t);
    a[1] = ld32(M + (r0 + g + 8) * ld + k0 + 2 * t);
    a[2] = ld32(M + (r0 + g) * ld + k0 + 8 + 2 * t);
    a[3] = ld32(M + (r0 + g + 8) * ld + k0 + 8 + 2 * t);
}
/* B fragment for n0..n0+7, k0..k0+15 from a shared matrix stored n-major (row n holds its k contiguous) */
template <typename T> __device__ __forceinline__ void load_b(uint32_t b[2], const T *M, int n0, int k0, int ld) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    b[0] = ld32(M + (n0 + g) * ld + k0 + 2 * t);
    b[1] = ld32(M + (n0 + g) * ld + k0 + 8 + 2 * t);
}
/* B fragments of two n-tiles (n0, n0+8) over k0..k0+15 from a shared matrix stored k-major (row k holds
 * its n contiguous, as v, k, q and dout tiles are): ldmatrix .trans transposes on the way */
template <typename T> __device__ __forceinline__ void load_bt2(uint32_t b0[2], uint32_t b1[2], const T *M, int k0, int n0, int ld) {
    int l = threadIdx.x % 32;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(M + (k0 + l % 16) * ld + n0 + (l / 16) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b0[0]), "=r"(b0[1]), "=r"(b1[0]), "=r"(b1[1]) : "r"(addr));
}
/* the scores of 16 rows x 64 columns (8 C fragments) as the A operand over k-step kk (columns 16kk..16kk+15) */
template <typename T> __device__ __forceinline__ void scores_as_a(uint32_t a[4], const float s[8][4], int kk) {
    a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* 64 rows from a (rows, stride) global tensor starting at row r0 into shared (64, FA_LD); rows >= nrows are zero */
template <typename T> __device__ void load_rows(T *dst, const T *src, int r0, int nrows, size_t stride) {
    for (int e = threadIdx.x; e < FA_B * FA_HD / 8; e += blockDim.x) {
        int r = e / (FA_HD / 8), c = e % (FA_HD / 8) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (r0 + r < nrows) v = *reinterpret_cast<const int4 *>(src + (size_t)(r0 + r) * stride + c);
        *reinterpret_cast<int4 *>(dst + r * FA_LD + c) = v;
    }
}

/* out (B,T,NH*HD), lse (B,NH,T) from qkv (B,T,(NH+2*NKV)*HD); block = 64 queries of one (b, h) */
template <typename T> __global__ void __launch_bounds__(128) flash_forward_kernel(T *out, float *lse, const T *qkv, int T_,
                                                                                  int NH, int NKV, float scale) {
    __shared__ __align__(16) T Qs[FA_B * FA_LD], Ks[FA_B * FA_LD], Vs[FA_B * FA_LD];
    int b = blockIdx.z, h = blockIdx.y, kvh = h / (NH / NKV);
    int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * FA_B;   /* the longest rows first */
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    float sl2 = scale * LOG2E;
    load_rows<T>(Qs, base + h * FA_HD, q0, T_, QKV);
    __syncthreads();
    uint32_t qa[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) load_a(qa[kk], Qs, w * 16, kk * 16, FA_LD);
    float o[FA_HD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    int row[2] = {q0 + w * 16 + g, q0 + w * 16 + g + 8};
    for (int k0 = 0; k0 <= q0 && k0 < T_; k0 += FA_B) {
        __syncthreads();
        load_rows<T>(Ks, base + (NH + kvh) * FA_HD, k0, T_, QKV);
        load_rows<T>(Vs, base + (NH + NKV + kvh) * FA_HD, k0, T_, QKV);
        __syncthreads();
        float s[8][4] = {};
#pragma unroll
        for (int kk = 0; kk < FA_HD / 16; kk++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                uint32_t bf[2];
                load_b(bf, Ks, nt * 8, kk * 16, FA_LD);
                mma<T>(s[nt], qa[kk], bf);
            }
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = k0 + nt * 8 + 2 * t + (e & 1), r = e / 2;
                s[nt][e] = (col <= row[r] && col < T_) ? s[nt][e] * sl2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[nt][e]);
            }
        float corr[2], sum[2] = {0, 0};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            corr[r] = exp2f(m[r] - mx[r]);   /* m = -inf on the first tile: 0 */
            m[r] = mx[r];
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[nt][e] = exp2f(s[nt][e] - m[e / 2]);
                sum[e / 2] += s[nt][e];
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
            l[r] = l[r] * corr[r] + sum[r];
        }
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++) { o[nt][0] *= corr[0]; o[nt][1] *= corr[0]; o[nt][2] *= corr[1]; o[nt][3] *= corr[1]; }
#pragma unroll
        for (int kk = 0; kk < FA_B / 16; kk++) {   /* o += P @ V */
            uint32_t pa[4];
            scores_as_a<T>(pa, s, kk);
#pragma unroll
            for (int nt = 0; nt < FA_HD / 8; nt += 2) {
                uint32_t b0[2], b1[2];
                load_bt2(b0, b1, Vs, kk * 16, nt * 8, FA_LD);
                mma<T>(o[nt], pa, b0);
                mma<T>(o[nt + 1], pa, b1);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= T_) continue;
        T *y = out + ((size_t)b * T_ + row[r]) * NH * FA_HD + h * FA_HD;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++)
            *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
        if (t == 0) lse[((size_t)b * NH + h) * T_ + row[r]] = (m[r] + log2f(l[r])) / LOG2E;
    }
}

/* dq part of dqkv: block = 64 queries of one (b, h); key tiles 0..the diagonal */
template <typename T> __global__ void __launch_bounds__(128) flash_backward_dq_kernel(T *dqkv, const T *dout, const T *qkv,
                                                                                      const float *lse, const float *Dsum,
                                                                                      int T_, int NH, int NKV, float scale) {
    __shared__ __align__(16) T Ks[FA_B * FA_LD], Vs[FA_B * FA_LD];
    int b = blockIdx.z, h = blockIdx.y, kvh = h / (NH / NKV);
    int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * FA_B;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    float sl2 = scale * LOG2E;
    /* q and dout rows of this warp into registers, staged through Ks and Vs */
    load_rows<T>(Ks, base + h * FA_HD, q0, T_, QKV);
    load_rows<T>(Vs, dout + (size_t)b * T_ * NH * FA_HD + h * FA_HD, q0, T_, (size_t)NH * FA_HD);
    __syncthreads();
    uint32_t qa[FA_HD / 16][4], da[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) { load_a(qa[kk], Ks, w * 16, kk * 16, FA_LD); load_a(da[kk], Vs, w * 16, kk * 16, FA_LD); }
    int row[2] = {q0 + w * 16 + g, q0 + w * 16 + g + 8};
    float L[2], D[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        L[r] = row[r] < T_ ? lse[((size_t)b * NH + h) * T_ + row[r]] * LOG2E : 0.0f;
        D[r] = row[r] < T_ ? Dsum[((size_t)b * NH + h) * T_ + row[r]] : 0.0f;
    }
    float dq[FA_HD / 8][4] = {};
    for (int k0 = 0; k0 <= q0 && k0 < T_; k0 += FA_B) {
        __syncthreads();
        load_rows<T>(Ks, base + (NH + kvh) * FA_HD, k0, T_, QKV);
        load_rows<T>(Vs, base + (NH + NKV + kvh) * FA_HD, k0, T_, QKV);
        __syncthreads();
        float s[8][4] = {}, dp[8][4] = {};
#pragma unroll
        for (int kk = 0; kk < FA_HD / 16; kk++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                uint32_t bf[2];
                load_b(bf, Ks, nt * 8, kk * 16, FA_LD);
                mma<T>(s[nt], qa[kk], bf);
                load_b(bf, Vs, nt * 8, kk * 16, FA_LD);
                mma<T>(dp[nt], da[kk], bf);
            }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {   /* s becomes ds = p * (dp - D) * scale */
                int col = k0 + nt * 8 + 2 * t + (e & 1), r = e / 2;
                float p = (col <= row[r] && col < T_ && row[r] < T_) ? exp2f(s[nt][e] * sl2 - L[r]) : 0.0f;
                s[nt][e] = p * (dp[nt][e] - D[r]) * scale;
            }
#pragma unroll
        for (int kk = 0; kk < FA_B / 16; kk++) {   /* dq += dS @ K */
            uint32_t a[4];
            scores_as_a<T>(a, s, kk);
#pragma unroll
            for (int nt = 0; nt < FA_HD / 8; nt += 2) {
                uint32_t b0[2], b1[2];
                load_bt2(b0, b1, Ks, kk * 16, nt * 8, FA_LD);
                mma<T>(dq[nt], a, b0);
                mma<T>(dq[nt + 1], a, b1);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= T_) continue;
        T *y = dqkv + ((size_t)b * T_ + row[r]) * QKV + h * FA_HD;
#pragma unroll
        for (int nt = 0; nt < FA_HD / 8; nt++)
            *reinterpret_cast<uint32_t *>(y + nt * 8 + 2 * t) = pack2<T>(dq[nt][2 * r], dq[nt][2 * r + 1]);
    }
}

/* dk, dv parts of dqkv: block = 64 keys of one (b, kv head); every head of the group, query tiles from the diagonal */
template <typename T> __global__ void __launch_bounds__(128) flash_backward_dkv_kernel(T *dqkv, const T *dout, const T *qkv,
                                                                                       const float *lse, const float *Dsum,
                                                                                       int T_, int NH, int NKV, float scale) {
    __shared__ __align__(16) T Qs[FA_B * FA_LD], Ds[FA_B * FA_LD];
    __shared__ float L_s[FA_B], D_s[FA_B];
    int b = blockIdx.z, kvh = blockIdx.y, G = NH / NKV;
    int kt = gridDim.x - 1 - blockIdx.x, k0 = kt * FA_B;   /* the longest columns first */
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    size_t QKV = (size_t)(NH + 2 * NKV) * FA_HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    float sl2 = scale * LOG2E;
    /* k and v rows of this warp into registers, staged through Qs and Ds */
    load_rows<T>(Qs, base + (NH + kvh) * FA_HD, k0, T_, QKV);
    load_rows<T>(Ds, base + (NH + NKV + kvh) * FA_HD, k0, T_, QKV);
    __syncthreads();
    uint32_t ka[FA_HD / 16][4], va[FA_HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < FA_HD / 16; kk++) { load_a(ka[kk], Qs, w * 16, kk * 16, FA_LD); load_a(va[kk], Ds, w * 16, kk * 16, FA_LD); }
    int key[2] = {k0 + w * 16 + g, k0 + w * 16 + g + 8};
    float dk[FA_HD / 8][4] = {}, dv[FA_HD / 8][4] = {};
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        const float *Lh = lse + ((size_t)b * NH + h) * T_, *Dh = Dsum + ((size_t)b * NH + h) * T_;
        for (int q0 = k0; q0 < T_; q0 += FA_B) {
            __syncthreads();
            load_rows<T>(Qs, base + h * FA_HD, q0, T_, QKV);
            load_rows<T>(Ds, dout + (size_t)b * T_ * NH * FA_HD + h * FA_HD, q0, T_, (size_t)NH * FA_HD);
            if (threadIdx.x < FA_B) {
                int q = q0 + threadIdx.x;
                L_s[threadIdx.x] = q < T_ ? Lh[q] * LOG2E : 0.0f;
                D_s[threadIdx.x] = q < T_ ? Dh[q] : 0.0f;
            }
            __syncthreads();
            float s[8][4] = {}, dp[8][4] = {};   /* transposed: rows are keys, columns queries */
#pragma unroll
            for (int kk = 0; kk < FA_HD / 16; kk++)
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    uint32_t bf[2];
                    load_b(bf, Qs, nt * 8, kk * 16, FA_LD);
                    mma<T>(s[nt], ka[kk], bf);
                    load_b(bf, Ds, nt * 8, kk * 16, FA_LD);
                    mma<T>(dp[nt], va[kk], bf);
                }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {   /* s becomes p, dp becomes ds */
                    int c = nt * 8 + 2 * t + (e & 1), q = q0 + c, r = e / 2;
                    float p = (q >= key[r] && q < T_ && key[r] < T_) ? exp2f(s[nt][e] * sl2 - L_s[c]) : 0.0f;
                    s[nt][e] = p;
                    dp[nt][e] = p * (dp[nt][e] - D_s[c]) * scale;
                }
#pragma unroll
            for (int kk = 0; kk < FA_B / 16; kk++) {   /* dv += P^T @ dout, dk += dS^T @ q */
                uint32_t pa[4], sa[4];
                scores_as_a<T>(pa, s, kk);
                scores_as_a<T>(sa, dp, kk);
#pragma unroll
                for (int nt = 0; nt < FA_HD / 8; nt += 2) {
                    uint32_t b0[2], b1[2];
                    load_bt2(b0, b1, Ds, kk * 16, nt * 8, FA_LD);
                    mma<T>(dv[nt], pa, b0);
                    mma<T>(dv[nt + 1], pa, b1);
                    load_bt2(b0, b1, Qs, kk * 16, nt * 8, FA_LD);
                    mma<T>(dk[nt], sa, b0);
                    mma<T>(dk[nt + 1], sa, b1);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= T_) continue;
        T *yk = dqkv + ((size_t)b * T_ + key[r]) * QKV + (NH + kvh) * FA_HD, *yv = yk + (size_t)NKV * FA_HD;
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

extern "C" void attention_forward_mma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV) {
    dim3 grid(ceil_div(T_, FA_B), NH, B);
    float scale = 1.0f / sqrtf((float)FA_HD);
    if (cuda_act == DTYPE_BF16)
        flash_forward_kernel<__nv_bfloat16><<<grid, 128, 0, cuda_stream>>>((__nv_bfloat16 *)out, lse, (const __nv_bfloat16 *)qkv,
                                                                          T_, NH, NKV, scale);
    else
        flash_forward_kernel<__half><<<grid, 128, 0, cuda_stream>>>((__half *)out, lse, (const __half *)qkv, T_, NH, NKV, scale);
    launchCheck();
}

extern "C" void attention_backward_mma(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum,
                                       int B, int T_, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)FA_HD);
    dim3 gq(ceil_div(T_, FA_B), NH, B), gk(ceil_div(T_, FA_B), NKV, B);
    if (cuda_act == DTYPE_BF16) {
        typedef __nv_bfloat16 T;
        flash_backward_dq_kernel<T><<<gq, 128, 0, cuda_stream>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, scale);
        launchCheck();
        flash_backward_dkv_kernel<T><<<gk, 128, 0, cuda_stream>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, scale);
    } else {
        typedef __half T;
        flash_backward_dq_kernel<T><<<gq, 128, 0, cuda_stream>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, scale);
        launchCheck();
        flash_backward_dkv_kernel<T><<<gk, 128, 0, cuda_stream>>>((T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, scale);
    }
    launchCheck();
}
