/* kernels/cuda/elementwise.cu — residual add, sum of squares and the fp32 ->
 * activation cast.
 *
 * The idea: these are pure bandwidth, so each thread moves one 16-byte pack;
 * sum_squares reduces in fp64 in two passes with a fixed grid, so the same
 * input gives the same bits on every run (the global gradient norm and the
 * overflow check must not wobble). */
#include "common.cuh"
extern "C" {
#include "../elementwise.h"
}

/* out (n) = a (n) + b (n), P elements per thread */
template <typename T, int P> __global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * P;
    if (i >= n) return;
    Vec<T, P> x = vload<T, P>(a + i), y = vload<T, P>(b + i);
#pragma unroll
    for (int k = 0; k < P; k++) x.v[k] += y.v[k];
    vstore<T, P>(out + i, x);
}

extern "C" void add_cuda(void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(n, sizeof(T), out, a, b))
            add_kernel<T, P><<<ceil_div(n / P, 256), 256, 0, cuda_stream>>>((T *)out, (const T *)a, (const T *)b, n);
        else
            add_kernel<T, 1><<<ceil_div(n, 256), 256, 0, cuda_stream>>>((T *)out, (const T *)a, (const T *)b, n);
    });
    launchCheck();
}

/* out (n) in act dtype = inp (n) fp32 */
template <typename T> __global__ void cast_kernel(T *out, const float *inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 4 <= n) {
        float4 x = *reinterpret_cast<const float4 *>(inp + i);
        out[i] = from_f<T>(x.x); out[i + 1] = from_f<T>(x.y); out[i + 2] = from_f<T>(x.z); out[i + 3] = from_f<T>(x.w);
    } else {
        for (; i < n; i++) out[i] = from_f<T>(inp[i]);
    }
}
template <typename T> __global__ void cast_kernel_scalar(T *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_f<T>(inp[i]);
}

extern "C" void cast_from_fp32_cuda(void *out, const float *inp, size_t n) {
    if (n == 0) return;
    if (cuda_act == DTYPE_FP32) {
        if (out != inp) cudaCheck(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
        return;
    }
    ACT_SWITCH(T, {
        if (((uintptr_t)inp % 16) == 0)
            cast_kernel<T><<<ceil_div(ceil_div(n, 4), 256), 256, 0, cuda_stream>>>((T *)out, inp, n);
        else
            cast_kernel_scalar<T><<<ceil_div(n, 256), 256, 0, cuda_stream>>>((T *)out, inp, n);
    });
    launchCheck();
}

/* out (n) fp32 = inp (n) in act dtype */
template <typename T> __global__ void uncast_kernel(float *out, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = to_f(inp[i]);
}

extern "C" void cast_to_fp32_cuda(float *out, const void *inp, size_t n) {
    if (n == 0) return;
    if (cuda_act == DTYPE_FP32) {
        if ((const void *)out != inp) cudaCheck(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
        return;
    }
    ACT_SWITCH(T, { uncast_kernel<T><<<ceil_div(n, 256), 256, 0, cuda_stream>>>(out, (const T *)inp, n); });
    launchCheck();
}

/* pass 1: block b sums x[i]^2 over its grid-stride share, in fp64, into partial[b];
 * pass 2: one block adds the partials in a fixed order. */
#define SS_BLOCKS 1024   /* fixed, whatever the GPU: the order of the sums must not change */
#define SS_THREADS 512
__global__ void sum_squares_partial(double *partial, const float *x, size_t n) {
    __shared__ double s[SS_THREADS];
    double acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x, n4 = ((uintptr_t)x % 16 == 0) ? n / 4 : 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {   /* 16-byte loads */
        float4 v = reinterpret_cast<const float4 *>(x)[i];
        acc += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
    }
    for (size_t i = 4 * n4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)   /* the tail */
        acc += (double)x[i] * x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
__global__ void sum_squares_final(double *out, const double *partial, int n) {
    __shared__ double s[SS_THREADS];
    double acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = s[0];
}

extern "C" double sum_squares_cuda(const float *x, size_t n) {
    static void *buf = 0;
    static size_t cap = 0;
    double *partial = (double *)cuda_scratch(&buf, &cap, (SS_BLOCKS + 1) * sizeof(double), "sum_squares partials");
    double result = 0;
    if (n == 0) return 0;
    sum_squares_partial<<<SS_BLOCKS, SS_THREADS, 0, cuda_stream>>>(partial, x, n);
    launchCheck();
    sum_squares_final<<<1, SS_THREADS, 0, cuda_stream>>>(partial + SS_BLOCKS, partial, SS_BLOCKS);
    launchCheck();
    cudaCheck(cudaMemcpyAsync(&result, partial + SS_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, cuda_stream));
    cudaCheck(cudaStreamSynchronize(cuda_stream));
    return result;
}
