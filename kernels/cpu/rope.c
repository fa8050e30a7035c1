/* kernels/cpu/rope.c — fp32 reference rotary embedding (Hugging Face rotate-half
 * pairing) applied in place to the q and k heads of the fused qkv activation.
 * The frequencies are computed as Hugging Face does, in fp32:
 * inv_freq[i] = 1 / theta^(2i/HD), angle = pos * inv_freq[i]. */
#include "../rope.h"
#include "parallel.h"
#include <math.h>
#include <stddef.h>

static void rope_cpu(float *qkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0, float sign) {
    int QKV = (NH + 2 * NKV) * HD, half = HD / 2;
#pragma omp parallel for collapse(2) if (cpu_parallel((size_t)B * T * (NH + NKV) * HD))
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = qkv + ((size_t)b * T + t) * QKV;
            for (int i = 0; i < half; i++) {
                float inv_freq = rope_inv_freq(theta, i, HD);
                float angle = (float)(pos0 + t) * inv_freq;
                float c = cosf(angle), s = sign * sinf(angle);
                for (int h = 0; h < NH + NKV; h++) {   /* q heads then k heads: they are adjacent */
                    float *x = row + (size_t)h * HD;
                    float x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * c - x2 * s;
                    x[i + half] = x2 * c + x1 * s;
                }
            }
        }
}

void rope_forward_cpu(void *qkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cpu(qkv, B, T, NH, NKV, HD, theta, pos0, 1.0f);
}
void rope_backward_cpu(void *dqkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cpu(dqkv, B, T, NH, NKV, HD, theta, pos0, -1.0f);
}
