/* train/optimizer.h — AdamW over the model's flat parameter buffer, with fp32
 * or 8-bit moments (config key optimizer=adamw|adamw8bit).
 *
 * The idea: the optimizer sees the parameters as one fp32 buffer cut into
 * slices that differ only in weight decay (none on norm weights); one step is
 * global-norm -> clip factor -> one fused update of every slice. adamw keeps
 * fp32 m and v (8 bytes/param). adamw8bit (kernels/adamw8bit.h) keeps, for
 * every tensor whose whole has at least adamw8bit_min_numel (4096) elements,
 * uint8 codes of m and v plus one fp32 absmax per block of at most 256
 * elements, cut within row segments of the whole tensor (optimizer_q8_row:
 * the same blocks on every layout; ~2.03 bytes/param), and fp32 m, v for the
 * small tensors; its slices also differ in which kind of state they use. All
 * 8-bit state is one backend allocation with named views. */
#pragma once
#include "config.h"
#include "../model/llama.h"
#include "../parallel/ddp.h"

/* What the optimizer updates: n elements of its own buffers (master, grads,
 * compute), taken from pieces of the model's parameter buffer. Without ZeRO
 * that is the model's whole buffer itself; with zero=1 each data-parallel rank
 * updates its own pieces (parallel/ddp.h), held in shard buffers. */
typedef struct { size_t offset, count, at; } OptPiece;   /* model elements [offset, offset+count) are view elements [at, at+count) */
typedef struct {
    float *master;          /* (n) fp32 weights */
    float *grads;           /* (n) their gradients */
    void *compute;          /* (n) act-dtype copy refreshed by the update, or NULL */
    size_t n;
    const OptPiece *pieces;
    int n_pieces;
    int sharded_over_dp;    /* the data-parallel ranks hold disjoint pieces: the norm sums over them too */
} OptimizerView;

typedef struct {
    int kind;               /* OPTIMIZER_ADAMW or OPTIMIZER_ADAMW8BIT */
    OptimizerView view;     /* slices below are in view elements */
    OptPiece *replicated;   /* view ranges of tensors every tensor-parallel rank holds whole (norms): counted once in the norm */
    int n_replicated;
    float *tp_pack;         /* sequence parallelism: (n_tp_pack) the replicated tensors' gradients, packed for one sum over tp */
    size_t n_tp_pack;
    /* adamw */
    float *m, *v;           /* (n_params) first and second moments, on the backend; NULL for adamw8bit */
    AdamWSlice *slices;     /* runs of adjacent tensors with the same weight decay */
    int n_slices;
    /* adamw8bit */
    void *state;            /* the one backend allocation holding q8's views */
    size_t state_bytes;
    AdamW8bitState q8;      /* codes (Q), absmax (NB), fp32 m32, v32 (S) of the small tensors */
    AdamW8bitSlice *slices8;/* runs of adjacent tensors with the same weight decay and row segment (or fp32 state) */
    int n_slices8;
    int n_q8_tensors;       /* tensors of this rank's model with 8-bit moments */
    size_t n_quantized;     /* Q: codes of 8-bit state (each slice's start rounded up to 16) */
    size_t n_blocks;        /* NB: 8-bit blocks, one absmax each */
    size_t n_fp32;          /* S: elements of fp32 state */
    int step;               /* updates done */
    float beta1, beta2, eps, grad_clip;
} Optimizer;

/* view NULL: the model's whole buffer (m->params, m->grads, m->params_compute). */
void optimizer_init(Optimizer *o, const Model *m, const Config *c, const OptimizerView *view);
/* The same layout with nothing allocated: state_bytes for the memory plan. Free with optimizer_free. */
void optimizer_plan(Optimizer *o, const Model *m, const Config *c, const OptimizerView *view);
void optimizer_free(Optimizer *o, const Backend *be);
/* adamw8bit's rule for one tensor (see train/optimizer.c): 0 when its moments
 * stay fp32 (adamw, or the whole tensor under adamw8bit_min_numel elements),
 * else the length of the row segments of the whole tensor its blocks are cut
 * within, the same on every layout. */
size_t optimizer_q8_row(const Model *m, const Config *c, const ParamTensor *t);
/* The largest offset <= offset of the model's buffer where its elements may be
 * cut between two ranks' pieces without changing what the update computes:
 * anywhere for adamw; at a block start of the 8-bit rule for adamw8bit, so
 * every rank quantizes the same blocks as one rank. */
size_t optimizer_cut(const Model *m, const Config *c, size_t offset);
/* optimizer_cut as ddp_plan's CutRule; ctx: an OptimizerCut. */
typedef struct { const Model *m; const Config *c; } OptimizerCut;
size_t optimizer_cut_rule(const void *ctx, size_t offset);
/* The view of this rank's ZeRO-1 shard (parallel/ddp.h). *pieces is allocated
 * here; optimizer_init copies what it needs, so free it after. */
OptimizerView optimizer_zero_view(const Ddp *d, OptPiece **pieces);
/* The gradients hold loss_scale x the true gradients (1 unless fp16 loss
 * scaling). With sequence parallelism, first sum the replicated tensors'
 * gradients over tp (each rank's covers its own tokens only). Unscale, clip
 * to grad_clip by the global norm over every rank holding a part of the
 * model, then update. Returns that (true) norm; a non-finite norm — an
 * overflow somewhere — skips the update, for both optimizers before either
 * touches anything (the step count stays). */
double optimizer_step(Optimizer *o, Model *m, float lr, float loss_scale);
/* Bytes the optimizer allocates on the backend: its state (8 * n_params for
 * adamw) and, with sequence parallelism, the norm gradients' pack. */
size_t optimizer_state_bytes(const Optimizer *o);
/* The moments as two fp32 host arrays laid out like the view (n), the form
 * checkpoints store (optimizer.adamw.m/..., optimizer.adamw.v/...): adamw
 * copies them down; adamw8bit dequantizes (map value * absmax). */
void optimizer_moments_get(const Optimizer *o, const Model *m, float *m_out, float *v_out);
/* The reverse: adamw copies up; adamw8bit quantizes per block. Quantizing what
 * optimizer_moments_get gave returns the same codes and absmax bit for bit
 * (each block's largest element maps to the exact code +-1), so an 8-bit run
 * saved and resumed through fp32 moments continues exactly, and an fp32 AdamW
 * checkpoint converts into an 8-bit run (and back) by the same two calls. */
void optimizer_moments_set(Optimizer *o, const Model *m, const float *m_in, const float *v_in);
/* Moments of 8-bit AdamW from before issue 52 (v on its own map) may hold v = 0 under m != 0, which no
 * AdamW run reaches and which would step by the cap (8-bit) or m/eps (fp32) every step: sets those m to 0.
 * Returns how many (n elements of host arrays). */
size_t optimizer_drop_lost_moments(float *m, const float *v, size_t n);
