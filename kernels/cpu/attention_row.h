/* kernels/cpu/attention_row.h — one query row of fp32 attention, forward and
 * backward: the inner loops every CPU attention shares (the causal op and its
 * KV-cache form in attention.c, the offset form of context parallelism in
 * attention_at.c). They differ only in where a row's keys and values lie, so
 * they pass k and v (the row's first key and value) and the stride between
 * consecutive keys' rows.
 *
 * Forward over keys u < n: s_u = q.k_u / sqrt(HD), p = softmax(s),
 * o = sum p_u v_u; returns lse = log sum exp s. Backward recomputes p from lse:
 *   D = dy . y,  dp_u = dy . v_u,  ds_u = p_u (dp_u - D) / sqrt(HD),
 *   dq += ds_u k_u,  dk_u += ds_u q,  dv_u += p_u dy. */
#pragma once
#include <math.h>
#include <stddef.h>
#include <string.h>

/* q, o: (HD); k, v: n rows `stride` floats apart; s: n floats of scratch. */
static inline float attention_row_forward(float *o, const float *q, const float *k, const float *v, size_t stride, int n, int HD,
                                          float *s) {
    float scale = 1.0f / sqrtf((float)HD), mx = -INFINITY;
    for (int u = 0; u < n; u++) {
        const float *ku = k + (size_t)u * stride;
        float d = 0;
        for (int i = 0; i < HD; i++) d += q[i] * ku[i];
        s[u] = d * scale;
        if (s[u] > mx) mx = s[u];
    }
    double sum = 0;
    for (int u = 0; u < n; u++) { s[u] = expf(s[u] - mx); sum += s[u]; }
    float inv = (float)(1.0 / sum);
    memset(o, 0, sizeof(float) * HD);
    for (int u = 0; u < n; u++) {
        const float *vu = v + (size_t)u * stride;
        float p = s[u] * inv;
        for (int i = 0; i < HD; i++) o[i] += p * vu[i];
    }
    return mx + (float)log(sum);
}

/* dq, q, dy, y: (HD); k, v: n rows `stride` apart; dk, dv: n rows `dstride` apart, ADDED to; L: the row's lse. */
static inline void attention_row_backward(float *dq, float *dk, float *dv, size_t dstride, const float *q, const float *k, const float *v,
                                          size_t stride, const float *dy, const float *y, float L, int n, int HD) {
    float scale = 1.0f / sqrtf((float)HD), D = 0;
    for (int i = 0; i < HD; i++) D += dy[i] * y[i];
    for (int u = 0; u < n; u++) {
        const float *ku = k + (size_t)u * stride, *vu = v + (size_t)u * stride;
        float *dku = dk + (size_t)u * dstride, *dvu = dv + (size_t)u * dstride;
        float sc = 0, dp = 0;
        for (int i = 0; i < HD; i++) { sc += q[i] * ku[i]; dp += dy[i] * vu[i]; }
        float p = expf(sc * scale - L);
        float ds = p * (dp - D) * scale;
        for (int i = 0; i < HD; i++) {
            dvu[i] += p * dy[i];
            dq[i] += ds * ku[i];
            dku[i] += ds * q[i];
        }
    }
}
