/* kernels/cpu/attention_at.c — fp32 reference of attention for a chunk of
 * queries at an offset against K/V held apart (kernels/attention.h: the offset
 * form context parallelism runs, docs/context-parallel.md).
 *
 * The rows of kernels/cpu/attention_row.h, as attention.c runs them, with two
 * changes: query t of the chunk sits at position q0 + t and attends to keys
 * 0 .. q0+t, and the keys and values come from kv's packed k|v rows
 * (B,Tk,2*NKV*HD). The backward writes dq and ADDS dk|dv (fp32) for the
 * caller to sum over chunks and ranks.
 * Threads split over (b, kv head), as there: the query heads sharing a KV head
 * run in one thread, so its rows of dkv need no atomics. */
#include "../attention.h"
#include "attention_row.h"
#include "parallel.h"
#include <stdlib.h>
#include <string.h>

void attention_forward_at_cpu(void *out_, float *lse, const void *qkv_, const void *kv_, int B, int Tq, int q0, int Tk, int NH, int NKV,
                              int HD) {
    float *out = out_;
    const float *qkv = qkv_, *kv = kv_;
    int QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD, G = NH / NKV;
#pragma omp parallel if (cpu_parallel((size_t)B * NH * Tq * (q0 + (Tq + 1) / 2) * HD / 32))
    {
        float *s = malloc(sizeof(float) * (q0 + Tq));
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float *keys = kv + (size_t)b * Tk * KVW;
                int kvh = h / G;
                for (int t = 0; t < Tq; t++)   /* keys 0 .. q0+t */
                    lse[((size_t)b * NH + h) * Tq + t] =
                        attention_row_forward(out + ((size_t)b * Tq + t) * NH * HD + h * HD, qkv + ((size_t)b * Tq + t) * QKV + h * HD,
                                              keys + kvh * HD, keys + (NKV + kvh) * HD, KVW, q0 + t + 1, HD, s);
            }
        free(s);
    }
}

void attention_backward_at_cpu(void *dqkv_, float *dkv, const void *dout_, const void *qkv_, const void *kv_, const void *out_,
                               const float *lse, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *kv = kv_, *out = out_;
    int QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD, G = NH / NKV;
#pragma omp parallel for collapse(2) if (cpu_parallel((size_t)B * NH * Tq * (q0 + (Tq + 1) / 2) * HD / 16))
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < NKV; kvh++) {   /* this thread owns the q heads of kvh and kvh's columns of dkv */
            const float *keys = kv + (size_t)b * Tk * KVW;
            float *dkeys = dkv + (size_t)b * Tk * KVW;
            for (int h = kvh * G; h < (kvh + 1) * G; h++)
                for (int t = 0; t < Tq; t++) {   /* keys 0 .. q0+t */
                    float *dq = dqkv + ((size_t)b * Tq + t) * QKV + h * HD;
                    memset(dq, 0, sizeof(float) * HD);
                    attention_row_backward(dq, dkeys + kvh * HD, dkeys + (NKV + kvh) * HD, KVW, qkv + ((size_t)b * Tq + t) * QKV + h * HD,
                                           keys + kvh * HD, keys + (NKV + kvh) * HD, KVW, dout + ((size_t)b * Tq + t) * NH * HD + h * HD,
                                           out + ((size_t)b * Tq + t) * NH * HD + h * HD, lse[((size_t)b * NH + h) * Tq + t], q0 + t + 1, HD);
                }
        }
}
