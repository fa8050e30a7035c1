/* kernels/cuda/cuda_extras.h — the few CUDA-backend entry points that are not
 * in the Backend table: the readable attention kernels on their own (the GPU
 * tests compare them with the fast path) and the knobs the tests turn.
 * Plain C, so the GPU tests in C include it. */
#pragma once
#include "../attention.h"
#ifdef __cplusplus
extern "C" {
#endif
AttentionForward attention_forward_cuda_simple;
AttentionBackward attention_backward_cuda_simple;
extern int cuda_tf32;             /* fp32 GEMMs through TF32 tensor cores; set from LLM3D_TF32=1 when the backend opens */
extern int cuda_attention_simple; /* 1: attention_*_cuda runs the readable kernels; from LLM3D_ATTENTION=simple */
extern int cuda_attention_wgmma;  /* 1: the fast path is Hopper's wgmma kernels (sm_90a), 0: mma.sync; LLM3D_ATTENTION=mma sets 0 */
extern int cuda_attention_recompute; /* 1: the wgmma backward computes dS again at every T (LLM3D_ATTENTION=recompute), not only above ATTENTION_DS_MAX_T */
int attention_wgmma_backward_stores(int T, int NH); /* 1: the wgmma backward stores dS tiles at this T (else computes them again) */
extern size_t cuda_attention_ds_cap; /* bytes of dS tiles the wgmma backward stores at once (kernels/attention.h) */
extern int cuda_attention_pairing;   /* the wgmma dk/dv kernel pairs key tiles kt, nkt-1-kt a block: -1 when the grid passes a wave, 0 never, 1 always */
extern int cuda_cross_entropy_staged;   /* the one-part loss-and-gradient kernel reads its row from a copy in shared memory: 1 (default), 0 never */
extern long cuda_cross_entropy_staged_launches; /* launches that did (the op test's proof the path ran) */
#define CUDA_CROSS_ENTROPY_STAGED_MAX (72 * 1024)  /* the longest row (bytes) it stages: three blocks an SM (V = 36,864 in bf16) */
extern long cuda_attention_at_mma_launches; /* offset-form calls the tensor-core kernels took (context parallelism; the op test's proof) */
extern long cuda_attention_paired_launches; /* dk/dv launches that paired them (the op test's proof the path ran) */
int attention_wgmma_available(void); /* 1 when this binary has sm_90a code and the GPU runs it */
extern int cuda_attention_fa3;              /* 1: the forward is attention_fa3.cu's where it takes the shape (Hopper's default) */
extern int cuda_attention_fa3_backward;     /* the backward is attention_fa3_backward.cu's where it takes the shape: 1 always (LLM3D_ATTENTION=fa3), 2 where wgmma's would store no dS (Hopper's default) */
extern long cuda_attention_fa3_backward_launches; /* its launches (the op test's proof the path ran) */
extern long cuda_attention_fa3_dq_fused_launches; /* backward launches that accumulated dQ in the dk/dv kernel (the op test's proof) */
extern int cuda_attention_fa3_dq_stages128;  /* head dim 128, the accumulating backward: 1 (default) three Q/dout stages and one staged dQ tile, 2 two and two (an experiment: bench_attention's fa3_bwd_s2) */
extern int cuda_attention_fa3_dq;           /* the fa3 backward's dQ: 0 (default) accumulated where the plan counts it (attention_backward_scratch), 1 accumulated by the dk/dv kernel in key-block order, 2 by a second sweep */
extern int cuda_attention_fa3_dq_lag;       /* 1: the accumulating backward at head dim 64 issues each item's dQ product an item late (within 3% of the default either way, H100 2026-12-08); 0 (default): at once */
void attention_backward_fa3(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *Dsum, int B, int T, int NH,
                            int NKV, int HD, float rope_theta); /* after the Dsum pass, where attention_fa3_supported() holds */
extern long cuda_attention_fa3_launches;    /* its launches (the op test's proof the path ran) */
extern int cuda_attention_fa3_pingpong;     /* 1 (default): its two consumer warpgroups take turns issuing products; 0: each issues freely */
extern int cuda_attention_fa3_early_k;      /* 1 (default): a stage's K is given back once its scores are in; 0: with its V */
extern int cuda_attention_fa3_persistent;   /* the fa3 forward's grid: 0 (default) one block an SM walking items up to T = 4096 (FA3_PERSIST_MAX_T), a block an item past it; 1 always the first; 2 always the second */
extern long cuda_attention_fa3_persistent_launches; /* forward launches on the persistent grid (the op test's proof the grid it asked for ran) */
int attention_fa3_supported(int HD, const void *out, const void *qkv); /* 1: bf16/fp16, HD 64 or 128, 16-byte aligned */
AttentionForward attention_forward_fa3;     /* attention_forward_cuda's contract, on an sm_90a GPU where it is supported */
AttentionForwardAt attention_forward_at_fa3; /* attention_forward_at_cuda's contract (context parallelism), the same kernel */
extern int cuda_attention_fa3_at;           /* 1: the offset form (context parallelism) runs the fa3 forward and backward where they take the shape; backend_cuda sets it wherever the fa3 forward runs (Hopper's default) */
void attention_backward_at_fa3(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const float *lse, const float *Dsum,
                               int B, int Tq, int q0, int Tk, int NH, int NKV, int HD); /* attention_backward_at_cuda's contract after the Dsum pass, by the fa3 backward's sweep (counted in cuda_attention_fa3_backward_launches) */
void attention_dsum_cuda(float *Dsum, const void *dout, const void *out, int B, int T, int NH, int HD); /* Dsum (B,NH,T) = rowwise dout . out (attention.cu's pass) */
#ifdef __cplusplus
}
#endif
