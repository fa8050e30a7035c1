/* kernels/attention.h — causal self-attention with grouped-query attention
 * read straight from the fused qkv activation: head h uses KV head
 * h / (NH/NKV), so K and V are never copied per head. Scale 1/sqrt(HD).
 * The forward saves lse = log-sum-exp of each query's scores (B,NH,T); the
 * backward recomputes the probabilities from q, k and lse (as flash attention
 * does), so no (T,T) matrix is ever stored. dqkv is overwritten. With
 * rope_theta > 0 its q and k parts are the gradient before the rotary
 * embedding (kernels/rope.h, positions 0..T-1): RoPE's backward is part of the
 * op, so a GPU kernel can rotate its results before it stores them. The caller
 * lends the backward `work`: memory dead during the call that it may overwrite
 * (NULL, 0 is allowed); the CPU backends fill it with NaN, so a model that lends
 * memory still in use fails its tests. */
#pragma once
#include <stddef.h>
#include "dtype.h"
typedef void AttentionForward(void *out /* (B,T,NH*HD) */, float *lse /* (B,NH,T) */,
                              const void *qkv /* (B,T,(NH+2*NKV)*HD) */, int B, int T, int NH, int NKV, int HD);
typedef void AttentionBackward(void *dqkv /* (B,T,(NH+2*NKV)*HD) */, const void *dout /* (B,T,NH*HD) */,
                               const void *qkv /* (B,T,(NH+2*NKV)*HD) */, const void *out /* (B,T,NH*HD) */,
                               const float *lse /* (B,NH,T) */, int B, int T, int NH, int NKV, int HD, float rope_theta,
                               void *work, size_t work_bytes);
AttentionForward attention_forward_cpu, attention_forward_cuda;
AttentionBackward attention_backward_cpu, attention_backward_cuda;

/* The same attention for a chunk of queries at an offset, against keys and values held apart (context parallelism,
 * docs/context-parallel.md): the Tq queries of qkv (only its q part is read) sit at positions q0 .. q0+Tq-1 of their
 * sequences, and kv holds k|v of positions 0 .. Tk-1 of the same sequences (row b*Tk + u: NKV*HD of k, then NKV*HD of
 * v), Tk >= q0 + Tq. Query t attends causally to keys 0 .. q0+t, so the keys after the chunk are never read and the
 * mask bites only in the key tile on the chunk's diagonal. With q0 = 0, Tq = Tk and kv the k|v of qkv this is
 * attention_forward, to rounding (tests/test_ops.c checks a sequence cut into chunks against the whole).
 * lse (B,NH,Tq). The backward overwrites the q part of dqkv (B,Tq,QKV), leaving its k and v parts alone, and ADDS the
 * gradients of k|v of keys 0 .. q0+Tq-1 into dkv (B,Tk,2*NKV*HD), fp32 whatever the act dtype: a key is seen by
 * several chunks (and ranks), whose sums the caller adds up in fp32 and rounds once, as the whole-sequence kernel's
 * accumulators do. No RoPE: the caller rotates the gradients once a key's are complete. */
typedef void AttentionForwardAt(void *out /* (B,Tq,NH*HD) */, float *lse /* (B,NH,Tq) */, const void *qkv /* (B,Tq,(NH+2*NKV)*HD) */,
                                const void *kv /* (B,Tk,2*NKV*HD) */, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD);
typedef void AttentionBackwardAt(void *dqkv /* (B,Tq,(NH+2*NKV)*HD), q part written */, float *dkv /* (B,Tk,2*NKV*HD) fp32, added to */,
                                 const void *dout /* (B,Tq,NH*HD) */, const void *qkv /* (B,Tq,(NH+2*NKV)*HD) */,
                                 const void *kv /* (B,Tk,2*NKV*HD) */, const void *out /* (B,Tq,NH*HD) */, const float *lse /* (B,NH,Tq) */,
                                 int B, int Tq, int q0, int Tk, int NH, int NKV, int HD);
AttentionForwardAt attention_forward_at_cpu, attention_forward_at_cuda;
AttentionBackwardAt attention_backward_at_cpu, attention_backward_at_cuda;

/* The dS tiles of the Hopper backward (kernels/cuda/attention_wgmma_backward.cu, HD = 64 in bf16/fp16): the dS of
 * every (sequence, head, 64-query tile, 64-key tile at or before it), 2 bytes a value, for as many sequences at a time
 * as fit in `cap` bytes (ATTENTION_DS_CAP) when the batch is cut into equal slices. They are stored only up to
 * ATTENTION_DS_MAX_T tokens: beyond it (or where one sequence's tiles pass the cap) this is 0 and the backward's dq
 * kernel computes dS again, with memory linear in T. Measured on the H200 (2026-12-04, l124m's 12 heads, ~16k tokens,
 * the backward alone): storing beats computing again by 5% at T = 1024 (0.368 ms against 0.386) and loses by 15% at
 * 2048 (0.766 against 0.647) and by 38% at 3456 (1.414 against 0.875): the stored tiles' traffic grows with T^2.
 * The tiles go in the scratch the caller lends when it holds them (the model lends the block's h13), else in a
 * scratch of the backend's own, which the memory plan then counts. */
#define ATTENTION_DS_CAP ((size_t)144 << 20)
#define ATTENTION_DS_MAX_T 1024
/* Where the wgmma backward would store dS tiles, Hopper's default still runs the fa3 backward from this T, its dQ by
 * the second sweep: the plan counts the tiles there (in the model's lent buffer), not a dQ accumulator, so the memory
 * is the same. H100, 2026-12-07 (bench_attention, l124m's heads, B = 16): at T = 1024 the fa3 backward with the sweep
 * took 0.334 ms against the wgmma backward's 0.374 with its stored tiles (0.310 with the accumulator); shorter T was
 * not measured, so the wgmma backward keeps it. */
#define ATTENTION_FA3_BWD_MIN_T 1024
static inline size_t attention_ds_bytes(int B, int T, int NH, int HD, size_t cap) {
    if (HD != 64 || B <= 0 || T <= 0 || NH <= 0 || T > ATTENTION_DS_MAX_T) return 0;
    size_t nt = ((size_t)T + 63) / 64, per_seq = (size_t)NH * (nt * (nt + 1) / 2) * 64 * 64 * 2;
    if (per_seq > cap) return 0;
    size_t all = (size_t)B * per_seq, slices = all / cap + (all % cap != 0);   /* (no all + cap - 1: cap may be SIZE_MAX) */
    return ((size_t)B + slices - 1) / slices * per_seq;   /* sequences a slice, times their bytes */
}

/* Hopper's fa3 backward adds dQ up in its dk/dv kernel (an fp32 accumulator, five products a tile) rather than
 * sweeping for it again (seven), except at head dim 128 below this T, where the sweep measured faster (H100,
 * 2026-12-07: 255 against 214 TFLOP/s at T = 1024, 330 against 302 at 2048; 379 against 388 at 4096), and where the
 * plan counts dS tiles instead (attention_backward_scratch: the accumulator runs only where the plan has it) */
#define ATTENTION_DQ_ACC_MIN_T_HD128 4096
static inline int attention_dq_accumulates(int T, int HD) { return HD == 64 || (HD == 128 && T >= ATTENTION_DQ_ACC_MIN_T_HD128); }

/* What the CUDA backward takes beyond its arguments for a (B,T,NH,HD) batch in activation dtype act — the op's own
 * answer, which the memory plan asks instead of knowing the kernels: the row sums Dsum (B,NH,T) fp32, in a scratch of
 * the backend's own, and the dS tiles at ATTENTION_DS_CAP (bf16/fp16, T up to ATTENTION_DS_MAX_T; else 0), in the caller's lent work
 * when it holds them, else in a scratch of the backend's own too; where no dS tiles are stored and
 * attention_dq_accumulates (Hopper's fa3 backward by default, bf16/fp16), its fp32 dQ accumulator (B,NH,T rounded up to 64,HD) and a turn
 * counter a 64-row tile, in a scratch of its own (another GPU runs kernels without it: the plan is that much high). */
typedef struct { size_t row_sums, ds_tiles, dq_accum; } AttentionScratch;
static inline AttentionScratch attention_backward_scratch(int B, int T, int NH, int HD, DType act) {
    AttentionScratch s = {(size_t)B * NH * T * sizeof(float), act != DTYPE_FP32 ? attention_ds_bytes(B, T, NH, HD, ATTENTION_DS_CAP) : 0, 0};
    if (act != DTYPE_FP32 && !s.ds_tiles && attention_dq_accumulates(T, HD) && B > 0 && T > 0) {
        size_t tiles = (size_t)B * NH * (((size_t)T + 63) / 64);
        s.dq_accum = tiles * (64 * (size_t)HD * sizeof(float) + sizeof(int));
    }
    return s;
}

/* Generation with a KV cache: T new tokens at positions pos0 .. pos0+T-1.
 * Their k and v are first written from qkv into the caches at those positions,
 * then each new query attends causally to cache positions 0 .. its own, so a
 * new token never recomputes the prefix. No lse: this path has no backward. */
typedef void AttentionCached(void *out /* (B,T,NH*HD) */, void *kcache /* (B,Tmax,NKV*HD) */, void *vcache /* (B,Tmax,NKV*HD) */,
                             const void *qkv /* (B,T,(NH+2*NKV)*HD) */, int B, int T, int pos0, int Tmax, int NH, int NKV, int HD);
AttentionCached attention_cached_cpu, attention_cached_cuda;
