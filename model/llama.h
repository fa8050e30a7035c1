/* model/llama.h — the LLaMA decoder: parameter layout, activations, forward, backward.
 *
 * The idea: one model code for every backend and every parallel layout. It
 * works on LOCAL shapes — the heads and FFN columns of this tensor-parallel
 * rank, the layers of this pipeline stage — and reaches the device only through
 * the Backend table. Parameters live in one contiguous buffer with named views
 * (Hugging Face names), laid out layer by layer; inside a layer q,k,v are
 * adjacent rows, so they form one fused (NH+2*NKV)*HD x C matrix, and gate,up
 * form one 2F x C matrix. Gradients and optimizer state mirror that buffer. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../kernels/backend.h"
#include "../parallel/comm.h"

#define IGNORE_INDEX (-1)   /* a target equal to this adds no loss and no gradient */

/* What the forward keeps for the backward (config key recompute). */
enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };

typedef struct {            /* the whole model's shape, as in config.json */
    int vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_dim, seq_len, tie_embeddings;
    float rope_theta, norm_eps;
} ModelConfig;

typedef struct {            /* one named tensor of the parameter buffer */
    char name[96];          /* Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight */
    size_t offset;          /* elements into this rank's buffer */
    int rows, cols;         /* local shape; vectors have rows = 1 */
    int global_rows, global_cols, row0, col0;   /* the whole tensor, and where this slice sits in it */
    int is_norm;            /* norm weights: init 1, no weight decay */
} ParamTensor;

typedef struct {            /* element offsets of one layer's tensors */
    size_t attn_norm, wqkv /* wq|wk|wv */, wo, ffn_norm, w13 /* gate|up */, w2;
} LayerOffsets;

typedef struct {            /* the activations one layer keeps for its backward */
    void *ln1;              /* (B,T,C)   attention-norm output */
    float *ln1_rstd;        /* (B,T) */
    void *qkv;              /* (B,T,QKV) q|k|v after RoPE */
    void *att;              /* (B,T,NH*HD) attention output before wo */
    float *lse;             /* (B,NH,T) softmax log-sum-exp */
    void *res_mid;          /* (B,T,C)   residual after attention */
    void *ln2;              /* (B,T,C)   ffn-norm output */
    float *ln2_rstd;        /* (B,T) */
    void *h13;              /* (B,T,2F)  gate|up */
    void *hs;               /* (B,T,F)   silu(gate)*up */
} LayerActs;

typedef struct {
    ModelConfig cfg;
    const Backend *be;
    const Comm *comm;
    /* local shape */
    int C, NH, NKV, HD, F, QKV, V;      /* QKV = (NH + 2*NKV) * HD */
    int layer0, n_local_layers;         /* global index of this stage's first layer, and how many */
    int has_embedding, has_head;        /* first / last pipeline stage */
    int recompute;                      /* RECOMPUTE_*: which activations the backward recomputes */
    /* parameters: fp32 master, the act-dtype compute copy (== params when act is fp32), fp32 grads */
    ParamTensor *tensors;
    int n_tensors;
    size_t n_params;
    LayerOffsets *layer;                /* (n_local_layers) */
    size_t off_embedding, off_final_norm, off_lm_head;
    float *params;                      /* (n_params) */
    void *params_compute;               /* (n_params) */
    float *grads;                       /* (n_params) */
    /* activations, for micro-batches of at most B x T */
    int B, T;
    void *act_memory;                   /* the one allocation the views below point into */
    size_t act_bytes;
    void **res;                         /* (n_local_layers+1) x (B,T,C) residual stream at each layer boundary */
    LayerActs *acts;                    /* (n_local_layers) */
    void *lnf;                          /* (B,T,C) */
    float *lnf_rstd;                    /* (B,T) */
    void *logits;                       /* (head_chunk,V) one chunk of logits, then their gradient */
    int head_chunk;                     /* tokens per LM-head chunk */
    float *losses;                      /* (B,T) */
    void *dres;                         /* (B,T,C) gradient of the residual stream */
    void *scratch1;                     /* (B,T,max(C,F,NH*HD)) backward: dlnf, dhs, datt, dln */
    void *scratch2;                     /* (B,T,QKV) backward: dqkv */
    void *tmp;                          /* (B,T,C) forward: a row-parallel matmul's output before the residual add (aliases scratch1) */
    int *ids, *targets;                 /* (B,T) on the device */
    /* generation */
    void **kcache, **vcache;            /* (n_local_layers) x (1,T,NKV*HD), made by the first model_decode */
    float *host_logits;                 /* (V) */
    void *host_row;                     /* (V) act dtype */
    /* the micro-batch in flight */
    int cur_B, cur_T;
    float *host_losses;                 /* (B,T) */
} Model;

/* Build the layout for this rank and allocate everything on the backend, the
 * activations for micro-batches up to B x T under the given RECOMPUTE_* mode. */
void model_create(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, int B, int T, int recompute);
/* The layout alone — tensor table, n_params, act_bytes — with nothing
 * allocated on the backend: what the memory report predicts from.
 * Release with model_plan_free. */
void model_plan(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, int B, int T, int recompute);
void model_plan_free(Model *m);
void model_free(Model *m);
/* LLaMA init: N(0, init_std), output projections (wo, w2) scaled by 1/sqrt(2*n_layers), norms 1.
 * Every tensor is drawn whole from its own seeded stream, then sliced, so the
 * same seed gives the same model under any parallel layout. */
void model_init_weights(Model *m, uint64_t seed, float init_std);
/* Copy fp32 host values of all local parameters in (n_params) / out. */
void model_set_params(Model *m, const float *host);
void model_get_params(const Model *m, float *host);
void model_get_grads(const Model *m, float *host);
void model_zero_grads(Model *m);
const ParamTensor *model_find_tensor(const Model *m, const char *name);
/* Forward one micro-batch (B' <= B, T' <= T) with its targets: returns the SUM
 * of the per-token losses (ignored targets add 0). With dloss != 0 (the loss
 * gradient per token) it also starts the backward: the LM head runs chunk by
 * chunk — logits, loss, dlogits, and at once the head's weight gradient and
 * dlnf — so the (B*T, V) logits never exist; model_backward must follow. */
double model_forward(Model *m, const int *ids, const int *targets, int B, int T, float dloss);
/* The logits of every position, as fp32 on the host: out (B*T, V). */
void model_logits(Model *m, const int *ids, int B, int T, float *out);
/* Generation, batch 1: run T new tokens at positions pos0 .. pos0+T-1 through
 * the model, reading and filling the KV cache; returns the next-token logits
 * after the last of them (V floats, host memory, valid until the next call).
 * pos0 + T must not exceed the model's T. */
const float *model_decode(Model *m, const int *ids, int T, int pos0);
/* Backward of the last forward (dloss != 0): ADDS this micro-batch's gradients into m->grads. */
void model_backward(Model *m);
/* Matmul FLOPs per token for MFU, counted as the PyTorch peer does:
 * 6 * (matmul parameters) + 6 * n_layers * dim * seq_len. */
double model_flops_per_token(const ModelConfig *cfg);
size_t model_count_params(const ModelConfig *cfg);
/* A shape read from a file (config.json, a checkpoint's config text) checked
 * before anything is sized from it: every field finite and in range, heads
 * dividing dim. Returns 0, or -1 with the field and its bound in err. */
int model_config_check(const ModelConfig *cfg, char *err, size_t err_size);
