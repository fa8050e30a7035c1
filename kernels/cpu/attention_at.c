/* kernels/cpu/attention_at.c — fp32 reference of attention for a chunk of
 * queries at an offset against K/V held apart (kernels/attention.h: the offset
 * form context parallelism runs, docs/context-parallel.md).
 *
 * The loops of kernels/cpu/attention.c with two changes: query t of the chunk
 * sits at position q0 + t and attends to keys 0 .. q0+t, and the keys and
 * values come from kv's packed k|v rows (B,Tk,2*NKV*HD). The backward writes
 * dq and ADDS dk|dv (fp32) for the caller to sum over chunks and ranks.
 * Threads split over (b, kv head), as there: the query heads sharing a KV head
 * run in one thread, so its rows of dkv need no atomics. */
#include "../attention.h"
#include "parallel.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void attention_forward_at_cpu(void *out_, float *lse, const void *qkv_, const void *kv_, int B, int Tq, int q0, int Tk, int NH, int NKV,
                              int HD) {
    float *out = out_;
    const float *qkv = qkv_, *kv = kv_;
    int QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD, G = NH / NKV, n_max = q0 + Tq;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel if (cpu_parallel((size_t)B * NH * Tq * (q0 + (Tq + 1) / 2) * HD / 32))
    {
        float *s = malloc(sizeof(float) * n_max);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *keys = kv + (size_t)b * Tk * KVW;
                int kvh = h / G;
                for (int t = 0; t < Tq; t++) {
                    const float *q = qkv + ((size_t)b * Tq + t) * QKV + h * HD;
                    int n = q0 + t + 1;   /* keys 0 .. q0+t */
                    float mx = -INFINITY;
                    for (int u = 0; u < n; u++) {
                        const float *k = keys + (size_t)u * KVW + kvh * HD;
                        float d = 0;
                        for (int i = 0; i < HD; i++) d += q[i] * k[i];
                        s[u] = d * scale;
                        if (s[u] > mx) mx = s[u];
                    }
                    double sum = 0;
                    for (int u = 0; u < n; u++) { s[u] = expf(s[u] - mx); sum += s[u]; }
                    float inv = (float)(1.0 / sum);
                    float *o = out + ((size_t)b * Tq + t) * NH * HD + h * HD;
                    memset(o, 0, sizeof(float) * HD);
                    for (int u = 0; u < n; u++) {
                        const float *v = keys + (size_t)u * KVW + (NKV + kvh) * HD;
                        float p = s[u] * inv;
                        for (int i = 0; i < HD; i++) o[i] += p * v[i];
                    }
                    lse[((size_t)b * NH + h) * Tq + t] = mx + (float)log(sum);
                }
            }
        free(s);
    }
}

void attention_backward_at_cpu(void *dqkv_, float *dkv, const void *dout_, const void *qkv_, const void *kv_, const void *out_,
                               const float *lse, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *kv = kv_, *out = out_;
    int QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD, G = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel for collapse(2) if (cpu_parallel((size_t)B * NH * Tq * (q0 + (Tq + 1) / 2) * HD / 16))
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < NKV; kvh++) {   /* this thread owns the q heads of kvh and kvh's columns of dkv */
            const float *keys = kv + (size_t)b * Tk * KVW;
            float *dkeys = dkv + (size_t)b * Tk * KVW;
            for (int h = kvh * G; h < (kvh + 1) * G; h++)
                for (int t = 0; t < Tq; t++) {
                    const float *q = qkv + ((size_t)b * Tq + t) * QKV + h * HD;
                    const float *dy = dout + ((size_t)b * Tq + t) * NH * HD + h * HD;
                    const float *y = out + ((size_t)b * Tq + t) * NH * HD + h * HD;
                    float *dq = dqkv + ((size_t)b * Tq + t) * QKV + h * HD;
                    float L = lse[((size_t)b * NH + h) * Tq + t];
                    float D = 0;
                    for (int i = 0; i < HD; i++) D += dy[i] * y[i];
                    memset(dq, 0, sizeof(float) * HD);
                    for (int u = 0; u <= q0 + t; u++) {
                        const float *k = keys + (size_t)u * KVW + kvh * HD, *v = keys + (size_t)u * KVW + (NKV + kvh) * HD;
                        float *dk = dkeys + (size_t)u * KVW + kvh * HD, *dv = dkeys + (size_t)u * KVW + (NKV + kvh) * HD;
                        float sc = 0, dp = 0;
                        for (int i = 0; i < HD; i++) { sc += q[i] * k[i]; dp += dy[i] * v[i]; }
                        float p = expf(sc * scale - L);
                        float ds = p * (dp - D) * scale;
                        for (int i = 0; i < HD; i++) {
                            dv[i] += p * dy[i];
                            dq[i] += ds * k[i];
                            dk[i] += ds * q[i];
                        }
                    }
                }
        }
}
