/* kernels/cpu/elementwise.c — fp32 reference residual add, sum of squares, cast. */
#include "../elementwise.h"
#include "parallel.h"
#include <string.h>

void add_cpu(void *out_, const void *a_, const void *b_, size_t n) {
    float *out = out_;
    const float *a = a_, *b = b_;
#pragma omp parallel for if (cpu_parallel(n))
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

double sum_squares_cpu(const float *x, size_t n) {
    double s = 0;
#pragma omp parallel for reduction(+ : s) if (cpu_parallel(n))
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

void cast_from_fp32_cpu(void *out, const float *inp, size_t n) {
    if (out != inp) memmove(out, inp, n * sizeof(float));
}

void cast_to_fp32_cpu(float *out, const void *inp, size_t n) {
    if ((const void *)out != inp) memmove(out, inp, n * sizeof(float));
}
