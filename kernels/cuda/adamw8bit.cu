/* kernels/cuda/adamw8bit.cu — 8-bit AdamW (kernels/adamw8bit.h) in one launch.
 *
 * The idea: every slice is cut into its blocks (kernels/adamw8bit.h: at most
 * 256 elements, within rows; fp32-state slices into pieces of 256) and one warp
 * takes one of them, a lane holding 8 elements. Where the piece is whole and its memory
 * is aligned (weights, grads, compute copy and fp32 state on 16 bytes, codes
 * on 8: every whole block of a slice whose offset and rows are multiples of 8
 * elements, in buffers as the optimizer lays them out; l124m's o_proj rows of
 * 192 make blocks of 192, which take the lane-by-lane path),
 * a lane's 8 are contiguous (lane * 8 ...): its weights and grads come in two
 * 16-byte loads each, its m and v codes in one 8-byte load each, and go back
 * the same way (a 16-bit compute copy in one 16-byte store). Elsewhere (a
 * slice's partial last piece, a slice off that alignment) a lane takes
 * elements lane, lane + 32, ... one at a time, so a warp's access is still
 * one contiguous run. Either way a quantized piece is dequantized (map value
 * * absmax), stepped in fp32, reduced to its new absmax by warp shuffles (no
 * barrier: the piece never leaves its warp) and requantized by binary search
 * over the map, which sits in shared memory (copied from __constant__, where
 * adamw8bit_map's host table is uploaded once) twice: in order for
 * dequantizing, and level by level as its search tree, whose probes seldom
 * meet in a shared-memory bank (see q8_nearest). v is kept as s = sqrt(v) on
 * the same map (kernels/adamw8bit.h): decoded v = s * s (the smallest denormal
 * if that underflows), requantized from the step's own sqrt(v), and an s above
 * 0 never takes a code below ADAMW8BIT_V_FLOOR (q8_v_code). The 8 independent elements a
 * lane holds give the scheduler work while loads and searches wait. A piece
 * of an fp32-state slice does the plain fp32 update, with the same two
 * layouts. The slice list is cached on the device like kernels/cuda/adamw.cu's.
 * All arithmetic goes through the _rn intrinsics, so nothing is contracted
 * into an FMA, and a max is exact in any order: each result is the CPU
 * reference's, bit for bit, whichever layout a piece takes. */
#include "common.cuh"
#include <math.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "../adamw8bit.h"
#include "../../common/util.h"
}

__constant__ float q8_map[256];

struct Q8Slice { size_t offset, count, state, block, row; float weight_decay; int quantized; int first_block; };

/* adamw8bit_nearest of kernels/adamw8bit.h: the last map[k] <= x, then k or k + 1. The same probes
 * map[k + step] in the same order, read from the map laid out as its search tree, level by level
 * (tree[1] = map[128], tree[2..3] = map[64], map[192], tree[4..7] = map[32], ...: node t of level l is
 * map[(2 (t - 2^l) + 1) 128 / 2^l], and k = t - 256 at the end), so the probes of one level sit side by
 * side and a warp's lanes seldom meet in a bank, where map[64 j] all share one. map[k] and map[k + 1]
 * are the last probes found <= x and > x (map[0] if none was <= x; none > x only for k = 255). */
__device__ __forceinline__ uint8_t q8_nearest(const float *tree, float map0, float x) {
    int t = 1;
    float lo = map0, hi = 0.0f;
#pragma unroll
    for (int l = 0; l < 8; l++) {
        float y = tree[t];
        bool right = y <= x;
        lo = right ? y : lo;
        hi = right ? hi : y;
        t = 2 * t + right;
    }
    int k = t - 256;
    if (k == 255) return 255;
    return (uint8_t)(__fsub_rn(hi, x) < __fsub_rn(x, lo) ? k + 1 : k);
}
/* adamw8bit_v_code and adamw8bit_v_value of kernels/adamw8bit.h: s = sqrt(v) to its code (at least
 * ADAMW8BIT_V_FLOOR for an s above 0), and a map value back to v */
__device__ __forceinline__ uint8_t q8_v_code(const float *tree, float map0, float s, float absmax) {
    uint8_t c = q8_nearest(tree, map0, absmax > 0.0f ? __fdiv_rn(s, absmax) : 0.0f);
    return s > 0.0f && c < ADAMW8BIT_V_FLOOR ? ADAMW8BIT_V_FLOOR : c;
}
__device__ __forceinline__ float q8_v_value(float map_value, float absmax) {
    float s = __fmul_rn(map_value, absmax), v = __fmul_rn(s, s);
    return v == 0.0f && s > 0.0f ? 1.4e-45f : v;
}

/* the fp32 AdamW step of one element, in kernels/cpu/adamw.c's order, no contraction; CAP: a quantized
 * block's, its Adam term clamped to [-max_step, max_step] by the comparisons of adamw8bit_element */
template <bool CAP>
__device__ __forceinline__ float q8_step(float p, float g, float &m, float &v, float decay, float b1, float b2,
                                         float omb1, float omb2, float eps, float step_size, float bc2_sqrt, float max_step) {
    p = __fmul_rn(p, decay);
    m = __fadd_rn(__fmul_rn(b1, m), __fmul_rn(omb1, g));
    v = __fadd_rn(__fmul_rn(b2, v), __fmul_rn(__fmul_rn(omb2, g), g));
    float u = __fdiv_rn(__fmul_rn(step_size, m), __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps));
    if (CAP) u = u > max_step ? max_step : u < -max_step ? -max_step : u;
    return __fsub_rn(p, u);
}

#define Q8_WARPS 8                     /* pieces (warps) per CUDA block */
#define Q8_PER_LANE (ADAMW8BIT_BLOCK / 32)

/* 8 contiguous elements (16-byte aligned) to and from fp32: 16-byte packs */
template <typename T> __device__ __forceinline__ void q8_load8(const T *p, float *x) {
    constexpr int P = Pack16<T>::n;
#pragma unroll
    for (int h = 0; h < Q8_PER_LANE; h += P) {
        Vec<T, P> r = vload<T, P>(p + h);
#pragma unroll
        for (int k = 0; k < P; k++) x[h + k] = r.v[k];
    }
}
template <typename T> __device__ __forceinline__ void q8_store8(T *p, const float *x) {
    constexpr int P = Pack16<T>::n;
#pragma unroll
    for (int h = 0; h < Q8_PER_LANE; h += P) {
        Vec<T, P> r;
#pragma unroll
        for (int k = 0; k < P; k++) r.v[k] = x[h + k];
        vstore<T, P>(p + h, r);
    }
}
/* byte k (0..7) of 8 codes loaded as one uint2 (little-endian: element order) */
__device__ __forceinline__ int q8_byte(uint2 c, int k) { return ((k < 4 ? c.x : c.y) >> (8 * (k % 4))) & 0xff; }
__device__ __forceinline__ bool q8_aligned(const void *a, const void *b, const void *c, int bytes) {
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % bytes == 0;
}

/* params, grads (P) fp32; params_compute (P) act dtype or NULL; codes (Q) uint8 (m, sqrt(v)), absmax (Q/256), m32/v32 (S) fp32 */
template <typename T> __global__ void __launch_bounds__(32 * Q8_WARPS)
adamw8bit_kernel(float *params, T *params_compute, const float *grads, AdamW8bitState st, const Q8Slice *slices,
                 int n_slices, int n_pieces, float lr, float b1, float b2, float omb1, float omb2, float eps, float gs,
                 float step_size, float bc2_sqrt, float max_step) {
    __shared__ float ms[256], ts[256];   /* the map (dequantizing) and its search tree */
    for (int k = threadIdx.x; k < 256; k += blockDim.x) {
        ms[k] = q8_map[k];
        int l = 31 - __clz(k | 1), node = k ? (2 * (k - (1 << l)) + 1) << (7 - l) : 0;   /* tree[0]: unused */
        ts[k] = q8_map[node];
    }
    __syncthreads();   /* the only barrier: from here on each warp owns its piece */
    int lane = threadIdx.x % 32, piece = blockIdx.x * Q8_WARPS + threadIdx.x / 32;
    if (piece >= n_pieces) return;
    int lo = 0, hi = n_slices - 1;   /* last slice whose first piece <= piece */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (slices[mid].first_block <= piece) lo = mid; else hi = mid - 1;
    }
    Q8Slice s = slices[lo];
    float decay = __fsub_rn(1.0f, __fmul_rn(lr, s.weight_decay));
    /* 64-bit arithmetic once per piece (adamw8bit_block_span's); below, 32-bit offsets inside it */
    size_t b = (size_t)(piece - s.first_block), per = (s.row + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK, r = b / per;
    size_t j0 = r * s.row + b % per * ADAMW8BIT_BLOCK;                  /* the piece's first element in the slice */
    size_t end = r * s.row + s.row < s.count ? r * s.row + s.row : s.count;
    int n = end - j0 < ADAMW8BIT_BLOCK ? (int)(end - j0) : ADAMW8BIT_BLOCK;   /* its elements */
    float *p = params + s.offset + j0;                                  /* (n) weights */
    const float *g = grads + s.offset + j0;                             /* (n) grads */
    T *pc = params_compute ? params_compute + s.offset + j0 : NULL;     /* (n) compute copy or NULL */
    bool whole = n == ADAMW8BIT_BLOCK && q8_aligned(p, g, pc, 16);      /* warp-uniform, like every test below */
    int e = lane * Q8_PER_LANE;   /* the lane's first element on the contiguous layout */
    float x[Q8_PER_LANE], m[Q8_PER_LANE], v[Q8_PER_LANE];
    if (!s.quantized) {
        float *m32 = st.m32 + s.state + j0, *v32 = st.v32 + s.state + j0;   /* (n) fp32 moments */
        if (whole && q8_aligned(m32, v32, NULL, 16)) {
            float gr[Q8_PER_LANE];
            q8_load8(p + e, x);
            q8_load8(g + e, gr);
            q8_load8(m32 + e, m);
            q8_load8(v32 + e, v);
#pragma unroll
            for (int k = 0; k < Q8_PER_LANE; k++)
                x[k] = q8_step<false>(x[k], __fmul_rn(gr[k], gs), m[k], v[k], decay, b1, b2, omb1, omb2, eps, step_size, bc2_sqrt, 0.0f);
            q8_store8(m32 + e, m);
            q8_store8(v32 + e, v);
            q8_store8(p + e, x);
            if (pc) q8_store8(pc + e, x);
            return;
        }
#pragma unroll
        for (int k = 0; k < Q8_PER_LANE; k++) {
            int j = k * 32 + lane;
            if (j >= n) continue;
            float mk = m32[j], vk = v32[j];
            float pj = q8_step<false>(p[j], __fmul_rn(g[j], gs), mk, vk, decay, b1, b2, omb1, omb2, eps, step_size, bc2_sqrt, 0.0f);
            m32[j] = mk;
            v32[j] = vk;
            p[j] = pj;
            if (pc) pc[j] = from_f<T>(pj);
        }
        return;
    }
    size_t q0 = s.state + j0, blk = s.block + b;
    uint8_t *mc = st.m_code + q0, *vc = st.v_code + q0;   /* (n) the piece's codes */
    float am_old = st.m_absmax[blk], av_old = st.v_absmax[blk], am = 0.0f, av = 0.0f;
    if (whole && q8_aligned(mc, vc, NULL, 8)) {
        float gr[Q8_PER_LANE];
        q8_load8(p + e, x);
        q8_load8(g + e, gr);
        uint2 cm = *reinterpret_cast<const uint2 *>(mc + e), cv = *reinterpret_cast<const uint2 *>(vc + e);
#pragma unroll
        for (int k = 0; k < Q8_PER_LANE; k++) {
            m[k] = __fmul_rn(ms[q8_byte(cm, k)], am_old);
            v[k] = q8_v_value(ms[q8_byte(cv, k)], av_old);
            x[k] = q8_step<true>(x[k], __fmul_rn(gr[k], gs), m[k], v[k], decay, b1, b2, omb1, omb2, eps, step_size, bc2_sqrt, max_step);
            v[k] = __fsqrt_rn(v[k]);   /* from here on s */
            am = fmaxf(am, fabsf(m[k]));
            av = fmaxf(av, v[k]);
        }
        q8_store8(p + e, x);
        if (pc) q8_store8(pc + e, x);
        am = warp_max(am);
        av = warp_max(av);
        cm = make_uint2(0, 0);
        cv = make_uint2(0, 0);
#pragma unroll
        for (int k = 0; k < Q8_PER_LANE; k++) {
            uint32_t bm = (uint32_t)q8_nearest(ts, ms[0], am > 0.0f ? __fdiv_rn(m[k], am) : 0.0f) << (8 * (k % 4));
            uint32_t bv = (uint32_t)q8_v_code(ts, ms[0], v[k], av) << (8 * (k % 4));
            if (k < 4) { cm.x |= bm; cv.x |= bv; } else { cm.y |= bm; cv.y |= bv; }
        }
        *reinterpret_cast<uint2 *>(mc + e) = cm;
        *reinterpret_cast<uint2 *>(vc + e) = cv;
    } else {
#pragma unroll
        for (int k = 0; k < Q8_PER_LANE; k++) {
            int j = k * 32 + lane;
            m[k] = 0.0f; v[k] = 0.0f;
            if (j >= n) continue;
            m[k] = __fmul_rn(ms[mc[j]], am_old);
            v[k] = q8_v_value(ms[vc[j]], av_old);
            float pj = q8_step<true>(p[j], __fmul_rn(g[j], gs), m[k], v[k], decay, b1, b2, omb1, omb2, eps, step_size, bc2_sqrt, max_step);
            v[k] = __fsqrt_rn(v[k]);   /* from here on s */
            p[j] = pj;
            if (pc) pc[j] = from_f<T>(pj);
            am = fmaxf(am, fabsf(m[k]));
            av = fmaxf(av, v[k]);
        }
        am = warp_max(am);
        av = warp_max(av);
#pragma unroll
        for (int k = 0; k < Q8_PER_LANE; k++) {
            int j = k * 32 + lane;
            if (j >= n) continue;
            mc[j] = q8_nearest(ts, ms[0], am > 0.0f ? __fdiv_rn(m[k], am) : 0.0f);
            vc[j] = q8_v_code(ts, ms[0], v[k], av);
        }
    }
    if (lane == 0) {
        st.m_absmax[blk] = am;
        st.v_absmax[blk] = av;
    }
}

extern "C" void adamw8bit_update_cuda(float *params, void *params_compute, const float *grads, AdamW8bitState st,
                                      const AdamW8bitSlice *slices, int n_slices, AdamWHyper h) {
    static int maps_uploaded = 0;
    static AdamW8bitSlice *host_copy = 0;   /* the cached slice list, re-uploaded only when it changes */
    static int host_n = 0, total_blocks = 0;
    static void *dev = 0;
    static size_t dev_cap = 0;
    if (n_slices <= 0) return;
    if (!maps_uploaded) {
        cudaCheck(cudaMemcpyToSymbol(q8_map, adamw8bit_map(), 256 * sizeof(float)));
        maps_uploaded = 1;
    }
    if (n_slices != host_n || memcmp(host_copy, slices, n_slices * sizeof(AdamW8bitSlice)) != 0) {
        free(host_copy);
        host_copy = (AdamW8bitSlice *)mallocCheck(n_slices * sizeof(AdamW8bitSlice));
        memcpy(host_copy, slices, n_slices * sizeof(AdamW8bitSlice));
        host_n = n_slices;
        Q8Slice *d = (Q8Slice *)mallocCheck(n_slices * sizeof(Q8Slice));
        total_blocks = 0;
        for (int s = 0; s < n_slices; s++) {
            if (!slices[s].row) die("internal: 8-bit AdamW slice %d has rows of 0 elements", s);
            d[s] = Q8Slice{slices[s].offset, slices[s].count, slices[s].state, slices[s].block, slices[s].row,
                           slices[s].weight_decay, slices[s].quantized, total_blocks};
            total_blocks += (int)adamw8bit_slice_blocks(&slices[s]);
        }
        cuda_scratch(&dev, &dev_cap, n_slices * sizeof(Q8Slice), "8-bit AdamW slice list");
        cudaCheck(cudaMemcpyAsync(dev, d, n_slices * sizeof(Q8Slice), cudaMemcpyHostToDevice, cuda_stream));
        cudaCheck(cudaStreamSynchronize(cuda_stream));
        free(d);
    }
    if (total_blocks == 0) return;
    /* the same host arithmetic as kernels/cpu/adamw8bit.c */
    float bc1 = 1.0f - powf(h.beta1, (float)h.step), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)h.step));
    float step_size = h.lr / bc1, omb1 = 1.0f - h.beta1, omb2 = 1.0f - h.beta2, max_step = adamw8bit_max_step(h);
    ACT_SWITCH(T, {
        adamw8bit_kernel<T><<<ceil_div(total_blocks, Q8_WARPS), 32 * Q8_WARPS, 0, cuda_stream>>>(
            params, (T *)params_compute, grads, st, (const Q8Slice *)dev, n_slices, total_blocks, h.lr, h.beta1, h.beta2,
            omb1, omb2, h.eps, h.grad_scale, step_size, bc2_sqrt, max_step);
    });
    launchCheck();
}
