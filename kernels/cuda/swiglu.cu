/* kernels/cuda/swiglu.cu — SwiGLU on the fused gate|up activation, forward and
 * backward.
 *
 * The idea: pure bandwidth, one 16-byte pack of f per thread; the backward
 * reads h13 and dout once and writes both halves of dh13. */
#include "common.cuh"
#include "swiglu.cuh"
extern "C" {
#include "../swiglu.h"
}

/* out (N,F) = silu(h13[:, :F]) * h13[:, F:], the arithmetic of swiglu.cuh */
template <typename T, int P> __global__ void swiglu_forward_kernel(T *out, const T *h13, int N, int F) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * P;
    if (idx >= (size_t)N * F) return;
    size_t n = idx / F, f = idx % F;
    Vec<T, P> g = vload<T, P>(h13 + n * 2 * F + f), u = vload<T, P>(h13 + n * 2 * F + F + f);
#pragma unroll
    for (int k = 0; k < P; k++) g.v[k] = swiglu_value(g.v[k], u.v[k]);
    vstore<T, P>(out + idx, g);
}

/* dh13 (N,2F) = (dgate, dup) of dout (N,F), the arithmetic of swiglu.cuh */
template <typename T, int P> __global__ void swiglu_backward_kernel(T *dh13, const T *dout, const T *h13, int N, int F) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * P;
    if (idx >= (size_t)N * F) return;
    size_t n = idx / F, f = idx % F, gi = n * 2 * F + f, ui = gi + F;
    Vec<T, P> g = vload<T, P>(h13 + gi), u = vload<T, P>(h13 + ui), dy = vload<T, P>(dout + idx), dg, du;
#pragma unroll
    for (int k = 0; k < P; k++) swiglu_grads(g.v[k], u.v[k], dy.v[k], &dg.v[k], &du.v[k]);
    vstore<T, P>(dh13 + gi, dg);
    vstore<T, P>(dh13 + ui, du);
}

extern "C" void swiglu_forward_cuda(void *out, const void *h13, int N, int F) {
    size_t n = (size_t)N * F;
    if (n == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(F, sizeof(T), out, h13))
            swiglu_forward_kernel<T, P><<<ceil_div(n / P, 256), 256, 0, cuda_stream>>>((T *)out, (const T *)h13, N, F);
        else
            swiglu_forward_kernel<T, 1><<<ceil_div(n, 256), 256, 0, cuda_stream>>>((T *)out, (const T *)h13, N, F);
    });
    launchCheck();
}

extern "C" void swiglu_backward_cuda(void *dh13, const void *dout, const void *h13, int N, int F) {
    size_t n = (size_t)N * F;
    if (n == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(F, sizeof(T), dh13, dout, h13))
            swiglu_backward_kernel<T, P><<<ceil_div(n / P, 256), 256, 0, cuda_stream>>>((T *)dh13, (const T *)dout,
                                                                                      (const T *)h13, N, F);
        else
            swiglu_backward_kernel<T, 1><<<ceil_div(n, 256), 256, 0, cuda_stream>>>((T *)dh13, (const T *)dout,
                                                                                  (const T *)h13, N, F);
    });
    launchCheck();
}
