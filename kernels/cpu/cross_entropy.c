/* kernels/cpu/cross_entropy.c — fp32 reference fused softmax + cross-entropy,
 * the gradient written over the logits in place. */
#include "../cross_entropy.h"
#include "parallel.h"
#include <math.h>
#include <stddef.h>

void cross_entropy_cpu(float *losses, void *logits_, const int *targets, int N, int V, float dloss, int ignore_index) {
    float *logits = logits_;
#pragma omp parallel for if (cpu_parallel((size_t)N * V))
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        int y = targets[n];
        if (y == ignore_index) {
            losses[n] = 0;
            if (dloss != 0) for (int i = 0; i < V; i++) z[i] = 0;
            continue;
        }
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp((double)(z[i] - mx));
        float lse = mx + (float)log(sum);
        losses[n] = lse - z[y];
        if (dloss != 0) {
            for (int i = 0; i < V; i++) z[i] = expf(z[i] - lse) * dloss;
            z[y] -= dloss;
        }
    }
}
