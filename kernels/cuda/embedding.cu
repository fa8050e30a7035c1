/* kernels/cuda/embedding.cu — token embedding lookup and its deterministic
 * gradient, on a table holding rows v0 .. v0+V-1 of the vocabulary
 * (kernels/embedding.h: other ids give zero rows and no gradient).
 *
 * The idea of the backward: sort the positions by token id (CUB's radix sort is
 * stable, so equal ids keep their order n), then the first position of each run
 * of equal ids owns that row of dwte and adds the run's dout rows in order n,
 * exactly as the CPU loop does. No float atomics, so the same batch gives the
 * same bits every time. */
#include "common.cuh"
#include <cub/device/device_radix_sort.cuh>
extern "C" {
#include "../embedding.h"
}

/* out (N,C) = wte (V,C) [ids (N) - v0], zero rows for ids outside the table: one block per row, P elements per thread */
template <typename T, int P> __global__ void embedding_forward_kernel(T *out, const int *ids, const T *wte, int C, int v0, int V) {
    int n = blockIdx.x, row = ids[n] - v0;
    T *dst = out + (size_t)n * C;
    if (row < 0 || row >= V) {
        Vec<T, P> zero;
#pragma unroll
        for (int k = 0; k < P; k++) zero.v[k] = 0.0f;
        for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) vstore<T, P>(dst + c, zero);
        return;
    }
    const T *src = wte + (size_t)row * C;
    for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) vstore<T, P>(dst + c, vload<T, P>(src + c));
}

extern "C" void embedding_forward_cuda(void *out, const int *ids, const void *wte, int N, int C, int v0, int V) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(C, sizeof(T), out, wte))
            embedding_forward_kernel<T, P><<<N, 128, 0, cuda_stream>>>((T *)out, ids, (const T *)wte, C, v0, V);
        else
            embedding_forward_kernel<T, 1><<<N, 128, 0, cuda_stream>>>((T *)out, ids, (const T *)wte, C, v0, V);
    });
    launchCheck();
}

__global__ void iota_kernel(int *x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] = i;
}

/* Block i looks at sorted position i; if it starts a run of equal ids that the
 * table holds, it owns row id - v0 of dwte (V,C) and adds dout (N,C) rows
 * pos[i..end) in order. */
template <typename T> __global__ void embedding_backward_kernel(float *dwte, const T *dout, const int *sorted_ids,
                                                                const int *pos, int N, int C, int v0, int V) {
    int i = blockIdx.x;
    int id = sorted_ids[i], row = id - v0;
    if (row < 0 || row >= V) return;   /* another rank's row */
    if (i > 0 && sorted_ids[i - 1] == id) return;
    int end = i + 1;
    while (end < N && sorted_ids[end] == id) end++;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dwte[(size_t)row * C + c];
        for (int j = i; j < end; j++) acc += to_f(dout[(size_t)pos[j] * C + c]);
        dwte[(size_t)row * C + c] = acc;
    }
}

extern "C" void embedding_backward_cuda(float *dwte, const void *dout, const int *ids, int N, int C, int v0, int V) {
    if (N == 0) return;
    static void *buf = 0, *tmp = 0;
    static size_t cap = 0, tmp_cap = 0;
    size_t aligned = ((size_t)N * sizeof(int) + 255) / 256 * 256;
    char *base = (char *)cuda_scratch(&buf, &cap, 3 * aligned, "embedding backward sort");
    int *pos_in = (int *)base, *sorted_ids = (int *)(base + aligned), *pos = (int *)(base + 2 * aligned);
    size_t tmp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, ids, sorted_ids, pos_in, pos, N, 0, 32, cuda_stream));
    void *t = cuda_scratch(&tmp, &tmp_cap, tmp_bytes, "embedding backward sort workspace");
    iota_kernel<<<ceil_div(N, 256), 256, 0, cuda_stream>>>(pos_in, N);
    launchCheck();
    cudaCheck(cub::DeviceRadixSort::SortPairs(t, tmp_bytes, ids, sorted_ids, pos_in, pos, N, 0, 32, cuda_stream));
    ACT_SWITCH(T, {
        embedding_backward_kernel<T><<<N, 256, 0, cuda_stream>>>(dwte, (const T *)dout, sorted_ids, pos, N, C, v0, V);
    });
    launchCheck();
}
