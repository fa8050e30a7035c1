/* kernels/cuda/rmsnorm.cu — RMSNorm forward and backward.
 *
 * The idea: one warp per row (C is a few thousand at most, so a row is a few
 * 16-byte packs per lane and the row statistics are one warp reduction). The
 * weight gradient sums over rows, so it is a column reduction done in two
 * fixed-order passes (per-chunk partials, then a sum of the chunks) instead of
 * atomics: the same batch gives the same bits. For rows of up to 1024 bf16
 * channels the partials come out of the same pass that writes dinp, so the
 * backward reads dout and x from memory once (times in docs/performance.md).
 * The forward holds rows of up to 1024 bf16 channels in registers: each byte
 * is loaded once, all of a row's loads are in flight before the reduction,
 * and the sum runs in the looping kernel's order (the same bits). Holding the
 * backward's rows too was slower (H100, 2026-12-05: 71.6 us vs 64.0 at
 * l350m; 122 registers, a quarter of the blocks an SM). */
#include "common.cuh"
#include "rmsnorm.cuh"
extern "C" {
#include "../rmsnorm.h"
#include "../../common/util.h"
}

/* out (N,C) = inp (N,C) * rstd (N) * weight (C); out NULL: rstd only */
template <typename T, int P> __global__ void rmsnorm_forward_kernel(T *out, float *rstd, const T *inp, const T *weight,
                                                                    int N, int C, float eps) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C;
    float ss = 0;
    for (int c = lane * P; c < C; c += 32 * P) {
        Vec<T, P> v = vload<T, P>(x + c);
#pragma unroll
        for (int k = 0; k < P; k++) ss += v.v[k] * v.v[k];
    }
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / C + eps);
    for (int c = lane * P; out && c < C; c += 32 * P) {   /* the second read hits L1/L2 */
        Vec<T, P> v = vload<T, P>(x + c), w = vload<T, P>(weight + c);
#pragma unroll
        for (int k = 0; k < P; k++) v.v[k] = rmsnorm_value(v.v[k], r, w.v[k]);
        vstore<T, P>(out + (size_t)n * C + c, v);
    }
    if (lane == 0) rstd[n] = r;
}

/* The same forward with the row held: lane's packs k = 0..K-1 at channels (k*32 + lane)*P, the order the loop above
 * visits them, so ss and every output carry the same bits; C <= 32*P*K, packable */
template <typename T, int P, int K> __global__ void __launch_bounds__(256)
rmsnorm_forward_held(T *out, float *rstd, const T *inp, const T *weight, int N, int C, float eps) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C;
    Vec<T, P> v[K];
#pragma unroll
    for (int k = 0; k < K; k++)
        if ((k * 32 + lane) * P < C) v[k] = vload<T, P>(x + (k * 32 + lane) * P);
    float ss = 0;
#pragma unroll
    for (int k = 0; k < K; k++)
        if ((k * 32 + lane) * P < C)
#pragma unroll
            for (int i = 0; i < P; i++) ss += v[k].v[i] * v[k].v[i];
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / C + eps);
    if (out)
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * P;
            if (c < C) {
                Vec<T, P> w = vload<T, P>(weight + c);
#pragma unroll
                for (int i = 0; i < P; i++) v[k].v[i] = rmsnorm_value(v[k].v[i], r, w.v[i]);
                vstore<T, P>(out + (size_t)n * C + c, v[k]);
            }
        }
    if (lane == 0) rstd[n] = r;
}

extern "C" void rmsnorm_forward_cuda(void *out, float *rstd, const void *inp, const void *weight, int N, int C, float eps) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(C, sizeof(T), out, inp, weight) && C <= 32 * P * 4)
            rmsnorm_forward_held<T, P, 4><<<ceil_div(N, 8), 256, 0, cuda_stream>>>((T *)out, rstd, (const T *)inp,
                                                                                 (const T *)weight, N, C, eps);
        else if (packable(C, sizeof(T), out, inp, weight))
            rmsnorm_forward_kernel<T, P><<<ceil_div(N, 8), 256, 0, cuda_stream>>>((T *)out, rstd, (const T *)inp,
                                                                                (const T *)weight, N, C, eps);
        else
            rmsnorm_forward_kernel<T, 1><<<ceil_div(N, 8), 256, 0, cuda_stream>>>((T *)out, rstd, (const T *)inp,
                                                                                (const T *)weight, N, C, eps);
    });
    launchCheck();
}

void rmsnorm_rstd_cuda(float *rstd, const void *inp, int N, int C, float eps) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (!packable(C, sizeof(T), inp, inp, inp)) die("internal: rmsnorm_rstd_cuda needs C %% %d == 0 and inp 16-byte aligned", P);
        if (C <= 32 * P * 4)
            rmsnorm_forward_held<T, P, 4><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(NULL, rstd, (const T *)inp, NULL, N, C, eps);
        else
            rmsnorm_forward_kernel<T, P><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(NULL, rstd, (const T *)inp, NULL, N, C, eps);
    });
    launchCheck();
}

/* dinp (N,C) += r * dout * w - x * r^3 * mean(dout * w * x), one warp per row */
template <typename T, int P> __global__ void rmsnorm_backward_dinp_kernel(T *dinp, const T *dout, const T *inp,
                                                                          const T *weight, const float *rstd, int N, int C) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    T *dx = dinp + (size_t)n * C;
    float gx = 0;
    for (int c = lane * P; c < C; c += 32 * P) {
        Vec<T, P> a = vload<T, P>(dy + c), b = vload<T, P>(weight + c), xv = vload<T, P>(x + c);
#pragma unroll
        for (int k = 0; k < P; k++) gx += a.v[k] * b.v[k] * xv.v[k];
    }
    gx = warp_sum(gx);
    float r = rstd[n], kk = gx / C * r * r * r;
    for (int c = lane * P; c < C; c += 32 * P) {
        Vec<T, P> a = vload<T, P>(dy + c), b = vload<T, P>(weight + c), xv = vload<T, P>(x + c), d = vload<T, P>(dx + c);
#pragma unroll
        for (int k = 0; k < P; k++) d.v[k] += r * a.v[k] * b.v[k] - kk * xv.v[k];
        vstore<T, P>(dx + c, d);
    }
}

/* The backward in one pass (rows of up to 32*P*K channels): a block of 8 warps
 * owns RMS_FUSED_ROWS consecutive rows; each warp does dinp for its rows as
 * above and keeps, in registers, its lanes' share of dweight's partial sum
 * (dout * x * rstd over its rows); the 8 warps then add theirs into the
 * block's row of partial (chunks,C) one after another (a fixed order), and
 * rmsnorm_backward_dw_final sums the chunks. dout and x come from memory once
 * (the second read of a row, after the warp reduction, hits L1). */
#define RMS_FUSED_ROWS 32
template <typename T, int P, int K> __global__ void __launch_bounds__(256)
rmsnorm_backward_fused_kernel(T *dinp, float *partial, const T *dout, const T *inp, const T *weight, const float *rstd,
                              int N, int C) {
    __shared__ float acc[32 * P * K];   /* (C) the block's dweight partial */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n0 = blockIdx.x * RMS_FUSED_ROWS, n1 = min(n0 + RMS_FUSED_ROWS, N);
    float dw[K][P] = {};
    for (int n = n0 + warp; n < n1; n += 8) {
        const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        T *dx = dinp + (size_t)n * C;
        float gx = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = (k * 32 + lane) * P;
            if (c < C) {
                Vec<T, P> a = vload<T, P>(dy + c), b = vload<T, P>(weight + c), xv = vload<T, P>(x + c);
#pragma unroll
                for (int i = 0; i < P; i++) gx += a.v[i] * b.v[i] * xv.v[i];
            }
        }
        gx = warp_sum(gx);
        float r = rstd[n], kk = gx / C * r * r * r;
#pragma unroll
        for (int k = 0; k < K; k++) {   /* the second read of the row hits L1 */
            int c = (k * 32 + lane) * P;
            if (c < C) {
                Vec<T, P> a = vload<T, P>(dy + c), b = vload<T, P>(weight + c), xv = vload<T, P>(x + c), d = vload<T, P>(dx + c);
#pragma unroll
                for (int i = 0; i < P; i++) {
                    d.v[i] += r * a.v[i] * b.v[i] - kk * xv.v[i];
                    dw[k][i] += a.v[i] * xv.v[i] * r;
                }
                vstore<T, P>(dx + c, d);
            }
        }
    }
    for (int turn = 0; turn < 8; turn++) {   /* warp 0 stores, warps 1..7 add in order */
        if (warp == turn)
#pragma unroll
            for (int k = 0; k < K; k++)
#pragma unroll
                for (int i = 0; i < P; i++) {
                    int c = (k * 32 + lane) * P + i;
                    if (c < C) acc[c] = turn == 0 ? dw[k][i] : acc[c] + dw[k][i];
                }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) partial[(size_t)blockIdx.x * C + c] = acc[c];
}

/* Rows wider than the fused kernel holds: dinp (above), then dweight's partials
 * in a second pass. partial (chunks,C): chunk y sums dout * x * rstd over its
 * ROWS rows; block (32 channels x 8 row lanes) */
#define RMS_ROWS 256
template <typename T> __global__ void rmsnorm_backward_dw_partial(float *partial, const T *dout, const T *inp,
                                                                 const float *rstd, int N, int C) {
    __shared__ float s[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, n0 = blockIdx.y * RMS_ROWS;
    int n1 = min(n0 + RMS_ROWS, N);
    float acc = 0;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += 8)
            acc += to_f(dout[(size_t)n * C + c]) * to_f(inp[(size_t)n * C + c]) * rstd[n];
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0;
        for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}
/* dweight (C) (+)= sum over chunks of partial (chunks,C); block (32 channels x 32 chunk lanes): lane y sums
 * chunks y, y+32, ..., then lane 0 adds the 32 sums in order (fixed: the same bits every run) */
__global__ void rmsnorm_backward_dw_final(float *dweight, const float *partial, int chunks, int C, int accumulate) {
    __shared__ float s[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float t = 0;
    if (c < C)
        for (int k = threadIdx.y; k < chunks; k += 32) t += partial[(size_t)k * C + c];
    s[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float u = 0;
        for (int k = 0; k < 32; k++) u += s[k][threadIdx.x];
        dweight[c] = (accumulate ? dweight[c] : 0.0f) + u;
    }
}

extern "C" void rmsnorm_backward_cuda(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight,
                                      const float *rstd, int N, int C, int accumulate) {
    if (N == 0) return;
    static void *buf = 0;
    static size_t cap = 0;
    int chunks = 0;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        int packs = ceil_div(C, 32 * P);   /* 16-byte packs a lane holds of one row */
        if (packable(C, sizeof(T), dinp, dout, inp) && packable(C, sizeof(T), weight) && packs <= 4) {
            chunks = ceil_div(N, RMS_FUSED_ROWS);
            float *partial = (float *)cuda_scratch(&buf, &cap, (size_t)chunks * C * sizeof(float), "rmsnorm dweight partials");
            if (packs <= 2)
                rmsnorm_backward_fused_kernel<T, P, 2><<<chunks, 256, 0, cuda_stream>>>(
                    (T *)dinp, partial, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
            else
                rmsnorm_backward_fused_kernel<T, P, 4><<<chunks, 256, 0, cuda_stream>>>(
                    (T *)dinp, partial, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
        } else {
            chunks = ceil_div(N, RMS_ROWS);
            float *partial = (float *)cuda_scratch(&buf, &cap, (size_t)chunks * C * sizeof(float), "rmsnorm dweight partials");
            if (packable(C, sizeof(T), dinp, dout, inp) && packable(C, sizeof(T), weight))
                rmsnorm_backward_dinp_kernel<T, P><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(
                    (T *)dinp, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
            else
                rmsnorm_backward_dinp_kernel<T, 1><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(
                    (T *)dinp, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
            launchCheck();
            rmsnorm_backward_dw_partial<T><<<dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, cuda_stream>>>(
                partial, (const T *)dout, (const T *)inp, rstd, N, C);
        }
    });
    launchCheck();
    rmsnorm_backward_dw_final<<<ceil_div(C, 32), dim3(32, 32), 0, cuda_stream>>>(dweight, (const float *)buf, chunks, C, accumulate);
    launchCheck();
}
