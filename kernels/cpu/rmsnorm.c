/* kernels/cpu/rmsnorm.c — fp32 reference RMSNorm, forward and backward.
 * With r = rstd, g = dout * w:  dx = r * g - x * r^3 * mean(g * x),  dw += sum_n dout * x * r. */
#include "../rmsnorm.h"
#include "parallel.h"
#include <math.h>
#include <stdlib.h>

void rmsnorm_forward_cpu(void *out_, float *rstd, const void *inp_, const void *w_, int N, int C, float eps) {
    float *out = out_;
    const float *inp = inp_, *w = w_;
#pragma omp parallel for if (cpu_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        float r = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int c = 0; c < C; c++) y[c] = (x[c] * r) * w[c];
        rstd[n] = r;
    }
}

void rmsnorm_backward_cpu(void *dinp_, float *dw, const void *dout_, const void *inp_, const void *w_, const float *rstd,
                          int N, int C, int accumulate) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_;
#pragma omp parallel for if (cpu_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float r = rstd[n];
        double gx = 0;
        for (int c = 0; c < C; c++) gx += (double)dy[c] * w[c] * x[c];
        float k = (float)(gx / C) * r * r * r;
        for (int c = 0; c < C; c++) dx[c] += r * dy[c] * w[c] - k * x[c];
    }
    /* the weight gradient sums over rows: one thread per channel keeps it deterministic */
#pragma omp parallel for if (cpu_parallel((size_t)N * C))
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dw[c] = (accumulate ? dw[c] : 0.0f) + (float)s;
    }
}
