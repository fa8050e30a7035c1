/* kernels/cpu/embedding.c — fp32 reference token embedding on a block of the
 * vocabulary (kernels/embedding.h), forward and backward. The backward loops
 * over tokens in order inside each thread's slice of channels, so it is
 * deterministic and needs no atomics. */
#include "../embedding.h"
#include "parallel.h"
#include <string.h>

void embedding_forward_cpu(void *out_, const int *ids, const void *wte_, int N, int C, int v0, int V) {
    float *out = out_;
    const float *wte = wte_;
#pragma omp parallel for if (cpu_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        int row = ids[n] - v0;
        if (row >= 0 && row < V) memcpy(out + (size_t)n * C, wte + (size_t)row * C, C * sizeof(float));
        else memset(out + (size_t)n * C, 0, C * sizeof(float));   /* another rank's row */
    }
}

void embedding_backward_cpu(float *dwte, const void *dout_, const int *ids, int N, int C, int v0, int V) {
    const float *dout = dout_;
#pragma omp parallel for if (cpu_parallel((size_t)N * C))
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++) {
            int row = ids[n] - v0;
            if (row >= 0 && row < V) dwte[(size_t)row * C + c] += dout[(size_t)n * C + c];
        }
}
