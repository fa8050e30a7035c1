/* kernels/cuda/rmsnorm.cu — RMSNorm forward and backward.
 *
 * The idea: one warp per row (C is a few thousand at most, so a row is a few
 * 16-byte packs per lane and the row statistics are one warp reduction). The
 * weight gradient sums over rows, so it is a column reduction done in two
 * fixed-order passes (per-chunk partials, then a sum of the chunks) instead of
 * atomics: the same batch gives the same bits. */
#include "common.cuh"
extern "C" {
#include "../rmsnorm.h"
}

/* out (N,C) = inp (N,C) * rstd (N) * weight (C) */
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
    for (int c = lane * P; c < C; c += 32 * P) {   /* the second read hits L1/L2 */
        Vec<T, P> v = vload<T, P>(x + c), w = vload<T, P>(weight + c);
#pragma unroll
        for (int k = 0; k < P; k++) v.v[k] = (v.v[k] * r) * w.v[k];
        vstore<T, P>(out + (size_t)n * C + c, v);
    }
    if (lane == 0) rstd[n] = r;
}

extern "C" void rmsnorm_forward_cuda(void *out, float *rstd, const void *inp, const void *weight, int N, int C, float eps) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(C, sizeof(T), out, inp, weight))
            rmsnorm_forward_kernel<T, P><<<ceil_div(N, 8), 256, 0, cuda_stream>>>((T *)out, rstd, (const T *)inp,
                                                                                (const T *)weight, N, C, eps);
        else
            rmsnorm_forward_kernel<T, 1><<<ceil_div(N, 8), 256, 0, cuda_stream>>>((T *)out, rstd, (const T *)inp,
                                                                                (const T *)weight, N, C, eps);
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

/* partial (chunks,C): chunk y sums dout * x * rstd over its ROWS rows; block (32 channels x 8 row lanes) */
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
/* dweight (C) += sum over chunks of partial (chunks,C), in chunk order */
__global__ void rmsnorm_backward_dw_final(float *dweight, const float *partial, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0;
    for (int k = 0; k < chunks; k++) t += partial[(size_t)k * C + c];
    dweight[c] += t;
}

extern "C" void rmsnorm_backward_cuda(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight,
                                      const float *rstd, int N, int C) {
    if (N == 0) return;
    static void *buf = 0;
    static size_t cap = 0;
    int chunks = ceil_div(N, RMS_ROWS);
    float *partial = (float *)cuda_scratch(&buf, &cap, (size_t)chunks * C * sizeof(float), "rmsnorm dweight partials");
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(C, sizeof(T), dinp, dout, inp) && packable(C, sizeof(T), weight))
            rmsnorm_backward_dinp_kernel<T, P><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(
                (T *)dinp, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
        else
            rmsnorm_backward_dinp_kernel<T, 1><<<ceil_div(N, 8), 256, 0, cuda_stream>>>(
                (T *)dinp, (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C);
        launchCheck();
        rmsnorm_backward_dw_partial<T><<<dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, cuda_stream>>>(
            partial, (const T *)dout, (const T *)inp, rstd, N, C);
    });
    launchCheck();
    rmsnorm_backward_dw_final<<<ceil_div(C, 256), 256, 0, cuda_stream>>>(dweight, partial, chunks, C);
    launchCheck();
}
