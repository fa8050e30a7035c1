/* kernels/cpu/matmul.c — fp32 linear layer through BLAS sgemm (OpenBLAS), with
 * naive OpenMP loops where no BLAS was found at build time. Row-major:
 * out(N,OC) = inp(N,IC) @ w(OC,IC)^T (+ add, once the product is complete). */
#include "../matmul.h"
#include "parallel.h"
#include <stddef.h>
#include <string.h>
#ifdef LLM3D_BLAS
#include <cblas.h>
#endif

void matmul_forward_cpu(void *out_, const void *inp_, const void *w_, int N, int IC, int OC, const void *add_) {
    float *out = out_;
    const float *inp = inp_, *w = w_, *add = add_;
#ifdef LLM3D_BLAS
    int threads = cpu_blas_threads_begin((size_t)N * IC * OC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);
    cpu_blas_threads_end(threads);
    if (add)   /* after the product, not as sgemm's C: OpenBLAS adds C inside its K panels, an order that varies with the threads */
        for (size_t i = 0; i < (size_t)N * OC; i++) out[i] += add[i];
#else
#pragma omp parallel for collapse(2) if (cpu_parallel((size_t)N * IC * OC / 64))
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            const float *x = inp + (size_t)n * IC, *wr = w + (size_t)o * IC;
            float s = 0;
            for (int i = 0; i < IC; i++) s += x[i] * wr[i];
            out[(size_t)n * OC + o] = add ? s + add[(size_t)n * OC + o] : s;
        }
#endif
}

void matmul_backward_cpu(void *dinp_, float *dw, const void *dout_, const void *inp_, const void *w_, int N, int IC, int OC,
                         int accumulate) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_;
#ifdef LLM3D_BLAS
    int threads = cpu_blas_threads_begin((size_t)N * IC * OC);
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, accumulate ? 1.0f : 0.0f, dw, IC);
    cpu_blas_threads_end(threads);
#else
    if (dinp) {
#pragma omp parallel for if (cpu_parallel((size_t)N * IC * OC / 64))
        for (int n = 0; n < N; n++)
            for (int i = 0; i < IC; i++) {
                float s = 0;
                for (int o = 0; o < OC; o++) s += dout[(size_t)n * OC + o] * w[(size_t)o * IC + i];
                dinp[(size_t)n * IC + i] = s;
            }
    }
    if (!dw) return;
#pragma omp parallel for if (cpu_parallel((size_t)N * IC * OC / 64))
    for (int o = 0; o < OC; o++) {
        if (!accumulate) memset(dw + (size_t)o * IC, 0, (size_t)IC * sizeof(float));
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * OC + o];
            for (int i = 0; i < IC; i++) dw[(size_t)o * IC + i] += d * inp[(size_t)n * IC + i];
        }
    }
#endif
}
