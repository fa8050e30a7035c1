/* kernels/cuda/attention.cu — causal grouped-query attention read in place from
 * the fused qkv activation: the readable hand-written kernels, and the launchers
 * that pick between them and the tensor-core path.
 *
 * The idea (flash attention, written for reading): a block owns 8 queries of one
 * (b, head), one warp each, and walks the keys in tiles of 32 staged in shared
 * memory as fp32. Lane j scores key j of the tile; the warp keeps a running max
 * and sum (online softmax) and each lane accumulates the output channels
 * d = lane, lane+32, ... . The forward saves lse; the backward recomputes the
 * probabilities from q, k and lse, in two kernels that each own what they write:
 * one per query (dq), one per key and KV head (dk, dv, summing over the query
 * heads of the group), so no atomics are needed and results are deterministic.
 * All arithmetic is fp32; storage is the act dtype. HD <= 128, even.
 * attention_forward_cuda / attention_backward_cuda run the tensor-core kernels
 * where they apply (bf16/fp16, HD = 64): Hopper's wgmma kernels of
 * attention_wgmma.cu on an sm_90 GPU with sm_90a code in the binary, else the
 * mma.sync kernels of attention_mma.cu; LLM3D_ATTENTION=mma or =simple forces
 * the portable or the readable path, =recompute the Hopper backward that computes
 * dS again at every T (its default above ATTENTION_DS_MAX_T, kernels/attention.h),
 * =wgmma Hopper's first kernels (attention_wgmma*.cu) forward and backward, =fa3
 * the warp-specialized forward and backward (attention_fa3*.cu, HD 64 and 128).
 * Unset, Hopper runs the fa3 forward, and the fa3 backward where the wgmma one
 * would store no dS tiles (T past ATTENTION_DS_MAX_T, head_dim 128), else the
 * wgmma backward. These
 * readable kernels run everywhere else. */
#include "common.cuh"
#include <math.h>
extern "C" {
#include "../attention.h"
#include "../rope.h"
#include "../../common/util.h"
#include "cuda_extras.h"
}

#define ATT_WARPS 8      /* queries (or keys) per block */
#define ATT_TILE 32      /* keys (or queries) per shared-memory tile */
#define ATT_MAXR 4       /* output channels per lane: HD <= 32 * ATT_MAXR */

/* tile (rows,HD) of one head from a (B,T,stride) tensor into shared fp32 rows of pitch HD+1 */
template <typename T> __device__ void load_tile(float *dst, const T *base, int t0, int rows, int T_, size_t stride, int HD) {
    for (int e = threadIdx.x; e < rows * HD; e += blockDim.x) {
        int r = e / HD, d = e % HD, t = t0 + r;
        dst[r * (HD + 1) + d] = t < T_ ? to_f(base[(size_t)t * stride + d]) : 0.0f;
    }
}

/* out (B,T,NH*HD), lse (B,NH,T) from qkv (B,T,(NH+2*NKV)*HD) */
template <typename T> __global__ void attention_forward_kernel(T *out, float *lse, const T *qkv, int T_, int NH, int NKV,
                                                               int HD, float scale) {
    extern __shared__ float sm[];
    float *q_s = sm;                               /* (ATT_WARPS, HD+1) */
    float *k_s = q_s + ATT_WARPS * (HD + 1);       /* (ATT_TILE, HD+1) */
    float *v_s = k_s + ATT_TILE * (HD + 1);        /* (ATT_TILE, HD+1) */
    int b = blockIdx.z, h = blockIdx.y, kvh = h / (NH / NKV);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int t0 = blockIdx.x * ATT_WARPS, t = t0 + w;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    load_tile(q_s, base + h * HD, t0, ATT_WARPS, T_, QKV, HD);
    float mx = -INFINITY, sum = 0, o[ATT_MAXR] = {0};
    int last = min(t0 + ATT_WARPS, T_) - 1;        /* the block's last query sees keys 0..last */
    for (int u0 = 0; u0 <= last; u0 += ATT_TILE) {
        __syncthreads();
        load_tile(k_s, base + (NH + kvh) * HD, u0, ATT_TILE, T_, QKV, HD);
        load_tile(v_s, base + (NH + NKV + kvh) * HD, u0, ATT_TILE, T_, QKV, HD);
        __syncthreads();
        if (t >= T_ || u0 > t) continue;
        float s = 0;
        for (int d = 0; d < HD; d++) s += q_s[w * (HD + 1) + d] * k_s[lane * (HD + 1) + d];
        s = u0 + lane <= t ? s * scale : -INFINITY;
        float m2 = fmaxf(mx, warp_max(s));
        float p = expf(s - m2), corr = expf(mx - m2);
        sum = sum * corr + warp_sum(p);
        mx = m2;
#pragma unroll
        for (int r = 0; r < ATT_MAXR; r++) o[r] *= corr;
        for (int j = 0; j < ATT_TILE; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int r = 0; r < ATT_MAXR; r++) {
                int d = lane + 32 * r;
                if (d < HD) o[r] += pj * v_s[j * (HD + 1) + d];
            }
        }
    }
    if (t >= T_) return;
    T *y = out + ((size_t)b * T_ + t) * NH * HD + h * HD;
#pragma unroll
    for (int r = 0; r < ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD) y[d] = from_f<T>(o[r] / sum);
    }
    if (lane == 0) lse[((size_t)b * NH + h) * T_ + t] = mx + logf(sum);
}

/* Dsum (B,NH,T) = sum_d dout * out, per query: 8 threads a (b, t, h) row, each P elements at a time (16-byte loads
 * when P > 1: HD = 64 in bf16 is one load a thread), then summed across the 8 */
template <typename T, int P> __global__ void attention_dsum_kernel(float *Dsum, const T *dout, const T *out, int B, int T_, int NH,
                                                                   int HD) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 8) + threadIdx.x / 8;   /* (b, t, h) */
    bool live = row < (size_t)B * T_ * NH;
    float s = 0;
    for (int d = threadIdx.x % 8 * P; live && d < HD; d += 8 * P) {
        Vec<T, P> a = vload<T, P>(dout + row * HD + d), o = vload<T, P>(out + row * HD + d);
#pragma unroll
        for (int e = 0; e < P; e++) s += a.v[e] * o.v[e];
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);   /* every lane takes part: the 8 of a row are aligned lanes */
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (threadIdx.x % 8 == 0 && live) {
        int h = row % NH, t = row / NH % T_, b = row / NH / T_;
        Dsum[((size_t)b * NH + h) * T_ + t] = s;
    }
}

/* dq part of dqkv: one warp per query t of head h; keys 0..t in tiles */
template <typename T> __global__ void attention_backward_dq_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                                                   const float *Dsum, int T_, int NH, int NKV, int HD,
                                                                   float scale) {
    extern __shared__ float sm[];
    float *q_s = sm;                               /* (ATT_WARPS, HD+1) */
    float *dy_s = q_s + ATT_WARPS * (HD + 1);      /* (ATT_WARPS, HD+1) */
    float *k_s = dy_s + ATT_WARPS * (HD + 1);      /* (ATT_TILE, HD+1) */
    float *v_s = k_s + ATT_TILE * (HD + 1);        /* (ATT_TILE, HD+1) */
    int b = blockIdx.z, h = blockIdx.y, kvh = h / (NH / NKV);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int t0 = blockIdx.x * ATT_WARPS, t = t0 + w;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    load_tile(q_s, base + h * HD, t0, ATT_WARPS, T_, QKV, HD);
    load_tile(dy_s, dout + (size_t)b * T_ * NH * HD + h * HD, t0, ATT_WARPS, T_, (size_t)NH * HD, HD);
    float L = 0, D = 0, dq[ATT_MAXR] = {0};
    if (t < T_) { L = lse[((size_t)b * NH + h) * T_ + t]; D = Dsum[((size_t)b * NH + h) * T_ + t]; }
    int last = min(t0 + ATT_WARPS, T_) - 1;
    for (int u0 = 0; u0 <= last; u0 += ATT_TILE) {
        __syncthreads();
        load_tile(k_s, base + (NH + kvh) * HD, u0, ATT_TILE, T_, QKV, HD);
        load_tile(v_s, base + (NH + NKV + kvh) * HD, u0, ATT_TILE, T_, QKV, HD);
        __syncthreads();
        if (t >= T_ || u0 > t) continue;
        float s = 0, dp = 0;
        for (int d = 0; d < HD; d++) {
            s += q_s[w * (HD + 1) + d] * k_s[lane * (HD + 1) + d];
            dp += dy_s[w * (HD + 1) + d] * v_s[lane * (HD + 1) + d];
        }
        float p = u0 + lane <= t ? expf(s * scale - L) : 0.0f;
        float ds = p * (dp - D) * scale;
        for (int j = 0; j < ATT_TILE; j++) {
            float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
            for (int r = 0; r < ATT_MAXR; r++) {
                int d = lane + 32 * r;
                if (d < HD) dq[r] += dsj * k_s[j * (HD + 1) + d];
            }
        }
    }
    if (t >= T_) return;
    T *g = dqkv + ((size_t)b * T_ + t) * QKV + h * HD;
#pragma unroll
    for (int r = 0; r < ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD) g[d] = from_f<T>(dq[r]);
    }
}

/* dk, dv parts of dqkv: one warp per key u of KV head kvh; queries u..T-1 of every head in the group */
template <typename T> __global__ void attention_backward_dkv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                                                    const float *Dsum, int T_, int NH, int NKV, int HD,
                                                                    float scale) {
    extern __shared__ float sm[];
    float *k_s = sm;                               /* (ATT_WARPS, HD+1) */
    float *v_s = k_s + ATT_WARPS * (HD + 1);       /* (ATT_WARPS, HD+1) */
    float *q_s = v_s + ATT_WARPS * (HD + 1);       /* (ATT_TILE, HD+1) */
    float *dy_s = q_s + ATT_TILE * (HD + 1);       /* (ATT_TILE, HD+1) */
    float *L_s = dy_s + ATT_TILE * (HD + 1);       /* (ATT_TILE) */
    float *D_s = L_s + ATT_TILE;                   /* (ATT_TILE) */
    int b = blockIdx.z, kvh = blockIdx.y, G = NH / NKV;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int u0 = blockIdx.x * ATT_WARPS, u = u0 + w;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (size_t)b * T_ * QKV;
    load_tile(k_s, base + (NH + kvh) * HD, u0, ATT_WARPS, T_, QKV, HD);
    load_tile(v_s, base + (NH + NKV + kvh) * HD, u0, ATT_WARPS, T_, QKV, HD);
    float dk[ATT_MAXR] = {0}, dv[ATT_MAXR] = {0};
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        const float *Lh = lse + ((size_t)b * NH + h) * T_, *Dh = Dsum + ((size_t)b * NH + h) * T_;
        for (int q0 = u0 / ATT_TILE * ATT_TILE; q0 < T_; q0 += ATT_TILE) {
            __syncthreads();
            load_tile(q_s, base + h * HD, q0, ATT_TILE, T_, QKV, HD);
            load_tile(dy_s, dout + (size_t)b * T_ * NH * HD + h * HD, q0, ATT_TILE, T_, (size_t)NH * HD, HD);
            if (threadIdx.x < ATT_TILE) {
                int tq = q0 + threadIdx.x;
                L_s[threadIdx.x] = tq < T_ ? Lh[tq] : 0.0f;
                D_s[threadIdx.x] = tq < T_ ? Dh[tq] : 0.0f;
            }
            __syncthreads();
            if (u >= T_ || q0 + ATT_TILE <= u) continue;
            int tq = q0 + lane;   /* this lane's query */
            float s = 0, dp = 0;
            for (int d = 0; d < HD; d++) {
                s += q_s[lane * (HD + 1) + d] * k_s[w * (HD + 1) + d];
                dp += dy_s[lane * (HD + 1) + d] * v_s[w * (HD + 1) + d];
            }
            float p = (tq >= u && tq < T_) ? expf(s * scale - L_s[lane]) : 0.0f;
            float ds = p * (dp - D_s[lane]) * scale;
            for (int j = 0; j < ATT_TILE; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                for (int r = 0; r < ATT_MAXR; r++) {
                    int d = lane + 32 * r;
                    if (d < HD) {
                        dv[r] += pj * dy_s[j * (HD + 1) + d];
                        dk[r] += dsj * q_s[j * (HD + 1) + d];
                    }
                }
            }
        }
    }
    if (u >= T_) return;
    T *gk = dqkv + ((size_t)b * T_ + u) * QKV + (NH + kvh) * HD, *gv = gk + (size_t)NKV * HD;
#pragma unroll
    for (int r = 0; r < ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD) { gk[d] = from_f<T>(dk[r]); gv[d] = from_f<T>(dv[r]); }
    }
}

static void check_shape(int NH, int NKV, int HD) {
    if (HD > 32 * ATT_MAXR || HD % 2 || NKV <= 0 || NH % NKV)
        die("attention on CUDA needs an even head_dim <= %d and n_head divisible by n_kv_head (got HD=%d, NH=%d, NKV=%d)",
            32 * ATT_MAXR, HD, NH, NKV);
}

/* the scratch buffer for Dsum (B,NH,T) */
static float *attention_dsum_buffer(int B, int T_, int NH) {
    static void *buf = 0;
    static size_t cap = 0;
    return (float *)cuda_scratch(&buf, &cap, (size_t)B * NH * T_ * sizeof(float), "attention backward row sums");
}
/* Dsum (B,NH,T) = rowwise dout . out (B,T,NH*HD), into Dsum (the offset form's backward calls it with T = Tq) */
extern "C" void attention_dsum_cuda(float *Dsum, const void *dout, const void *out, int B, int T_, int NH, int HD) {
    size_t blocks = ceil_div((size_t)B * T_ * NH, 16);   /* 16 rows a block of 128 */
    ACT_SWITCH(T, {
        if (packable(HD, sizeof(T), dout, out))
            attention_dsum_kernel<T, Pack16<T>::n><<<blocks, 128, 0, cuda_stream>>>(Dsum, (const T *)dout, (const T *)out, B, T_, NH, HD);
        else
            attention_dsum_kernel<T, 1><<<blocks, 128, 0, cuda_stream>>>(Dsum, (const T *)dout, (const T *)out, B, T_, NH, HD);
    });
    launchCheck();
}
/* the same in the buffer above */
static float *attention_dsum(const void *dout, const void *out, int B, int T_, int NH, int HD) {
    float *Dsum = attention_dsum_buffer(B, T_, NH);
    attention_dsum_cuda(Dsum, dout, out, B, T_, NH, HD);
    return Dsum;
}

/* the readable kernels, callable on their own (the tests compare both paths) */
extern "C" void attention_forward_cuda_simple(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV, int HD) {
    check_shape(NH, NKV, HD);
    if (B * T_ == 0) return;
    size_t smem = (size_t)(ATT_WARPS + 2 * ATT_TILE) * (HD + 1) * sizeof(float);
    dim3 grid(ceil_div(T_, ATT_WARPS), NH, B);
    ACT_SWITCH(T, {
        attention_forward_kernel<T><<<grid, ATT_WARPS * 32, smem, cuda_stream>>>((T *)out, lse, (const T *)qkv, T_, NH, NKV,
                                                                                HD, 1.0f / sqrtf((float)HD));
    });
    launchCheck();
}

extern "C" void attention_backward_cuda_simple(void *dqkv, const void *dout, const void *qkv, const void *out,
                                               const float *lse, int B, int T_, int NH, int NKV, int HD, float rope_theta, void *work,
                                               size_t work_bytes) {
    (void)work; (void)work_bytes;   /* these kernels need no scratch of the caller's */
    check_shape(NH, NKV, HD);
    if (B * T_ == 0) return;
    float *Dsum = attention_dsum(dout, out, B, T_, NH, HD);
    float scale = 1.0f / sqrtf((float)HD);
    size_t smem_q = (size_t)(2 * ATT_WARPS + 2 * ATT_TILE) * (HD + 1) * sizeof(float);
    size_t smem_kv = smem_q + 2 * ATT_TILE * sizeof(float);
    ACT_SWITCH(T, {
        attention_backward_dq_kernel<T><<<dim3(ceil_div(T_, ATT_WARPS), NH, B), ATT_WARPS * 32, smem_q, cuda_stream>>>(
            (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, HD, scale);
        launchCheck();
        attention_backward_dkv_kernel<T><<<dim3(ceil_div(T_, ATT_WARPS), NKV, B), ATT_WARPS * 32, smem_kv, cuda_stream>>>(
            (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV, HD, scale);
    });
    launchCheck();
    if (rope_theta > 0) rope_backward_cuda(dqkv, B, T_, NH, NKV, HD, rope_theta, 0);
}

/* the tensor-core path of attention_mma.cu: bf16/fp16, HD = 64, 16-byte aligned tensors */
extern "C" int attention_mma_supported(int HD, const void *a, const void *b, const void *c);
extern "C" void attention_forward_mma(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV);
extern "C" void attention_backward_mma(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                       float *Dsum, int B, int T, int NH, int NKV);

/* the Hopper path of attention_wgmma.cu and attention_wgmma_backward.cu: the same shapes, sm_90a
 * (attention_wgmma_available() in cuda_extras.h) */
extern "C" void attention_forward_wgmma(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV);
extern "C" void attention_backward_wgmma(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum, int B,
                                         int T, int NH, int NKV, float rope_theta, void *work, size_t work_bytes);

int cuda_attention_simple = 0;   /* set by backend_cuda from LLM3D_ATTENTION=simple */
int cuda_attention_wgmma = 0;    /* set by backend_cuda: Hopper kernels available and not LLM3D_ATTENTION=mma */
int cuda_attention_recompute = 0;   /* set by backend_cuda from LLM3D_ATTENTION=recompute */

int cuda_attention_fa3 = 0;            /* set by backend_cuda: the fa3 forward (Hopper's default; not LLM3D_ATTENTION=wgmma) */
int cuda_attention_fa3_backward = 0;   /* set by backend_cuda: 1 from LLM3D_ATTENTION=fa3, 2 unset on Hopper (see the backward) */

extern "C" void attention_forward_cuda(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV, int HD) {
    check_shape(NH, NKV, HD);
    if (cuda_attention_fa3 && cuda_attention_wgmma && !cuda_attention_simple) {
        if (attention_fa3_supported(HD, out, qkv)) {
            attention_forward_fa3(out, lse, qkv, B, T, NH, NKV, HD);
            return;
        }
        static int said = 0;   /* once: the shape is the model's, the same at every call (fp32 runs the readable kernels) */
        if (cuda_act != DTYPE_FP32 && !said++)
            fprintf(stderr, "llm3d: attention: the fa3 forward takes head_dim 64 or 128 in bf16/fp16 with 16-byte aligned tensors "
                            "(head_dim %d here); the other kernels run\n", HD);
    }
    if (!cuda_attention_simple && attention_mma_supported(HD, out, qkv, qkv)) {
        if (B > 0 && T > 0) (cuda_attention_wgmma ? attention_forward_wgmma : attention_forward_mma)(out, lse, qkv, B, T, NH, NKV);
        return;
    }
    attention_forward_cuda_simple(out, lse, qkv, B, T, NH, NKV, HD);
}

extern "C" void attention_backward_cuda(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                        int B, int T_, int NH, int NKV, int HD, float rope_theta, void *work, size_t work_bytes) {
    check_shape(NH, NKV, HD);
    /* 1 (LLM3D_ATTENTION=fa3): always; 2 (Hopper's default, with the fa3 forward): where the wgmma backward would
     * store no dS tiles, and from ATTENTION_FA3_BWD_MIN_T where it would (there with the dQ sweep, which keeps nothing
     * the plan lacks), so attention_backward_scratch stays the same whichever runs */
    int fa3 = cuda_attention_fa3_backward == 1 ||
              (cuda_attention_fa3_backward == 2 && cuda_attention_fa3 &&
               (attention_ds_bytes(B, T_, NH, HD, cuda_attention_ds_cap) == 0 || T_ >= ATTENTION_FA3_BWD_MIN_T));
    if (fa3 && cuda_attention_wgmma && !cuda_attention_simple) {
        if (attention_fa3_supported(HD, dqkv, qkv) && attention_fa3_supported(HD, dout, out)) {   /* Dsum, then the two kernels */
            if (B * T_ > 0)
                attention_backward_fa3(dqkv, dout, qkv, lse, attention_dsum(dout, out, B, T_, NH, HD), B, T_, NH, NKV, HD, rope_theta);
            return;
        }
        static int said = 0;   /* once, as the forward's */
        if (cuda_act != DTYPE_FP32 && cuda_attention_fa3_backward == 1 && !said++)
            fprintf(stderr, "llm3d: attention: the fa3 backward takes head_dim 64 or 128 in bf16/fp16 with 16-byte aligned tensors "
                            "(head_dim %d here); the other kernels run\n", HD);
    }
    if (cuda_attention_simple || !attention_mma_supported(HD, dqkv, dout, qkv) || !attention_mma_supported(HD, out, out, out)) {
        attention_backward_cuda_simple(dqkv, dout, qkv, out, lse, B, T_, NH, NKV, HD, rope_theta, work, work_bytes);
        return;
    }
    if (B * T_ == 0) return;
    /* Dsum: the wgmma path takes it from the pass above before its dk/dv kernel; the mma.sync dq kernel computes it
     * in its prologue for the dk/dv kernel after it. The wgmma kernels rotate dq and dk back through RoPE before they
     * store them, the mma.sync path runs rope's kernel */
    if (cuda_attention_wgmma) {
        attention_backward_wgmma(dqkv, dout, qkv, lse, attention_dsum(dout, out, B, T_, NH, HD), B, T_, NH, NKV, rope_theta, work,
                                 work_bytes);
        return;
    }
    float *Dsum = attention_dsum_buffer(B, T_, NH);
    attention_backward_mma(dqkv, dout, qkv, out, lse, Dsum, B, T_, NH, NKV);
    if (rope_theta > 0) rope_backward_cuda(dqkv, B, T_, NH, NKV, HD, rope_theta, 0);
}

/* ---- generation through a KV cache --------------------------------------------------------------
 * New tokens' k and v are copied into the caches at positions pos0.., then one
 * warp per new query walks the cached keys in tiles of 32 with the same online
 * softmax as the forward kernel above (lane j scores key u0 + j). Speed does not
 * matter here (a handful of tokens against at most T keys): it is written to be
 * read. */

/* kcache, vcache (B,Tmax,NKV*HD) at pos0 .. pos0+T-1 <- the k and v of qkv (B,T,(NH+2*NKV)*HD) */
template <typename T> __global__ void kv_append_kernel(T *kc, T *vc, const T *qkv, int T_, int pos0, int Tmax, int NH, int NKV,
                                                       int HD) {
    int KV = NKV * HD, b = blockIdx.y, t = blockIdx.x;
    const T *row = qkv + ((size_t)b * T_ + t) * (NH + 2 * NKV) * HD;
    for (int e = threadIdx.x; e < KV; e += blockDim.x) {
        kc[((size_t)b * Tmax + pos0 + t) * KV + e] = row[NH * HD + e];
        vc[((size_t)b * Tmax + pos0 + t) * KV + e] = row[(NH + NKV) * HD + e];
    }
}

/* out (B,T,NH*HD): query t of head h (grid: T*NH warps per b) against cache positions 0 .. pos0+t */
template <typename T> __global__ void attention_cached_kernel(T *out, const T *kc, const T *vc, const T *qkv, int T_, int pos0,
                                                              int Tmax, int NH, int NKV, int HD, float scale) {
    int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, b = blockIdx.y;
    if (w >= T_ * NH) return;
    int t = w / NH, h = w % NH, kvh = h / (NH / NKV), KV = NKV * HD, n = pos0 + t + 1;
    const T *q = qkv + ((size_t)b * T_ + t) * (NH + 2 * NKV) * HD + h * HD;
    float mx = -INFINITY, sum = 0, o[ATT_MAXR] = {0};
    for (int u0 = 0; u0 < n; u0 += 32) {
        int u = u0 + lane;
        float s = -INFINITY;
        if (u < n) {
            const T *k = kc + ((size_t)b * Tmax + u) * KV + kvh * HD;
            s = 0;
            for (int d = 0; d < HD; d++) s += to_f(q[d]) * to_f(k[d]);
            s *= scale;
        }
        float m2 = fmaxf(mx, warp_max(s));
        float p = u < n ? expf(s - m2) : 0.0f, corr = expf(mx - m2);
        sum = sum * corr + warp_sum(p);
        mx = m2;
#pragma unroll
        for (int r = 0; r < ATT_MAXR; r++) o[r] *= corr;
        for (int j = 0; j < 32 && u0 + j < n; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const T *v = vc + ((size_t)b * Tmax + u0 + j) * KV + kvh * HD;
#pragma unroll
            for (int r = 0; r < ATT_MAXR; r++) {
                int d = lane + 32 * r;
                if (d < HD) o[r] += pj * to_f(v[d]);
            }
        }
    }
    T *y = out + ((size_t)b * T_ + t) * NH * HD + h * HD;
#pragma unroll
    for (int r = 0; r < ATT_MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD) y[d] = from_f<T>(o[r] / sum);
    }
}

extern "C" void attention_cached_cuda(void *out, void *kcache, void *vcache, const void *qkv, int B, int T_, int pos0, int Tmax,
                                      int NH, int NKV, int HD) {
    check_shape(NH, NKV, HD);
    if (B * T_ == 0) return;
    ACT_SWITCH(T, {
        kv_append_kernel<T><<<dim3(T_, B), 128, 0, cuda_stream>>>((T *)kcache, (T *)vcache, (const T *)qkv, T_, pos0, Tmax, NH,
                                                                 NKV, HD);
        launchCheck();
        attention_cached_kernel<T><<<dim3(ceil_div(T_ * NH, 4), B), 128, 0, cuda_stream>>>(
            (T *)out, (const T *)kcache, (const T *)vcache, (const T *)qkv, T_, pos0, Tmax, NH, NKV, HD, 1.0f / sqrtf((float)HD));
        launchCheck();
    });
}
