/* kernels/cpu/attention.c — fp32 reference causal attention with grouped-query
 * attention, reading q, k, v in place from the fused qkv activation.
 *
 * Forward, per (b, h, t): s = q.k / sqrt(HD) over t' <= t, p = softmax(s),
 * out = sum p v; lse = log sum exp s is saved. Backward recomputes p from lse:
 *   dv += p * dout,  dp = dout . v,  ds = p * (dp - D) with D = dout . out,
 *   dq += ds * k / sqrt(HD),  dk += ds * q / sqrt(HD).
 * Threads split over (b, kv head); the query heads that share a KV head run in
 * the same thread, so dk and dv need no atomics. */
#include "../attention.h"
#include "../rope.h"
#include "parallel.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void attention_forward_cpu(void *out_, float *lse, const void *qkv_, int B, int T, int NH, int NKV, int HD) {
    float *out = out_;
    const float *qkv = qkv_;
    int QKV = (NH + 2 * NKV) * HD, G = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel if (cpu_parallel((size_t)B * NH * T * (T + 1) / 2 * HD / 32))
    {
        float *s = malloc(sizeof(float) * T);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * QKV;
                int kvh = h / G;
                for (int t = 0; t < T; t++) {
                    const float *q = base + (size_t)t * QKV + h * HD;
                    float mx = -INFINITY;
                    for (int u = 0; u <= t; u++) {
                        const float *k = base + (size_t)u * QKV + (NH + kvh) * HD;
                        float d = 0;
                        for (int i = 0; i < HD; i++) d += q[i] * k[i];
                        s[u] = d * scale;
                        if (s[u] > mx) mx = s[u];
                    }
                    double sum = 0;
                    for (int u = 0; u <= t; u++) { s[u] = expf(s[u] - mx); sum += s[u]; }
                    float inv = (float)(1.0 / sum);
                    float *o = out + ((size_t)b * T + t) * NH * HD + h * HD;
                    memset(o, 0, sizeof(float) * HD);
                    for (int u = 0; u <= t; u++) {
                        const float *v = base + (size_t)u * QKV + (NH + NKV + kvh) * HD;
                        float p = s[u] * inv;
                        for (int i = 0; i < HD; i++) o[i] += p * v[i];
                    }
                    lse[((size_t)b * NH + h) * T + t] = mx + (float)log(sum);
                }
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
    float scale = 1.0f / sqrtf((float)HD);
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
                for (int t = 0; t < T; t++) {
                    const float *q = base + (size_t)t * QKV + h * HD;
                    const float *dy = dout + ((size_t)b * T + t) * NH * HD + h * HD;
                    const float *y = out + ((size_t)b * T + t) * NH * HD + h * HD;
                    float *dq = dbase + (size_t)t * QKV + h * HD;
                    float L = lse[((size_t)b * NH + h) * T + t];
                    float D = 0;
                    for (int i = 0; i < HD; i++) D += dy[i] * y[i];
                    for (int u = 0; u <= t; u++) {
                        const float *k = base + (size_t)u * QKV + (NH + kvh) * HD;
                        const float *v = base + (size_t)u * QKV + (NH + NKV + kvh) * HD;
                        float *dk = dbase + (size_t)u * QKV + (NH + kvh) * HD;
                        float *dv = dbase + (size_t)u * QKV + (NH + NKV + kvh) * HD;
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
    if (rope_theta > 0) rope_backward_cpu(dqkv, B, T, NH, NKV, HD, rope_theta, 0);   /* d(q, k) before RoPE */
}

void attention_cached_cpu(void *out_, void *kcache_, void *vcache_, const void *qkv_, int B, int T, int pos0, int Tmax,
                          int NH, int NKV, int HD) {
    float *out = out_, *kc = kcache_, *vc = vcache_;
    const float *qkv = qkv_;
    int QKV = (NH + 2 * NKV) * HD, KV = NKV * HD, G = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
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
                for (int t = 0; t < T; t++) {
                    const float *q = qkv + ((size_t)b * T + t) * QKV + h * HD;
                    int n = pos0 + t + 1, kvh = h / G;
                    float mx = -INFINITY;
                    for (int u = 0; u < n; u++) {
                        const float *k = kc + ((size_t)b * Tmax + u) * KV + kvh * HD;
                        float d = 0;
                        for (int i = 0; i < HD; i++) d += q[i] * k[i];
                        s[u] = d * scale;
                        mx = s[u] > mx ? s[u] : mx;
                    }
                    double sum = 0;
                    for (int u = 0; u < n; u++) { s[u] = expf(s[u] - mx); sum += s[u]; }
                    float *o = out + ((size_t)b * T + t) * NH * HD + h * HD;
                    memset(o, 0, sizeof(float) * HD);
                    for (int u = 0; u < n; u++) {
                        const float *v = vc + ((size_t)b * Tmax + u) * KV + kvh * HD;
                        float p = (float)(s[u] / sum);
                        for (int i = 0; i < HD; i++) o[i] += p * v[i];
                    }
                }
        free(s);
    }
}
