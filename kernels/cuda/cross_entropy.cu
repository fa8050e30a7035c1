/* kernels/cuda/cross_entropy.cu — the (vocab-parallel) cross-entropy in two
 * passes over this rank's block of logits (kernels/cross_entropy.h).
 *
 * The idea: one block per row of V logits. Pass 1 keeps a running (max, sum
 * of exp) per thread over the block's real columns and merges them across the
 * thread block: the row's three statistics. Pass 2 combines every part's
 * statistics into the log-sum-exp over the whole vocabulary, then rereads the
 * row and writes (softmax - onehot) * dloss over it. One rank holding the
 * whole vocabulary passes no statistics: the loss kernel runs pass 1 on its
 * row itself, and when it writes the gradient too it first copies the row
 * into shared memory (cp.async, every load in flight at once) and reads both
 * passes there, so the logits come from DRAM once, not twice: at l124m's V,
 * 8 rows an SM are 69 MB in flight, more than L2 keeps for the reread (H100,
 * 2026-12-06: 140 us a chunk of 2048 rows, 110 staged, the same bits). A
 * row is 256 threads, so 8 rows share an SM (3 staged) and one's reductions
 * overlap the others' loads; the kernel is bound by instruction issue (Nsight
 * Compute: 84% of the SM's issue slots with 1024 threads a row and expf), so
 * the exponentials are __expf: ex2.approx of the multi-function unit, a few
 * ulp (measured times in docs/performance.md). No probability tensor exists. */
#include "common.cuh"
#include "tensor_core.cuh"
#include "cuda_extras.h"
extern "C" {
#include "../cross_entropy.h"
}

extern "C" {
int cuda_cross_entropy_staged = 1;
long cuda_cross_entropy_staged_launches = 0;
}

#ifndef CE_THREADS
#define CE_THREADS 256   /* threads per row (a block): 8 blocks an SM overlap one row's reductions with others' loads */
#endif

/* The block's (max, sum of exp(z - max)) over the real columns of one row z,
 * returned to every thread. */
template <typename T, int P> __device__ __forceinline__ void row_stats(const T *z, int v_valid, float &bmx, float &bsum) {
    float mx = -INFINITY, sum = 0;
    for (int i = threadIdx.x * P; i < v_valid; i += blockDim.x * P) {   /* i < v_valid: element i is real, so m2 > -inf */
        Vec<T, P> v = vload<T, P>(z + i);
        float m2 = mx;
#pragma unroll
        for (int k = 0; k < P; k++) if (i + k < v_valid) m2 = fmaxf(m2, v.v[k]);
        sum *= __expf(mx - m2);   /* mx == -inf only while sum == 0; expf(-inf) = 0 */
#pragma unroll
        for (int k = 0; k < P; k++) if (i + k < v_valid) sum += __expf(v.v[k] - m2);
        mx = m2;
    }
    bmx = block_max(mx);
    bsum = block_sum(mx == -INFINITY ? 0.0f : sum * __expf(mx - bmx));
}

/* stats (3,N): the block's max, sum of exp(z - max) and target logit per row */
template <typename T, int P> __global__ void __launch_bounds__(CE_THREADS)
cross_entropy_stats_kernel(float *stats, const T *logits, const int *targets, int N, int V, int v0, int v_valid) {
    int n = blockIdx.x;
    const T *z = logits + (size_t)n * V;
    float bmx, bsum;
    row_stats<T, P>(z, v_valid, bmx, bsum);
    if (threadIdx.x == 0) {
        int y = targets[n] - v0;
        stats[n] = bmx;
        stats[(size_t)N + n] = bsum;
        stats[2 * (size_t)N + n] = y >= 0 && y < v_valid ? to_f(z[y]) : 0.0f;
    }
}

/* losses (N); logits (N,V) become dlogits when dloss != 0; stats (n_parts,3,N), or NULL: one part, computed here.
 * STAGED: the row is first copied whole into shared memory (V elements), and both passes read it there */
template <typename T, int P, bool STAGED> __global__ void __launch_bounds__(CE_THREADS)
cross_entropy_loss_kernel(float *losses, T *logits, const float *stats, int n_parts, const int *targets, int N, int V, int v0,
                          int v_valid, float dloss, int ignore_index) {
    extern __shared__ __align__(16) uint8_t staged[];
    int n = blockIdx.x;
    T *z = logits + (size_t)n * V;
    int y = targets[n];
    if (y == ignore_index) {
        if (threadIdx.x == 0) losses[n] = 0;
        if (dloss != 0)
            for (int i = threadIdx.x; i < V; i += blockDim.x) z[i] = from_f<T>(0.0f);
        return;
    }
    const T *zr = z;   /* where the row is read */
    if (STAGED) {
        T *zs = reinterpret_cast<T *>(staged);
        for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) cp_async16(zs + i, z + i, true);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        zr = zs;
    }
    float M = -INFINITY, sum = 0, zt = 0;
    if (!stats) {   /* one part: this row's statistics, here */
        row_stats<T, P>(zr, v_valid, M, sum);
        zt = y - v0 >= 0 && y - v0 < v_valid ? to_f(zr[y - v0]) : 0.0f;
    } else {        /* every thread combines the parts' statistics itself: n_parts (= tp) is small */
        size_t part = 3 * (size_t)N;
        for (int p = 0; p < n_parts; p++) M = fmaxf(M, stats[p * part + n]);
        for (int p = 0; p < n_parts; p++) {
            float s = stats[p * part + N + n];
            if (s > 0) sum += s * __expf(stats[p * part + n] - M);
            zt += stats[p * part + 2 * (size_t)N + n];
        }
    }
    float lse = M + logf(sum);
    if (threadIdx.x == 0) losses[n] = lse - zt;
    if (dloss == 0) return;
    int yl = y - v0;
    for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
        Vec<T, P> v = vload<T, P>(zr + i);
#pragma unroll
        for (int k = 0; k < P; k++)
            v.v[k] = i + k < v_valid ? __expf(v.v[k] - lse) * dloss - (i + k == yl ? dloss : 0.0f) : 0.0f;
        vstore<T, P>(z + i, v);
    }
}

extern "C" void cross_entropy_stats_cuda(float *stats, const void *logits, const int *targets, int N, int V, int v0, int v_valid) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(V, sizeof(T), logits))
            cross_entropy_stats_kernel<T, P><<<N, CE_THREADS, 0, cuda_stream>>>(stats, (const T *)logits, targets, N, V, v0, v_valid);
        else
            cross_entropy_stats_kernel<T, 1><<<N, CE_THREADS, 0, cuda_stream>>>(stats, (const T *)logits, targets, N, V, v0, v_valid);
    });
    launchCheck();
}

extern "C" void cross_entropy_loss_cuda(float *losses, void *logits, const float *stats, int n_parts, const int *targets, int N, int V,
                                        int v0, int v_valid, float dloss, int ignore_index) {
    if (N == 0) return;
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        bool packs = packable(V, sizeof(T), logits);
        size_t row = (size_t)V * sizeof(T), smem = 0;   /* smem: the staged row's bytes, or none */
        auto *k = packs ? cross_entropy_loss_kernel<T, P, false> : cross_entropy_loss_kernel<T, 1, false>;
        if (cuda_cross_entropy_staged && !stats && dloss != 0 && row <= CUDA_CROSS_ENTROPY_STAGED_MAX && packs) {
            static size_t raised = 0;
            k = cross_entropy_loss_kernel<T, P, true>;
            smem = row;
            if (raised < row) { cudaCheck(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)row)); raised = row; }
            cuda_cross_entropy_staged_launches++;
        }
        k<<<N, CE_THREADS, smem, cuda_stream>>>(losses, (T *)logits, stats, n_parts, targets, N, V, v0, v_valid, dloss, ignore_index);
    });
    launchCheck();
}
