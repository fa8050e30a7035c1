/* kernels/cuda/rope.cu — rotary position embedding (Hugging Face rotate-half)
 * on the q and k heads of the fused qkv activation, in place.
 *
 * The idea: a thread computes the angles of a few consecutive pairs (i, i + HD/2)
 * of one row once and rotates those pairs in a few of the row's q and k heads,
 * 16 bytes at a time. inv_freq is
 * computed on the host with the very expression of the CPU file (glibc powf;
 * the device powf may differ by a few ulp, which at pos ~ 1000 moves the
 * angle by ~1e-4) and passed by value in the launch; angle = pos * inv_freq
 * and sincosf (no fast-math: the bits of cosf and sinf) run on the device.
 * The backward is the same rotation by -angle. */
#include "common.cuh"
#include <math.h>
extern "C" {
#include "../rope.h"
#include "../../common/util.h"
}

/* qkv (B,T,(NH+2*NKV)*HD): heads 0..NH+NKV-1 of each row (q then k) rotated.
 * A thread owns P consecutive pair indices i of one row and ROPE_HEADS of its
 * heads (blockIdx.y picks which): P angles computed once, then per head two
 * P-element loads and stores (16 bytes each when packed). */
#define ROPE_MAX_HALF 128
#define ROPE_HEADS 4
struct InvFreq { float f[ROPE_MAX_HALF]; };   /* (HD/2) */

template <typename T, int P> __global__ void rope_kernel(T *qkv, int BT, int T_, int NH, int NKV, int HD, InvFreq inv,
                                                         int pos0, float sign) {
    int half = HD / 2, packs = half / P;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * packs) return;
    int i0 = (int)(idx % packs) * P;
    size_t bt = idx / packs;
    int t = bt % T_;
    float c[P], s[P];
#pragma unroll
    for (int k = 0; k < P; k++) {
        float angle = (float)(pos0 + t) * inv.f[i0 + k], sn;
        sincosf(angle, &sn, &c[k]);   /* one range reduction for both, the bits of cosf and sinf */
        s[k] = sign * sn;
    }
    T *row = qkv + bt * (size_t)(NH + 2 * NKV) * HD;
    int h1 = min((int)(blockIdx.y + 1) * ROPE_HEADS, NH + NKV);
    for (int h = blockIdx.y * ROPE_HEADS; h < h1; h++) {
        T *x = row + (size_t)h * HD + i0;
        Vec<T, P> a = vload<T, P>(x), b = vload<T, P>(x + half), ra, rb;
#pragma unroll
        for (int k = 0; k < P; k++) {
            ra.v[k] = a.v[k] * c[k] - b.v[k] * s[k];
            rb.v[k] = b.v[k] * c[k] + a.v[k] * s[k];
        }
        vstore<T, P>(x, ra);
        vstore<T, P>(x + half, rb);
    }
}

static void rope_cuda(void *qkv, int B, int T_, int NH, int NKV, int HD, float theta, int pos0, float sign) {
    if ((size_t)B * T_ * HD == 0) return;
    if (HD % 2 || HD / 2 > ROPE_MAX_HALF) die("rope on CUDA needs an even head_dim <= %d (got %d)", 2 * ROPE_MAX_HALF, HD);
    InvFreq inv;
    for (int i = 0; i < HD / 2; i++) inv.f[i] = rope_inv_freq(theta, i, HD);   /* as kernels/cpu/rope.c */
    dim3 grid(0, ceil_div(NH + NKV, ROPE_HEADS));
    ACT_SWITCH(T, {
        constexpr int P = Pack16<T>::n;
        if (packable(HD / 2, sizeof(T), qkv)) {   /* half a head in whole packs: every pack is 16-byte aligned */
            grid.x = ceil_div((size_t)B * T_ * (HD / 2 / P), 256);
            rope_kernel<T, P><<<grid, 256, 0, cuda_stream>>>((T *)qkv, B * T_, T_, NH, NKV, HD, inv, pos0, sign);
        } else {
            grid.x = ceil_div((size_t)B * T_ * (HD / 2), 256);
            rope_kernel<T, 1><<<grid, 256, 0, cuda_stream>>>((T *)qkv, B * T_, T_, NH, NKV, HD, inv, pos0, sign);
        }
    });
    launchCheck();
}
extern "C" void rope_forward_cuda(void *qkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cuda(qkv, B, T, NH, NKV, HD, theta, pos0, 1.0f);
}
extern "C" void rope_backward_cuda(void *dqkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_cuda(dqkv, B, T, NH, NKV, HD, theta, pos0, -1.0f);
}
