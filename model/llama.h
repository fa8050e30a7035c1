/* model/llama.h — the LLaMA decoder: parameter layout, activations, forward, backward.
 *
 * The idea: one model code for every backend and every parallel layout. It
 * works on LOCAL shapes — the heads and FFN columns of this tensor-parallel
 * rank, the layers of this pipeline stage — and reaches the device only through
 * the Backend table. Parameters live in one contiguous buffer with named views
 * (Hugging Face names), laid out layer by layer; inside a layer q,k,v are
 * adjacent rows, so they form one fused (NH+2*NKV)*HD x C matrix, and gate,up
 * form one 2F x C matrix. Gradients and optimizer state mirror that buffer.
 * The model runs with compute-dtype weights: a copy of the whole buffer, or
 * (part.weights_per_layer) each unit cast from the fp32 master as it runs.
 *
 * What a rank holds is a ModelPart: its tensor-parallel share of every layer,
 * and one or more CHUNKS of consecutive layers (one per pipeline stage; several
 * with interleaved pipeline schedules), the embedding with the model's first
 * chunk and the final norm + LM head with its last. The activations one
 * micro-batch keeps from its forward to its backward live in a SLOT; a
 * pipeline schedule keeps several micro-batches in flight, so a rank has as
 * many slots as its schedule needs (one without a pipeline).
 *
 * Tensor parallel (docs/tensor-parallel.md): a rank holds NH/tp query heads,
 * NKV/tp KV heads, F/tp FFN columns and a block of ceil(V/tp) rows of the
 * vocabulary (embedding and LM head; the padding of a vocabulary tp does not
 * divide lies in the buffer but in no tensor). With sequence parallelism the
 * residual stream, the norms and the adds hold only N/tp of the micro-batch's
 * N = B*T tokens (rows [tp_rank*N/tp, (tp_rank+1)*N/tp) of the flattened
 * batch): the "stream tokens" below. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../kernels/backend.h"
#include "../comm/comm.h"
#include "fp8.h"

#define IGNORE_INDEX (-1)   /* a target equal to this adds no loss and no gradient */
#define MODEL_MAX_CHUNKS 64
#define MODEL_LOSS_REGIONS 64   /* head forwards whose losses wait unread; the next one makes the host wait for the device once */

/* What the forward keeps for the backward (config key recompute). */
enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };

typedef struct {            /* the whole model's shape, as in config.json */
    int vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_dim, seq_len, tie_embeddings;
    float rope_theta, norm_eps;
} ModelConfig;

typedef struct { int first_layer, n_layers; } ModelChunk;   /* global layers [first, first + n) */

typedef struct {            /* which part of the model this rank holds, and how many micro-batches it keeps */
    int tp, tp_rank;        /* heads, KV heads, FFN columns and the vocabulary are split tp ways */
    int sequence_parallel;  /* 1 (with tp > 1): the residual stream holds N/tp tokens (Korthikanti et al. 2022) */
    int n_chunks;           /* chunks of consecutive layers, in forward order */
    ModelChunk chunks[MODEL_MAX_CHUNKS];
    int has_embedding;      /* the embedding runs at the start of chunk 0 */
    int has_head;           /* the final norm, LM head and loss run at the end of the last chunk */
    int n_slots;            /* activation slots: micro-batches in flight at once */
    int master_in_shard;    /* 1: no fp32 master copy here — ZeRO-1 keeps it in shards (parallel/ddp.h); compute dtype != fp32 only */
    int weights_per_layer;  /* 1: no compute-dtype copy of the weights; each unit is cast from the fp32 master just before
                             * it runs (config key compute_weights=per_layer); ignored in fp32, where the master is the copy */
    int grads_elsewhere;    /* 1 (zero=2/3): no gradient buffer; unit u's gradients go to grads_at[u] (parallel/ddp.h places them) */
    int weights_elsewhere;  /* 1 (zero=3): no weights at all here, neither master nor compute copy; unit u runs with the
                             * weights gathered at weights_at[u] (parallel/ddp.h) */
    int fp8;                /* 1 (precision=fp8, act bf16): the block matmuls run in FP8 with delayed scales (model/fp8.h) */
    int split_backward;     /* 1 (pp_schedule=zb1): the backward runs as B then W (model_backward_input_chunk, model_backward_weight_chunk),
                             * what W reads kept from B to W in one of n_keeps stores (WKeep per layer) */
    int n_keeps;            /* split_backward: (micro-batch, chunk)s between their B and their W at once (the schedule's keeps) */
    int cp, cp_rank;        /* cp > 1: context parallel (model/context.h): a micro-batch's T tokens here are chunks cp_rank and
                             * 2cp-1-cp_rank of each of its B sequences, laid out (2, B, T/2); 0 or 1: whole sequences */
} ModelPart;

typedef struct {            /* one named tensor of the parameter buffer */
    char name[96];          /* Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight */
    size_t offset;          /* elements into this rank's buffer */
    int rows, cols;         /* local shape; vectors have rows = 1 */
    int global_rows, global_cols, row0, col0;   /* the whole tensor, and where this slice sits in it */
    int is_norm;            /* norm weights: init 1, no weight decay */
    int split_cols;         /* 1: tensor parallelism splits its columns (o_proj, down_proj); else its rows, or nothing */
} ParamTensor;

typedef struct {            /* element offsets of one layer's tensors */
    size_t attn_norm, wqkv /* wq|wk|wv */, wo, ffn_norm, w13 /* gate|up */, w2;
} LayerOffsets;

/* A run of the parameter buffer whose gradient is complete at one point of a
 * chunk's backward: a layer, the embedding, or the head (final norm + LM head,
 * complete at the end of the chunk's forward, which runs the head's backward).
 * Data parallelism groups units into buckets and reduces each as it completes. */
typedef struct {
    size_t offset, count;   /* elements of the parameter buffer */
    int chunk;              /* the chunk whose backward (or forward, for the head) completes it */
    int step;               /* the backward step that completes it (model_backward_chunk); -1: the forward */
} ModelUnit;

/* Shapes below: N = B*T tokens; Ns = the stream tokens (N, or N/tp with sequence parallelism). */
typedef struct {            /* the activations one layer keeps for its backward */
    void *ln1;              /* (Ns,C)    attention-norm output */
    float *ln1_rstd;        /* (Ns) */
    void *qkv;              /* (N,QKV)   q|k|v after RoPE */
    void *att;              /* (N,NH*HD) attention output before wo */
    float *lse;             /* (B,NH,T)  softmax log-sum-exp */
    void *res_mid;          /* (Ns,C)    residual after attention */
    void *ln2;              /* (Ns,C)    ffn-norm output */
    float *ln2_rstd;        /* (Ns) */
    void *h13;              /* (N,2F)    gate|up */
    void *hs;               /* (N,F)     silu(gate)*up */
} LayerActs;

/* What the weight gradients of one layer (a zero-bubble pipeline's W) read, kept from the layer's B: each block
 * matmul's input x (N,IC) and output gradient dy (N,OC), indexed FP8_QKV .. FP8_W2 (model/fp8.h), and each norm's
 * input, rstd and incoming gradient (Ns rows; [0] the attention norm, [1] the ffn norm). NULL where the slot itself
 * keeps that tensor unchanged until W (no recompute; the norm outputs also without sequence parallelism): W reads
 * the slot's activation; everything else is a copy B writes (model/layout.c). A store is held from a B to its W
 * only, so a stage needs as many as it has micro-batches between the two at once, not one per slot. */
typedef struct {
    void *x[FP8_MATMULS], *dy[FP8_MATMULS];
    void *norm_in[2], *dnorm[2];
    float *rstd[2];
} WKeep;

typedef struct {            /* one micro-batch in flight through one chunk */
    void **res;             /* (chunk_layers+1) x (Ns,C) residual stream at each layer boundary: res[0] is the chunk's input */
    LayerActs *acts;        /* (chunk_layers) */
    void *lnf;              /* (Ns,C)    final-norm output (head chunk); one buffer for every slot: the head's call alone reads it */
    float *lnf_rstd;        /* (Ns) */
    float *losses;          /* (N)       per-token loss (head chunk) */
    void *dres;             /* (Ns,C)    gradient of the residual stream: d(output) in, d(input) out */
    int *ids, *targets;     /* (N) on the device */
} ActSlot;

typedef struct Model {
    ModelConfig cfg;
    const Backend *be;
    const Comm *comm;
    ModelPart part;
    /* local shape */
    int C, NH, NKV, HD, F, QKV;         /* QKV = (NH + 2*NKV) * HD */
    int V;                              /* vocabulary rows of this rank's block: ceil(vocab_size/tp), padding included */
    int v0, v_valid;                    /* the block is rows v0 .. v0+V-1 of the vocabulary; the first v_valid are real */
    int sp;                             /* sequence parallelism is on (part.sequence_parallel and tp > 1) */
    int cp, cp_rank;                    /* context parallel ranks (1: off) and mine; m->T is this rank's share, T/cp */
    int n_local_layers;                 /* sum of the chunks' layers */
    int chunk_layers;                   /* the most layers in one chunk: what a slot holds */
    int *chunk_first;                   /* (n_chunks+1) local index of each chunk's first layer */
    int recompute;                      /* RECOMPUTE_*: which activations the backward recomputes */
    /* parameters: fp32 master, the act-dtype compute copy (== params when act is fp32; NULL with
     * part.weights_per_layer, which casts each unit into its place below instead), fp32 grads */
    ParamTensor *tensors;
    int n_tensors;
    size_t n_params;
    LayerOffsets *layer;                /* (n_local_layers) */
    size_t off_embedding, off_final_norm, off_lm_head;
    ModelUnit *units;                   /* (n_units) in buffer order */
    int n_units;
    float *params;                      /* (n_params) NULL when part.master_in_shard */
    void *params_compute;               /* (n_params) or NULL */
    float *grads;                       /* (n_params) NULL when part.grads_elsewhere */
    /* zero=2/3 (parallel/ddp.h sets these): the tensor at element o of unit u lies at grads_at[u] + (o - units[u].offset)
     * (fp32) and, zero=3, at weights_at[u] + (o - units[u].offset) elements of the act dtype */
    float **grads_at;                   /* (n_units) */
    void **weights_at;                  /* (n_units) */
    /* A step's first write of a gradient overwrites it rather than adding to zeros: model_zero_grads zeroes only the
     * embedding's (its backward scatters), and grad_fresh[k] says gradient k has not been written since (model/llama.c:
     * per layer its two norms and four matmuls, then the final norm and the head); NULL with grads_elsewhere */
    unsigned char *grad_fresh;          /* (n_local_layers * GRAD_PER_LAYER + 2) */
    int poison_grads;                   /* test-only (LLM3D_POISON_GRADS=1): model_zero_grads fills what it leaves with NaN */
    /* part.weights_per_layer: the places units are cast into, act dtype (model_unit_place) */
    void *layer_weights;                /* (layer_weights_bytes) every layer's place */
    void *vocab_weights;                /* (vocab_weights_bytes) the embedding's place and the head's (after the embedding's
                                         * when tied: the head reads both); in act_memory when recompute is on */
    size_t layer_weights_bytes, vocab_weights_bytes;
    void *weight_buffer;                /* the allocation of layer_weights (and of vocab_weights when recompute is none) */
    size_t weight_bytes;                /* what the compute-dtype weights allocate: 0 in fp32, the whole copy, or weight_buffer */
    int layer_weights_unit;             /* the unit layer_weights holds, fresh from the master; -1: none */
    /* activations, for micro-batches of at most B x T */
    int B, T;
    void *act_memory;                   /* the one allocation the views below point into */
    size_t act_bytes;
    ActSlot *slots;                     /* (part.n_slots) */
    LayerActs shared;                   /* what recompute brings back, once for all layers (recompute != none); ln1 is ln2 */
    void *logits;                       /* (head_chunk,V) one chunk of logits, then their gradient (over shared: model/layout.c) */
    int head_chunk;                     /* tokens per LM-head chunk */
    float *ce_stats;                    /* (tp,3,n) every tp rank's cross-entropy statistics of a chunk of n <= head_chunk tokens */
    void *scratch1;                     /* (N,max(C,F,NH*HD)) backward: dlnf, dhs, datt, dln (partial sums over tp) */
    void *scratch2;                     /* (N,QKV) backward: dqkv (in shared.hs when recompute is on and QKV <= F) */
    void *tmp;                          /* (N,C) forward: a row-parallel matmul's or the embedding's partial output (aliases scratch1) */
    Fp8State fp8;                       /* part.fp8: the scales and the amax record (model/fp8.h); amax, scratch in act_memory */
    void *gathered;                     /* (N,C) sequence parallel: a norm output or gradient gathered over tp, or a reduce-scatter's result */
    /* cp > 1 (model/context.c), each (B, cp*T, 2*NKV*HD), one layer's at a time: */
    void *cp_kv;                        /* act: k|v of the whole sequences, gathered over cp; then my tokens' dk|dv, rounded */
    const LayerActs *cp_kv_of;          /* whose k|v cp_kv holds (the last gather's), NULL once it holds gradients */
    void *cp_ranks;                     /* the same rows in rank order (cp, 2, B, T/2, 2*NKV*HD): the all-gather's (act) and reduce-scatter's (fp32) buffer */
    float *cp_dkv;                      /* fp32: dk|dv of the whole sequences, then my tokens' share summed over cp */
    float *norm_dw_discard;             /* (C) part.split_backward: B's norm backward writes its weight gradient here, unread (W writes it) */
    WKeep *keeps;                       /* (part.n_keeps * chunk_layers) split_backward: store k's layer j at [k * chunk_layers + j] */
    /* generation */
    void **kcache, **vcache;            /* (n_local_layers) x (1,T,NKV*HD), made by the first model_decode */
    float *host_logits;                 /* (V) */
    void *host_row;                     /* (V) act dtype */
    /* the micro-batch of each slot */
    int *slot_B, *slot_T;               /* (n_slots) */
    /* the losses not yet taken (model_take_losses): each head forward queues the download of its per-token losses into
     * a host region of its own (be->alloc_host, made when first needed) and the host sums them once the device is done */
    float *loss_regions[MODEL_LOSS_REGIONS];   /* (B*T) each */
    int loss_tokens[MODEL_LOSS_REGIONS];       /* the tokens each pending region holds */
    int n_loss_regions, n_losses_pending;
    double losses_taken;                /* the sum of the regions folded in early, when every region was pending */
} Model;

/* The whole model on one rank with one slot: what part = NULL means below. */
ModelPart model_part_whole(const ModelConfig *cfg);
/* Build the layout for this rank and allocate everything on the backend: the
 * part's parameters, and its slots' activations for micro-batches up to B x T
 * under the given RECOMPUTE_* mode. part NULL: the whole model, one slot.
 * comm NULL: the one-rank grid (comm_one), for a model that runs alone. */
void model_create(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, const ModelPart *part, int B, int T,
                  int recompute);
/* The layout alone — tensor table, units, n_params, act_bytes — with nothing
 * allocated on the backend: what the memory report predicts from.
 * Release with model_plan_free. */
void model_plan(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, const ModelPart *part, int B, int T,
                int recompute);
void model_plan_free(Model *m);
void model_free(Model *m);
/* LLaMA init: N(0, init_std), output projections (wo, w2) scaled by 1/sqrt(2*n_layers), norms 1.
 * Every tensor is drawn whole from its own seeded stream, then sliced, so the
 * same seed gives the same model under any parallel layout. Writes the host
 * values (n_params) when host is not NULL instead of setting the model's.
 * Host arrays laid out like the buffer hold 0 in the vocabulary padding, which
 * belongs to no tensor: init and the checkpoint and HF readers write it so, and
 * since its gradient is always 0 and no optimizer slice covers it, it stays 0. */
void model_init_weights(Model *m, uint64_t seed, float init_std);
void model_init_values(const Model *m, uint64_t seed, float init_std, float *host /* (n_params) */);
/* Copy fp32 host values of all local parameters in (n_params) / out. Without
 * a master copy (part.master_in_shard) setting only fills the compute copy,
 * and getting is an error: the master lives in the shards. */
void model_set_params(Model *m, const float *host);
void model_get_params(const Model *m, float *host);
void model_get_grads(const Model *m, float *host);
/* The fp32 master weights were written outside the model (an optimizer
 * step): a per-layer cast held from before is stale. model_set_params says so itself. */
void model_master_changed(Model *m);
/* Starts a step's gradients: the first write of each overwrites it (grad_fresh), later ones add. */
void model_zero_grads(Model *m);
enum { GRAD_ATTN_NORM, GRAD_QKV, GRAD_O, GRAD_FFN_NORM, GRAD_W13, GRAD_W2, GRAD_PER_LAYER };   /* a layer's grad_fresh entries */
const ParamTensor *model_find_tensor(const Model *m, const char *name);
/* part.weights_per_layer: where unit u's weights are cast to. The tensor at
 * element o of the parameter buffer lies at the result + (o - units[u].offset)
 * elements, with the alignment modulo 256 bytes it has in a whole compute copy. */
void *model_unit_place(const Model *m, int u);

/* Forward of chunk k for the micro-batch held in slot s (B' <= B, T' <= T).
 * The chunk's input is ids (embedded here) when it holds the embedding, else
 * whatever was placed at model_chunk_input. When it holds the head, it
 * computes the per-token losses against targets (ignored targets add 0) and
 * queues them for model_take_losses and, with dloss != 0 (the loss gradient
 * per token), also runs the head's backward: chunk by chunk of tokens, logits
 * -> loss -> dlogits -> the head's weight gradient and dlnf -> the final
 * norm's backward, so the (B*T, V) logits never exist and the slot's dres
 * holds d(chunk output) afterwards. Nothing here waits for the device: ids and
 * targets are uploaded without waiting, and the losses read back later. */
void model_forward_chunk(Model *m, int chunk, int slot, const int *ids, const int *targets, int B, int T, float dloss);
/* The same forward in steps, so ZeRO-3 can gather each unit's weights just
 * before its step: step 0 is the embedding when the chunk holds it, then one
 * step per layer, then the head when it holds it; steps [from, to) run here. */
int model_forward_steps(const Model *m, int chunk);
void model_forward_chunk_steps(Model *m, int chunk, int slot, const int *ids, const int *targets, int B, int T, float dloss, int from, int to);
/* The unit whose weights forward step j / backward step j of a chunk reads (-1: none, the embedding's backward). */
int model_forward_step_unit(const Model *m, int chunk, int step);
int model_backward_step_unit(const Model *m, int chunk, int step);
/* The SUM of the per-token losses of every head forward since the last call
 * (0 if none), once the device is done with them: each forward's losses summed
 * in double in token order, the forwards added in the order they ran. */
double model_take_losses(Model *m);
/* Backward steps [from, to) of chunk k for slot s: step j < L (the chunk's
 * layers) is the backward of its layer L-1-j; step L, when the chunk holds the
 * embedding, its backward. The slot's dres must hold d(chunk output) before
 * step 0 (the head chunk's forward leaves it there; a pipeline stage receives
 * it); after the last layer's step it holds d(chunk input). ADDS into grads. */
void model_backward_chunk(Model *m, int chunk, int slot, int from, int to);
/* The same backward in two halves (part.split_backward; docs/pipeline-parallel.md): B, the input gradients — steps
 * [from, to) as above, dres in and out the same, the matmuls' input gradients, the norms' and the attention's, and the
 * tensor-parallel sums — writing no gradient and keeping what W reads in store `keep` (< n_keeps) and the slot;
 * then W (the same slot and store), the weight gradients of the
 * same steps from what B kept (the embedding's step: its scatter of dres), ADDING into grads as the fused form does.
 * W of a step runs after B of that step and before the slot's next forward. */
void model_backward_input_chunk(Model *m, int chunk, int slot, int keep, int from, int to);
void model_backward_weight_chunk(Model *m, int chunk, int slot, int keep, int from, int to);
int model_backward_steps(const Model *m, int chunk);
/* Where a pipeline stage receives a chunk's input / sends its output: (Ns,C) act dtype,
 * model_boundary_elements of them (also the size of the slot's dres). */
void *model_chunk_input(Model *m, int chunk, int slot);
void *model_chunk_output(Model *m, int chunk, int slot);
size_t model_boundary_elements(const Model *m, int B, int T);
/* The scratch a block's backward lends the attention backward (kernels/attention.h): its h13, (B*T, 2F) act dtype. */
size_t model_attention_work_bytes(const Model *m, int B, int T);

/* One rank, whole model, slot 0: the forward of one micro-batch (see
 * model_forward_chunk), returning the SUM of its per-token losses at once (it
 * waits for the device), and the backward of that forward (dloss != 0). */
double model_forward(Model *m, const int *ids, const int *targets, int B, int T, float dloss);
void model_backward(Model *m);
/* The logits of every position, as fp32 on the host: out (B*T, V). One rank holding the whole model (tp = 1). */
void model_logits(Model *m, const int *ids, int B, int T, float *out);
/* Generation, batch 1: run T new tokens at positions pos0 .. pos0+T-1 through
 * the model, reading and filling the KV cache; returns the next-token logits
 * after the last of them (V floats, host memory, valid until the next call).
 * pos0 + T must not exceed the model's T. One rank holding the whole model (tp = 1). */
const float *model_decode(Model *m, const int *ids, int T, int pos0);

/* Whether tp ranks can split this model: 0, or -1 with one message in err
 * naming what tp does not divide (n_heads, n_kv_heads, ffn_dim) and listing
 * the tp values that work. */
int model_check_tp(const ModelConfig *cfg, int tp, char *err, size_t err_size);

/* Matmul FLOPs per token for MFU, counted as the PyTorch peer does:
 * 6 * (matmul parameters) + 6 * n_layers * dim * seq_len. */
double model_flops_per_token(const ModelConfig *cfg);
size_t model_count_params(const ModelConfig *cfg);
/* A shape read from a file (config.json, a checkpoint's config text) checked
 * before anything is sized from it: every field finite and in range, heads
 * dividing dim. Returns 0, or -1 with the field and its bound in err. */
int model_config_check(const ModelConfig *cfg, char *err, size_t err_size);
