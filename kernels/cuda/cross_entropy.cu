/* kernels/cuda/cross_entropy.cu — fused softmax + cross-entropy + gradient,
 * the gradient written over the logits in place.
 *
 * The idea: one block per row of V logits, two passes. Pass one keeps a running
 * (max, sum of exp) per thread and merges them across the block, giving lse;
 * pass two rereads the row (from L2: a 32k-vocabulary row of bf16 is 64 KB) and
 * writes (softmax - onehot) * dloss over it. No probability tensor exists. */
#include "common.cuh"
extern "C" {
#include "../cross_entropy.h"
}

#define CE_THREADS 1024

/* losses (N); logits (N,V) become dlogits when dloss != 0 */
template <typename T, int P> __global__ void __launch_bounds__(CE_THREADS)
cross_entropy_kernel(float *losses, T *logits, const int *targets, int V, float dloss, int ignore_index) {
    int n = blockIdx.x;
    T *z = logits + (size_t)n * V;
    int y = targets[n];
    if (y == ignore_index) {
        if (threadIdx.x == 0) losses[n] = 0;
        if (dloss != 0)
            for (int i = threadIdx.x; i < V; i += blockDim.x) z[i] = from_f<T>(0.0f);
        return;
    }
    /* pass 1: online max and sum of exp per thread */
    float mx = -INFINITY, sum = 0;
    for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
        Vec<T, P> v = vload<T, P>(z + i);
        float m2 = mx;
#pragma unroll
        for (int k = 0; k < P; k++) m2 = fmaxf(m2, v.v[k]);
        sum *= expf(mx - m2);   /* mx == -inf only while sum == 0; expf(-inf) = 0 */
#pragma unroll
        for (int k = 0; k < P; k++) sum += expf(v.v[k] - m2);
        mx = m2;
    }
    float bmx = block_max(mx);
    float bsum = block_sum(mx == -INFINITY ? 0.0f : sum * expf(mx - bmx));
    float lse = bmx + logf(bsum);
    float zy = to_f(z[y]);
    __syncthreads();   /* every thread has read z[y] before pass 2 overwrites it */
    if (threadIdx.x == 0) losses[n] = lse - zy;
    if (dloss == 0) return;
    /* pass 2: dlogits = (softmax - onehot) * dloss */
    for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
        Vec<T, P> v = vload<T, P>(z + i);
#pragma unroll
        for (int k = 0; k < P; k++) v.v[k] = expf(v.v[k] - lse) * dloss - (i + k == y ? dloss : 0.0f);
        vstore<T, P>(z + i, v);
    }
}

extern "C" void cross_entropy_cuda(float *losses, void *logits, const int *targets, int N, int V, float dloss,
                                   int ignore_index) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(V, sizeof(T), logits))
            cross_entropy_kernel<T, P><<<N, CE_THREADS, 0, cuda_stream>>>(losses, (T *)logits, targets, V, dloss,
                                                                       ignore_index);
        else
            cross_entropy_kernel<T, 1><<<N, CE_THREADS, 0, cuda_stream>>>(losses, (T *)logits, targets, V, dloss,
                                                                       ignore_index);
    });
    launchCheck();
}
