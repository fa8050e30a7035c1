/* kernels/cpu/cross_entropy.c — fp32 reference of the (vocab-parallel)
 * cross-entropy: pass 1 sums up this rank's block of logits per token, pass 2
 * combines every block's sums and writes the loss and the gradient in place
 * (kernels/cross_entropy.h). */
#include "../cross_entropy.h"
#include "parallel.h"
#include <math.h>
#include <stddef.h>

/* row n's three statistics (kernels/cross_entropy.h) into stats[0], stats[stride], stats[2*stride] */
static void row_stats(float *stats, size_t stride, const float *z, int target, int v0, int v_valid) {
    float mx = -INFINITY;
    for (int i = 0; i < v_valid; i++) mx = z[i] > mx ? z[i] : mx;
    double sum = 0;
    for (int i = 0; i < v_valid; i++) sum += exp((double)(z[i] - mx));
    int y = target - v0;
    stats[0] = mx;
    stats[stride] = (float)sum;
    stats[2 * stride] = y >= 0 && y < v_valid ? z[y] : 0.0f;
}

void cross_entropy_stats_cpu(float *stats, const void *logits_, const int *targets, int N, int V, int v0, int v_valid) {
    const float *logits = logits_;
#pragma omp parallel for if (cpu_parallel((size_t)N * V))
    for (int n = 0; n < N; n++) row_stats(stats + n, (size_t)N, logits + (size_t)n * V, targets[n], v0, v_valid);
}

void cross_entropy_loss_cpu(float *losses, void *logits_, const float *stats, int n_parts, const int *targets, int N, int V, int v0,
                            int v_valid, float dloss, int ignore_index) {
    float *logits = logits_;
#pragma omp parallel for if (cpu_parallel((size_t)N * V))
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        if (targets[n] == ignore_index) {
            losses[n] = 0;
            if (dloss != 0) for (int i = 0; i < V; i++) z[i] = 0;
            continue;
        }
        float own[3];   /* stats NULL: one part, this row's statistics computed here */
        const float *st = stats ? stats + n : own;
        size_t stride = stats ? (size_t)N : 1, part = stats ? 3 * (size_t)N : 3;
        if (!stats) row_stats(own, 1, z, targets[n], v0, v_valid);
        float M = -INFINITY;
        for (int p = 0; p < n_parts; p++) M = fmaxf(M, st[p * part]);
        double sum = 0, zt = 0;
        for (int p = 0; p < n_parts; p++) {
            float s = st[p * part + stride];
            if (s > 0) sum += s * exp((double)(st[p * part] - M));
            zt += st[p * part + 2 * stride];
        }
        float lse = M + (float)log(sum);
        losses[n] = lse - (float)zt;
        if (dloss != 0) {
            int y = targets[n] - v0;
            for (int i = 0; i < V; i++) z[i] = i < v_valid ? expf(z[i] - lse) * dloss : 0.0f;
            if (y >= 0 && y < v_valid) z[y] -= dloss;
        }
    }
}
