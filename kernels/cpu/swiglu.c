/* kernels/cpu/swiglu.c — fp32 reference SwiGLU: out = silu(g) * u on the fused
 * gate|up rows. With sg = sigmoid(g):  du = dout * g * sg,
 * dg = dout * u * sg * (1 + g * (1 - sg)). */
#include "../swiglu.h"
#include "parallel.h"
#include <math.h>
#include <stddef.h>

void swiglu_forward_cpu(void *out_, const void *h13_, int N, int F) {
    float *out = out_;
    const float *h13 = h13_;
#pragma omp parallel for if (cpu_parallel((size_t)N * F))
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            float g = h13[(size_t)n * 2 * F + f], u = h13[(size_t)n * 2 * F + F + f];
            out[(size_t)n * F + f] = g / (1.0f + expf(-g)) * u;
        }
}

void swiglu_backward_cpu(void *dh13_, const void *dout_, const void *h13_, int N, int F) {
    float *dh13 = dh13_;
    const float *dout = dout_, *h13 = h13_;
#pragma omp parallel for if (cpu_parallel((size_t)N * F))
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            size_t gi = (size_t)n * 2 * F + f, ui = gi + F;
            float g = h13[gi], u = h13[ui], dy = dout[(size_t)n * F + f];
            float sg = 1.0f / (1.0f + expf(-g));
            dh13[ui] = dy * g * sg;
            dh13[gi] = dy * u * sg * (1.0f + g * (1.0f - sg));
        }
}
