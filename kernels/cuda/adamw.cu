/* kernels/cuda/adamw.cu — AdamW over every parameter slice in one launch.
 *
 * The idea: the slice list (offset, count, weight decay) is uploaded once and
 * cached, together with the first block of each slice, so one launch covers
 * all slices: a block finds its slice by binary search over those first
 * blocks, then updates ADAMW_PER_BLOCK elements of it. The fp32 master weight
 * is updated in PyTorch's order (the CPU reference's) and its copy in the
 * activation dtype is written in the same pass. */
#include "common.cuh"
#include <math.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "../adamw.h"
#include "../../common/util.h"
}

#define ADAMW_THREADS 256
#define ADAMW_PER_BLOCK (ADAMW_THREADS * 4)

struct DevSlice { size_t offset, count; float weight_decay; int first_block; };

/* params, grads, m, v (P) fp32; params_compute (P) act dtype or NULL */
template <typename T> __global__ void adamw_kernel(float *params, T *params_compute, const float *grads, float *m, float *v,
                                                   const DevSlice *slices, int n_slices, float lr, float beta1, float beta2,
                                                   float eps, float grad_scale, float step_size, float bc2_sqrt) {
    int lo = 0, hi = n_slices - 1;   /* last slice whose first_block <= blockIdx.x */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (slices[mid].first_block <= (int)blockIdx.x) lo = mid; else hi = mid - 1;
    }
    DevSlice s = slices[lo];
    float decay = 1.0f - lr * s.weight_decay;
    size_t start = (size_t)(blockIdx.x - s.first_block) * ADAMW_PER_BLOCK;
    for (size_t j = start + threadIdx.x; j < start + ADAMW_PER_BLOCK && j < s.count; j += ADAMW_THREADS) {
        size_t i = s.offset + j;
        float g = grads[i] * grad_scale;
        float p = params[i] * decay;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        p -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
        m[i] = mi;
        v[i] = vi;
        params[i] = p;
        if (params_compute) params_compute[i] = from_f<T>(p);
    }
}

extern "C" void adamw_update_cuda(float *params, void *params_compute, const float *grads, float *m, float *v,
                                  const AdamWSlice *slices, int n_slices, AdamWHyper h) {
    /* the cached device copy of the slice list; re-uploaded only when the list changes */
    static AdamWSlice *host_copy = 0;
    static int host_n = 0, total_blocks = 0;
    static void *dev = 0;
    static size_t dev_cap = 0;
    if (n_slices <= 0) return;
    if (n_slices != host_n || memcmp(host_copy, slices, n_slices * sizeof(AdamWSlice)) != 0) {
        free(host_copy);
        host_copy = (AdamWSlice *)mallocCheck(n_slices * sizeof(AdamWSlice));
        memcpy(host_copy, slices, n_slices * sizeof(AdamWSlice));
        host_n = n_slices;
        DevSlice *d = (DevSlice *)mallocCheck(n_slices * sizeof(DevSlice));
        total_blocks = 0;
        for (int s = 0; s < n_slices; s++) {
            d[s].offset = slices[s].offset;
            d[s].count = slices[s].count;
            d[s].weight_decay = slices[s].weight_decay;
            d[s].first_block = total_blocks;
            total_blocks += (int)ceil_div(slices[s].count, ADAMW_PER_BLOCK);
        }
        cuda_scratch(&dev, &dev_cap, n_slices * sizeof(DevSlice), "AdamW slice list");
        cudaCheck(cudaMemcpyAsync(dev, d, n_slices * sizeof(DevSlice), cudaMemcpyHostToDevice, cuda_stream));
        cudaCheck(cudaStreamSynchronize(cuda_stream));
        free(d);
    }
    if (total_blocks == 0) return;
    float bc1 = 1.0f - powf(h.beta1, (float)h.step), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)h.step));
    float step_size = h.lr / bc1;
    ACT_SWITCH(T, {
        adamw_kernel<T><<<total_blocks, ADAMW_THREADS, 0, cuda_stream>>>(
            params, (T *)params_compute, grads, m, v, (const DevSlice *)dev, n_slices, h.lr, h.beta1, h.beta2, h.eps,
            h.grad_scale, step_size, bc2_sqrt);
    });
    launchCheck();
}
