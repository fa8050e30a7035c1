/* kernels/cpu/attention.c — fp32 reference causal attention with grouped-query
 * attention, reading q, k, v in place from the fused qkv activation, and its
 * KV-cache form for sampling.
 *
 * Query t attends to keys 0 .. t; each row is attention_row.h's (forward:
 * softmax(q.k / sqrt(HD)) v and lse saved; backward: p recomputed from lse).
 * Threads split over (b, kv head); the query heads that share a KV head run in
 * the same thread, so dk and dv need no atomics. */
#include "../attention.h"
#include "../rope.h"
#include "attention_row.h"
#include "parallel.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void attention_forward_cpu(void *out_, float *lse, const void *qkv_, int B, int T, int NH, int NKV, int HD) {
    float *out = out_;
    const float *qkv = qkv_;
    int QKV = (NH + 2 * NKV) * HD, G = NH / NKV;
#pragma omp parallel if (cpu_parallel((size_t)B * NH * T * (T + 1) / 2 * HD / 32))
    {
        float *s = malloc(sizeof(float) * T);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * QKV;
                int kvh = h / G;
                for (int t = 0; t < T; t++)   /* keys 0 .. t */
                    lse[((size_t)b * NH + h) * T + t] =
                        attention_row_forward(out + ((size_t)b * T + t) * NH * HD + h * HD, base + (size_t)t * QKV + h * HD,
                                              base + (NH + kvh) * HD, base + (NH + NKV + kvh) * HD, QKV, t + 1, HD, s);
            }
        free(s);
    }
}

void attention_backward_cpu(void *dqkv_, const void *dout_, const void *qkv_, const void *out_, const float *lse,
                            int B, int T, int NH, int NKV, int HD, float rope_theta, void *work, size_t work_bytes) {
    if (work) memset(work, 0xFF, work_bytes);   /* NaN in fp32, bf16 and fp16: lent memory still in use shows */
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *out = out_;
    int QKV = (NH + 2 * NKV) * HD, G = NH / NKV;
#pragma omp parallel for collapse(2) if (cpu_parallel((size_t)B * NH * T * (T + 1) / 2 * HD / 16))
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < NKV; kvh++) {
            const float *base = qkv + (size_t)b * T * QKV;
            float *dbase = dqkv + (size_t)b * T * QKV;
            for (int t = 0; t < T; t++) {   /* this thread owns these q, k, v slices of dqkv */
                for (int h = kvh * G; h < (kvh + 1) * G; h++) memset(dbase + (size_t)t * QKV + h * HD, 0, sizeof(float) * HD);
                memset(dbase + (size_t)t * QKV + (NH + kvh) * HD, 0, sizeof(float) * HD);
                memset(dbase + (size_t)t * QKV + (NH + NKV + kvh) * HD, 0, sizeof(float) * HD);
            }
            for (int h = kvh * G; h < (kvh + 1) * G; h++)
                for (int t = 0; t < T; t++)   /* keys 0 .. t */
                    attention_row_backward(dbase + (size_t)t * QKV + h * HD, dbase + (NH + kvh) * HD, dbase + (NH + NKV + kvh) * HD, QKV,
                                           base + (size_t)t * QKV + h * HD, base + (NH + kvh) * HD, base + (NH + NKV + kvh) * HD, QKV,
                                           dout + ((size_t)b * T + t) * NH * HD + h * HD, out + ((size_t)b * T + t) * NH * HD + h * HD,
                                           lse[((size_t)b * NH + h) * T + t], t + 1, HD);
        }
    if (rope_theta > 0) rope_backward_cpu(dqkv, B, T, NH, NKV, HD, rope_theta, 0);   /* d(q, k) before RoPE */
}

void attention_cached_cpu(void *out_, void *kcache_, void *vcache_, const void *qkv_, int B, int T, int pos0, int Tmax,
                          int NH, int NKV, int HD) {
    float *out = out_, *kc = kcache_, *vc = vcache_;
    const float *qkv = qkv_;
    int QKV = (NH + 2 * NKV) * HD, KV = NKV * HD, G = NH / NKV;
    for (int b = 0; b < B; b++)   /* append the new keys and values */
        for (int t = 0; t < T; t++) {
            const float *row = qkv + ((size_t)b * T + t) * QKV;
            memcpy(kc + ((size_t)b * Tmax + pos0 + t) * KV, row + NH * HD, KV * sizeof(float));
            memcpy(vc + ((size_t)b * Tmax + pos0 + t) * KV, row + (NH + NKV) * HD, KV * sizeof(float));
        }
#pragma omp parallel if (cpu_parallel((size_t)B * NH * T * (pos0 + T) * HD / 32))
    {
        float *s = malloc(sizeof(float) * (pos0 + T));
#pragma omp for collapse(3)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {   /* keys 0 .. pos0+t of the cache */
                    int kvh = h / G;
                    attention_row_forward(out + ((size_t)b * T + t) * NH * HD + h * HD, qkv + ((size_t)b * T + t) * QKV + h * HD,
                                          kc + (size_t)b * Tmax * KV + kvh * HD, vc + (size_t)b * Tmax * KV + kvh * HD, KV, pos0 + t + 1,
                                          HD, s);
                }
        free(s);
    }
}
