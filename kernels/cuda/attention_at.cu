/* kernels/cuda/attention_at.cu — attention of a query chunk at an offset against
 * K/V held apart (kernels/attention.h, context parallelism): the launchers, and
 * readable kernels for every dtype and head_dim the other attention kernels take.
 *
 * The idea: the same online softmax as the whole-sequence kernels, one warp a
 * row, written to be read rather than fast. Forward and dq: a warp owns one
 * query (global position q0 + t) and walks keys 0 .. q0+t one at a time, each
 * lane holding channels lane, lane+32, ...; a score is a warp sum. dk|dv: a warp
 * owns one key and one KV head and walks every query of the chunk at or after
 * it, for each query head of the group, then ADDS its sums into the fp32 dkv
 * (each (key, KV head) row is one warp's: no atomics, deterministic). The dq
 * kernel writes the row sums D = dout . out for the dk|dv kernel.
 * bf16/fp16 at head_dim 64 with 16-byte aligned tensors go to the tensor-core
 * kernels of attention_mma.cu instead, and on Hopper, at head_dim 64 or 128, the
 * forward to attention_fa3.cu's kernel and the backward to the sweep of
 * attention_fa3_backward.cu (after attention.cu's Dsum pass), the whole
 * sequence's kernels at an offset (LLM3D_ATTENTION=simple keeps these). */
#include "common.cuh"
#include <math.h>
extern "C" {
#include "../attention.h"
#include "../../common/util.h"
#include "cuda_extras.h"
}

#define AT_WARPS 8   /* rows (queries or keys) a block */
#define AT_MAXR 4    /* channels a lane: head_dim <= 128 */

/* out (B,Tq,NH*HD), lse (B,NH,Tq): query t of (b, h) at position q0 + t against keys 0 .. q0+t of kv (B,Tk,2*NKV*HD) */
template <typename T> __global__ void at_forward_kernel(T *out, float *lse, const T *qkv, const T *kv, int Tq, int q0, int Tk,
                                                        int NH, int NKV, int HD, float scale) {
    int t = blockIdx.x * AT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    if (t >= Tq) return;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD, KVW = (size_t)2 * NKV * HD;
    const T *q = qkv + ((size_t)b * Tq + t) * QKV + (size_t)h * HD;
    const T *keys = kv + (size_t)b * Tk * KVW + (size_t)kvh * HD, *vals = keys + (size_t)NKV * HD;
    float qr[AT_MAXR], o[AT_MAXR] = {0}, m = -INFINITY, l = 0;
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++) qr[r] = lane + 32 * r < HD ? to_f(q[lane + 32 * r]) : 0.0f;
    for (int u = 0; u <= q0 + t; u++) {
        float s = 0;
#pragma unroll
        for (int r = 0; r < AT_MAXR; r++)
            if (lane + 32 * r < HD) s += qr[r] * to_f(keys[(size_t)u * KVW + lane + 32 * r]);
        s = warp_sum(s) * scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);   /* m = -inf at u = 0: corr 0 */
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < AT_MAXR; r++)
            if (lane + 32 * r < HD) o[r] = o[r] * corr + p * to_f(vals[(size_t)u * KVW + lane + 32 * r]);
        m = mn;
    }
    T *y = out + ((size_t)b * Tq + t) * NH * HD + (size_t)h * HD;
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++)
        if (lane + 32 * r < HD) y[lane + 32 * r] = from_f<T>(o[r] / l);
    if (lane == 0) lse[((size_t)b * NH + h) * Tq + t] = m + logf(l);
}

/* the q part of dqkv (B,Tq,QKV) for query t of (b, h); Dsum (B,NH,Tq) = dout . out for the dk|dv kernel */
template <typename T> __global__ void at_backward_dq_kernel(T *dqkv, float *Dsum, const T *dout, const T *qkv, const T *kv, const T *out,
                                                            const float *lse, int Tq, int q0, int Tk, int NH, int NKV, int HD, float scale) {
    int t = blockIdx.x * AT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    if (t >= Tq) return;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD, KVW = (size_t)2 * NKV * HD, row = ((size_t)b * Tq + t);
    const T *q = qkv + row * QKV + (size_t)h * HD, *dy = dout + row * NH * HD + (size_t)h * HD, *y = out + row * NH * HD + (size_t)h * HD;
    const T *keys = kv + (size_t)b * Tk * KVW + (size_t)kvh * HD, *vals = keys + (size_t)NKV * HD;
    float qr[AT_MAXR], dyr[AT_MAXR], dq[AT_MAXR] = {0}, D = 0;
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++) {
        int d = lane + 32 * r;
        qr[r] = d < HD ? to_f(q[d]) : 0.0f;
        dyr[r] = d < HD ? to_f(dy[d]) : 0.0f;
        if (d < HD) D += dyr[r] * to_f(y[d]);
    }
    D = warp_sum(D);
    float L = lse[((size_t)b * NH + h) * Tq + t];
    for (int u = 0; u <= q0 + t; u++) {
        float s = 0, dp = 0;
#pragma unroll
        for (int r = 0; r < AT_MAXR; r++)
            if (lane + 32 * r < HD) {
                s += qr[r] * to_f(keys[(size_t)u * KVW + lane + 32 * r]);
                dp += dyr[r] * to_f(vals[(size_t)u * KVW + lane + 32 * r]);
            }
        s = warp_sum(s);
        dp = warp_sum(dp);
        float p = expf(s * scale - L), ds = p * (dp - D) * scale;
#pragma unroll
        for (int r = 0; r < AT_MAXR; r++)
            if (lane + 32 * r < HD) dq[r] += ds * to_f(keys[(size_t)u * KVW + lane + 32 * r]);
    }
    T *g = dqkv + row * QKV + (size_t)h * HD;
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++)
        if (lane + 32 * r < HD) g[lane + 32 * r] = from_f<T>(dq[r]);
    if (lane == 0) Dsum[((size_t)b * NH + h) * Tq + t] = D;
}

/* dkv (B,Tk,2*NKV*HD) fp32 += the gradients of key u (< q0+Tq) of (b, kv head) from every query of the chunk at or after it */
template <typename T> __global__ void at_backward_dkv_kernel(float *dkv, const T *dout, const T *qkv, const T *kv, const float *lse,
                                                             const float *Dsum, int Tq, int q0, int Tk, int NH, int NKV, int HD, float scale) {
    int u = blockIdx.x * AT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    if (u >= q0 + Tq) return;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD, KVW = (size_t)2 * NKV * HD;
    const T *k = kv + ((size_t)b * Tk + u) * KVW + (size_t)kvh * HD, *v = k + (size_t)NKV * HD;
    float kr[AT_MAXR], vr[AT_MAXR], dk[AT_MAXR] = {0}, dv[AT_MAXR] = {0};
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++) {
        kr[r] = lane + 32 * r < HD ? to_f(k[lane + 32 * r]) : 0.0f;
        vr[r] = lane + 32 * r < HD ? to_f(v[lane + 32 * r]) : 0.0f;
    }
    for (int h = kvh * G; h < (kvh + 1) * G; h++)
        for (int t = u > q0 ? u - q0 : 0; t < Tq; t++) {   /* the queries at positions >= u */
            size_t row = (size_t)b * Tq + t;
            const T *q = qkv + row * QKV + (size_t)h * HD, *dy = dout + row * NH * HD + (size_t)h * HD;
            float s = 0, dp = 0;
#pragma unroll
            for (int r = 0; r < AT_MAXR; r++)
                if (lane + 32 * r < HD) {
                    s += kr[r] * to_f(q[lane + 32 * r]);
                    dp += vr[r] * to_f(dy[lane + 32 * r]);
                }
            s = warp_sum(s);
            dp = warp_sum(dp);
            size_t at = ((size_t)b * NH + h) * Tq + t;
            float p = expf(s * scale - lse[at]), ds = p * (dp - Dsum[at]) * scale;
#pragma unroll
            for (int r = 0; r < AT_MAXR; r++)
                if (lane + 32 * r < HD) {
                    dv[r] += p * to_f(dy[lane + 32 * r]);
                    dk[r] += ds * to_f(q[lane + 32 * r]);
                }
        }
    float *gk = dkv + ((size_t)b * Tk + u) * KVW + (size_t)kvh * HD, *gv = gk + (size_t)NKV * HD;
#pragma unroll
    for (int r = 0; r < AT_MAXR; r++)
        if (lane + 32 * r < HD) { gk[lane + 32 * r] += dk[r]; gv[lane + 32 * r] += dv[r]; }
}

static void check_shape_at(int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    if (HD > 32 * AT_MAXR || HD % 2 || NKV <= 0 || NH % NKV)
        die("attention on CUDA needs an even head_dim <= %d and n_head divisible by n_kv_head (got HD=%d, NH=%d, NKV=%d)",
            32 * AT_MAXR, HD, NH, NKV);
    if (q0 < 0 || Tq < 0 || q0 + Tq > Tk) die("internal: attention at offset %d of %d queries against %d keys", q0, Tq, Tk);
}

/* the tensor-core form of attention_mma.cu: bf16/fp16, HD = 64, 16-byte aligned tensors */
extern "C" int attention_mma_supported(int HD, const void *a, const void *b, const void *c);
extern "C" void attention_forward_at_mma(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int q0, int Tk, int NH, int NKV);
extern "C" void attention_backward_at_mma(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                                          const float *lse, float *Dsum, int B, int Tq, int q0, int Tk, int NH, int NKV);

long cuda_attention_at_mma_launches = 0;
int cuda_attention_fa3_at = 0;   /* (cuda_extras.h) */

static float *dsum_buffer(int B, int Tq, int NH) {
    static void *buf = 0;
    static size_t cap = 0;
    return (float *)cuda_scratch(&buf, &cap, (size_t)B * NH * Tq * sizeof(float), "attention backward row sums (offset form)");
}

static int use_mma(int HD, const void *a, const void *b, const void *c, const void *d) {
    return !cuda_attention_simple && attention_mma_supported(HD, a, b, c) && attention_mma_supported(HD, d, d, d);
}
/* Hopper's fa3 kernels at an offset (cuda_attention_fa3_at), their tensors 16-byte aligned (the tensor maps' bases) */
static int use_fa3(int HD, const void *a, const void *b, const void *c, const void *d) {
    return cuda_attention_fa3_at && cuda_attention_wgmma && !cuda_attention_simple && attention_fa3_supported(HD, a, b) &&
           attention_fa3_supported(HD, c, d);
}

extern "C" void attention_forward_at_cuda(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int q0, int Tk, int NH,
                                          int NKV, int HD) {
    check_shape_at(Tq, q0, Tk, NH, NKV, HD);
    if (B * Tq == 0) return;
    if (cuda_attention_fa3 && use_fa3(HD, out, qkv, kv, kv)) {   /* Hopper: the whole-sequence forward's kernel, at an offset */
        attention_forward_at_fa3(out, lse, qkv, kv, B, Tq, q0, Tk, NH, NKV, HD);
        return;
    }
    if (use_mma(HD, out, qkv, kv, kv)) {
        cuda_attention_at_mma_launches++;
        attention_forward_at_mma(out, lse, qkv, kv, B, Tq, q0, Tk, NH, NKV);
        return;
    }
    ACT_SWITCH(T, {
        at_forward_kernel<T><<<dim3(ceil_div(Tq, AT_WARPS), NH, B), AT_WARPS * 32, 0, cuda_stream>>>(
            (T *)out, lse, (const T *)qkv, (const T *)kv, Tq, q0, Tk, NH, NKV, HD, 1.0f / sqrtf((float)HD));
    });
    launchCheck();
}

extern "C" void attention_backward_at_cuda(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                                           const float *lse, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    check_shape_at(Tq, q0, Tk, NH, NKV, HD);
    if (B * Tq == 0) return;
    float *Dsum = dsum_buffer(B, Tq, NH);
    /* Hopper: the whole-sequence backward's sweep at an offset (dkv takes 8-byte adds) */
    if (cuda_attention_fa3_backward && use_fa3(HD, dqkv, dout, qkv, kv) && attention_fa3_supported(HD, out, out) && (uintptr_t)dkv % 8 == 0) {
        attention_dsum_cuda(Dsum, dout, out, B, Tq, NH, HD);
        attention_backward_at_fa3(dqkv, dkv, dout, qkv, kv, lse, Dsum, B, Tq, q0, Tk, NH, NKV, HD);
        return;
    }
    if (use_mma(HD, dqkv, dout, qkv, kv) && attention_mma_supported(HD, out, out, out)) {
        cuda_attention_at_mma_launches++;
        attention_backward_at_mma(dqkv, dkv, dout, qkv, kv, out, lse, Dsum, B, Tq, q0, Tk, NH, NKV);
        return;
    }
    float scale = 1.0f / sqrtf((float)HD);
    ACT_SWITCH(T, {
        at_backward_dq_kernel<T><<<dim3(ceil_div(Tq, AT_WARPS), NH, B), AT_WARPS * 32, 0, cuda_stream>>>(
            (T *)dqkv, Dsum, (const T *)dout, (const T *)qkv, (const T *)kv, (const T *)out, lse, Tq, q0, Tk, NH, NKV, HD, scale);
        launchCheck();
        at_backward_dkv_kernel<T><<<dim3(ceil_div(q0 + Tq, AT_WARPS), NKV, B), AT_WARPS * 32, 0, cuda_stream>>>(
            dkv, (const T *)dout, (const T *)qkv, (const T *)kv, lse, Dsum, Tq, q0, Tk, NH, NKV, HD, scale);
    });
    launchCheck();
}
