/* kernels/cuda/rope.cu — rotary position embedding (Hugging Face rotate-half)
 * on the q and k heads of the fused qkv activation, in place.
 *
 * The idea: one thread per (b, t, i < HD/2) computes its angle once and rotates
 * the pair (i, i + HD/2) of every q and k head of that row. inv_freq is
 * computed on the host with the very expression of the CPU file (glibc powf;
 * the device powf may differ by a few ulp, which at pos ~ 1000 moves the
 * angle by ~1e-4) and passed by value in the launch; angle = pos * inv_freq
 * and cosf/sinf (no fast-math) run on the device. The backward is the same
 * rotation by -angle. */
#include "common.cuh"
#include <math.h>
extern "C" {
#include "../rope.h"
#include "../../common/util.h"
}

/* qkv (B,T,(NH+2*NKV)*HD): heads 0..NH+NKV-1 of each row (q then k) rotated */
#define ROPE_MAX_HALF 128
struct InvFreq { float f[ROPE_MAX_HALF]; };   /* (HD/2) */

template <typename T> __global__ void rope_kernel(T *qkv, int BT, int T_, int NH, int NKV, int HD, InvFreq inv, int pos0,
                                                  float sign) {
    int half = HD / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * half) return;
    int i = idx % half;
    size_t bt = idx / half;
    int t = bt % T_;
    float angle = (float)(pos0 + t) * inv.f[i];
    float c = cosf(angle), s = sign * sinf(angle);
    T *row = qkv + bt * (size_t)(NH + 2 * NKV) * HD;
    for (int h = 0; h < NH + NKV; h++) {
        T *x = row + (size_t)h * HD;
        float x1 = to_f(x[i]), x2 = to_f(x[i + half]);
        x[i] = from_f<T>(x1 * c - x2 * s);
        x[i + half] = from_f<T>(x2 * c + x1 * s);
    }
}

static void rope_cuda(void *qkv, int B, int T_, int NH, int NKV, int HD, float theta, int pos0, float sign) {
    size_t n = (size_t)B * T_ * (HD / 2);
    if (n == 0) return;
    if (HD % 2 || HD / 2 > ROPE_MAX_HALF) die("rope on CUDA needs an even head_dim <= %d (got %d)", 2 * ROPE_MAX_HALF, HD);
    InvFreq inv;
    for (int i = 0; i < HD / 2; i++) inv.f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HD);   /* as kernels/cpu/rope.c */
    ACT_SWITCH(T, {
        rope_kernel<T><<<ceil_div(n, 256), 256, 0, cuda_stream>>>((T *)qkv, B * T_, T_, NH, NKV, HD, inv, pos0, sign);
    });
    launchCheck();
}
extern "C" void rope_forward_cuda(void *qkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cuda(qkv, B, T, NH, NKV, HD, theta, pos0, 1.0f);
}
extern "C" void rope_backward_cuda(void *dqkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cuda(dqkv, B, T, NH, NKV, HD, theta, pos0, -1.0f);
}
