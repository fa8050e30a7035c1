/* model/llama.c — the LLaMA decoder on local shapes: forward, backward, logits, decode.
 *
 * One step of data: ids -> embedding -> L x [RMSNorm -> qkv -> RoPE -> causal
 * GQA attention -> wo -> +residual -> RMSNorm -> gate|up -> SwiGLU -> w2 ->
 * +residual] -> RMSNorm -> LM head -> cross-entropy; backward in reverse.
 * Everything runs on one chunk of layers for the micro-batch of one slot
 * (model/llama.h), so a pipeline schedule can interleave micro-batches.
 *
 * Tensor parallel (Megatron; docs/tensor-parallel.md walks through one block):
 * wqkv, w13 and the LM head are column-parallel (each rank computes its own
 * heads, FFN columns or block of the vocabulary), wo and w2 row-parallel (each
 * rank's output is a partial sum), and the embedding is split over the
 * vocabulary (each rank looks up the ids of its block). Two operators connect
 * them to the residual stream, tp_all_tokens and tp_sum_tokens below; with
 * sequence parallelism the stream holds N/tp tokens and they become an
 * all-gather and a reduce-scatter. The cross-entropy over the split vocabulary
 * gathers three numbers per token, never the logits. With tp = 1 every
 * collective returns at once: one code for every layout. */
#include "llama.h"
#include "context.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t act_size(const Model *m) { return dtype_size(backend_storage(m->be)); }
static void *act_at(const Model *m, void *base, size_t elements) { return (char *)base + elements * act_size(m); }

/* ------------------------------------------------------------------ weights */

/* The model units (llama.h): the embedding first when this part holds it, the layers, the head last. */
static int layer_unit(const Model *m, int i) { return m->part.has_embedding + i; }
static int head_unit(const Model *m) { return m->n_units - 1; }
#define EMBEDDING_UNIT 0

/* One unit's weights in the compute dtype: the tensor at element o of the
 * parameter buffer is at base + (o - first) elements (tensor_at). */
typedef struct { const char *base; size_t first; } UnitWeights;

/* The weights unit u runs with. compute_weights=keep: the compute copy,
 * refreshed by the optimizer. per_layer: the unit's place (model_unit_place),
 * cast there from the fp32 master now, unless it is the layer the layer place
 * already holds (the recompute and the backward of one block; a pipeline
 * stage's forward then backward of the same layer) and the master has not
 * changed since (model_master_changed). The embedding and the head are cast at
 * each use: their place may lie over the recompute buffers, which every block
 * writes. Either way the values are the same bits: the cast rounds as the
 * optimizer's refresh of the copy does. */
static UnitWeights unit_weights(Model *m, int u) {
    if (m->weights_at) return (UnitWeights){m->weights_at[u], m->units[u].offset};   /* zero=3: gathered there by the schedule */
    if (!m->part.weights_per_layer) return (UnitWeights){m->params_compute, 0};
    const ModelUnit *unit = &m->units[u];
    char *place = model_unit_place(m, u);
    int layer = u >= m->part.has_embedding && u < m->n_units - m->part.has_head;
    if (!layer || m->layer_weights_unit != u) {
        m->be->cast_from_fp32(place, m->params + unit->offset, unit->count);
        if (layer) m->layer_weights_unit = u;
    }
    return (UnitWeights){place, unit->offset};
}

static const void *tensor_at(const Model *m, UnitWeights w, size_t offset) { return w.base + (offset - w.first) * act_size(m); }

/* Whether the backward adds into gradient k (grad_fresh's index) or, its first write of the step, overwrites it. */
static int accumulate_into(Model *m, int k) {
    if (!m->grad_fresh || !m->grad_fresh[k]) return 1;
    m->grad_fresh[k] = 0;
    return 0;
}
static int layer_grad(int i, int kind) { return i * GRAD_PER_LAYER + kind; }
static int head_grad(const Model *m, int k /* 0: the final norm, 1: the LM head */) { return m->n_local_layers * GRAD_PER_LAYER + k; }

/* The fp32 gradient of the tensor at element offset of unit u: in the model's buffer, or (zero=2/3) in the unit's place. */
static float *grad_at(const Model *m, int u, size_t offset) {
    return m->grads_at ? m->grads_at[u] + (offset - m->units[u].offset) : m->grads + offset;
}

/* The LM head (V,C), given the head unit's weights W: in W, or with tied
 * embeddings the embedding's (per_layer casts it beside the head's, both kept). */
static const void *lm_head(Model *m, UnitWeights W) {
    return tensor_at(m, m->cfg.tie_embeddings ? unit_weights(m, EMBEDDING_UNIT) : W, m->off_lm_head);
}

/* The tokens of the residual stream on this rank: all N, or N/tp with sequence parallelism. */
static int stream_tokens(const Model *m, int N) { return m->sp ? N / m->part.tp : N; }

/* Each tp rank's piece of an (N,C) tensor split by tokens: N/tp rows. */
static void token_pieces(const Model *m, int N, size_t *counts) {
    for (int r = 0; r < m->part.tp; r++) counts[r] = (size_t)(N / m->part.tp) * m->C;
}

/* Megatron's two operators, where the residual stream meets a tensor-parallel
 * region. A column-parallel matmul reads every token of its input whole; a
 * row-parallel matmul leaves each rank a partial sum of its output.
 *
 * tp_all_tokens: x (Ns,C) -> every token (N,C). The forward of f (before a
 * column-parallel matmul) and the backward of g (d of a row-parallel output).
 * Without sequence parallelism the stream already holds every token: the
 * identity. With it, an all-gather over tp into m->gathered. */
static void *tp_all_tokens(Model *m, void *x, int N) {
    if (!m->sp) return x;
    size_t counts[m->part.tp];
    token_pieces(m, N, counts);
    comm_allgather(m->comm, GROUP_TP, x, m->gathered, counts, backend_storage(m->be));
    return m->gathered;
}

/* tp_sum_tokens: partial (N,C) on each rank -> the sum over tp, for the
 * stream's tokens (Ns,C). The forward of g (after a row-parallel matmul) and
 * the backward of f (d of a column-parallel input). Without sequence
 * parallelism an all-reduce, in place; with it, a reduce-scatter that leaves
 * this rank the sum of its own tokens, in m->gathered. */
static void *tp_sum_tokens(Model *m, void *partial, int N) {
    if (!m->sp) {
        comm_allreduce(m->comm, GROUP_TP, partial, (size_t)N * m->C, backend_storage(m->be));
        return partial;
    }
    size_t counts[m->part.tp];
    token_pieces(m, N, counts);
    comm_reduce_scatter(m->comm, GROUP_TP, partial, m->gathered, counts, backend_storage(m->be));
    return m->gathered;
}

/* Whether x of the matmul `which` (its args q) is a cast form its producer wrote: hs (swiglu_forward_of) for down; the
 * norm's output (rmsnorm_forward_of) for q|k|v and gate|up, unless sequence parallelism gathers that output first. */
static int x_cast_by_producer(const Model *m, int which, const Fp8Matmul *q) {
    if (!model_fp8_producer_casts(m, q)) return 0;
    return which == FP8_W2 || ((which == FP8_QKV || which == FP8_W13) && !m->sp);
}

/* A block matmul of local layer i (which: FP8_QKV .. FP8_W2) through the
 * backend: in FP8 with the layer's scales under precision=fp8 (model/fp8.h),
 * else in the act dtype. i < 0: never in FP8 (generation records no maxima). */
static void linear_forward(Model *m, int i, int which, void *out, const void *x, const void *w, int N, int IC, int OC, const void *add) {
    if (i < 0 || !m->part.fp8) { m->be->matmul_forward(out, x, w, N, IC, OC, add); return; }
    Fp8Matmul q;
    model_fp8_args(m, i, which, &q);
    q.x_cast = x_cast_by_producer(m, which, &q);
    m->be->matmul_fp8_forward(out, x, w, N, IC, OC, add, &q);
}
static void linear_backward(Model *m, int i, int which, void *dx, float *dw, const void *dy, const void *x, const void *w, int N, int IC,
                            int OC) {
    static const int kind[FP8_MATMULS] = {[FP8_QKV] = GRAD_QKV, [FP8_O] = GRAD_O, [FP8_W13] = GRAD_W13, [FP8_W2] = GRAD_W2};
    int acc = dw ? accumulate_into(m, layer_grad(i, kind[which])) : 0;   /* dw NULL: B's input gradient alone (split_backward) */
    if (!m->part.fp8) { m->be->matmul_backward(dx, dw, dy, x, w, N, IC, OC, acc); return; }
    Fp8Matmul q;
    model_fp8_args(m, i, which, &q);
    q.x_cast = x_cast_by_producer(m, which, &q);
    q.dout_cast = which == FP8_W13 && model_fp8_producer_casts(m, &q);   /* dy is dh13: swiglu_backward_of cast it */
    m->be->matmul_fp8_backward(dx, dw, dy, x, w, N, IC, OC, acc, &q);
}

/* RMSNorm of local layer i before its matmul `which` (FP8_QKV or FP8_W13), forward: out (Ns,C) and rstd (Ns) from inp
 * (Ns,C), or out the matmul's cast form where its producer casts (x_cast_by_producer); i < 0: generation, never. */
static void rmsnorm_forward_of(Model *m, int i, int which, void *out, float *rstd, const void *inp, const void *w, int Ns) {
    Fp8Matmul q;
    if (i >= 0 && m->part.fp8) model_fp8_args(m, i, which, &q);
    if (i < 0 || !m->part.fp8 || !x_cast_by_producer(m, which, &q)) {
        m->be->rmsnorm_forward(out, rstd, inp, w, Ns, m->C, m->cfg.norm_eps);
        return;
    }
    m->be->rmsnorm_forward_fp8(out, rstd, inp, w, Ns, m->C, m->cfg.norm_eps, &q);
    m->fp8.producer_casts++;
}
/* SwiGLU of local layer i, forward: hs (N,F) from h13 (N,2F), straight into the down matmul's FP8 copies where
 * precision=fp8's producers cast (model_fp8_producer_casts); i < 0: generation, never. */
static void swiglu_forward_of(Model *m, int i, void *hs, const void *h13, int N, int F) {
    Fp8Matmul q;
    if (i >= 0 && m->part.fp8) model_fp8_args(m, i, FP8_W2, &q);
    if (i < 0 || !m->part.fp8 || !model_fp8_producer_casts(m, &q)) { m->be->swiglu_forward(hs, h13, N, F); return; }
    m->be->swiglu_forward_fp8(hs, h13, N, F, &q);
    m->fp8.producer_casts++;
}
/* ... and backward: dh13 (N,2F) over h13 from dhs (N,F), or straight into the gate|up matmul's FP8 copies (h13 kept) */
static void swiglu_backward_of(Model *m, int i, void *h13, const void *dhs, int N, int F) {
    Fp8Matmul q;
    if (m->part.fp8) model_fp8_args(m, i, FP8_W13, &q);
    if (!m->part.fp8 || !model_fp8_producer_casts(m, &q)) { m->be->swiglu_backward(h13, dhs, h13, N, F); return; }
    m->be->swiglu_backward_fp8(dhs, h13, N, F, &q);
    m->fp8.producer_casts++;
}

/* A row-parallel matmul (layer i's `which`) back into the residual stream: out (Ns,C) = res
 * (Ns,C) + g(x (N,K) @ w^T), w this rank's (C,K) slice. With tp = 1 there is
 * no partial sum to reduce, and the residual rides in the matmul's epilogue
 * (one rounding, no add kernel); otherwise the partial sum, g, then the add. */
static void row_parallel_residual(Model *m, int i, int which, void *out, const void *x, const void *w, int N, int K, const void *res) {
    if (m->part.tp == 1) {
        linear_forward(m, i, which, out, x, w, N, K, m->C, res);
        return;
    }
    linear_forward(m, i, which, m->tmp, x, w, N, K, m->C, NULL);       /* a partial sum */
    void *y = tp_sum_tokens(m, m->tmp, N);                             /* g */
    m->be->add(out, res, y, (size_t)stream_tokens(m, N) * m->C);
}

/* The vocab-parallel embedding: ids (N) -> res0 (Ns,C). Each rank looks up
 * the ids of its block of the vocabulary (zero rows for the others); the sum
 * over tp (g) completes every row. */
static void embed(Model *m, const int *ids, void *res0, int N) {
    const Backend *be = m->be;
    UnitWeights W = unit_weights(m, EMBEDDING_UNIT);
    be->embedding_forward(m->tmp, ids, tensor_at(m, W, m->off_embedding), N, m->C, m->v0, m->v_valid);
    void *x = tp_sum_tokens(m, m->tmp, N);
    be->copy(res0, x, (size_t)stream_tokens(m, N) * m->C * act_size(m));
}

/* ------------------------------------------------------------------ forward */

/* One decoder block, forward, on S->res[j] -> S->res[j+1], with the weights of
 * local layer i (j: its index inside the chunk). Training attention saves lse
 * for the backward; generation (cached) attends through the KV cache at
 * positions pos0 .. pos0+T-1 instead. for_backward: the full-recompute re-run,
 * which stops once every activation the backward reads is back. */
static void block_forward(Model *m, ActSlot *S, int i, int j, int B, int T, int pos0, int cached, int for_backward) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int N = B * T, Ns = stream_tokens(m, N), C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    UnitWeights W = unit_weights(m, layer_unit(m, i));
    void *x;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
    int f8 = cached ? -1 : i;   /* the FP8 layer, or none */
    rmsnorm_forward_of(m, f8, FP8_QKV, L->ln1, L->ln1_rstd, S->res[j], tensor_at(m, W, o->attn_norm), Ns);   /* under fp8, maybe its FP8 copies */
    x = tp_all_tokens(m, L->ln1, N);                                   /* f: q|k|v are column-parallel */
    linear_forward(m, f8, FP8_QKV, L->qkv, x, tensor_at(m, W, o->wqkv), N, C, QKV, NULL);
    if (m->cp > 1) {   /* context parallel: global positions, K/V from every cp rank (model/context.h) */
        context_rope_forward(m, L->qkv, B, T);
        context_attention_forward(m, L, B, T);
    } else {
        be->rope_forward(L->qkv, B, T, NH, NKV, HD, c->rope_theta, pos0);
        if (cached) be->attention_cached(L->att, m->kcache[i], m->vcache[i], L->qkv, B, T, pos0, m->T, NH, NKV, HD);
        else be->attention_forward(L->att, L->lse, L->qkv, B, T, NH, NKV, HD);
    }
    row_parallel_residual(m, f8, FP8_O, L->res_mid, L->att, tensor_at(m, W, o->wo), N, NH * HD, S->res[j]);
    rmsnorm_forward_of(m, f8, FP8_W13, L->ln2, L->ln2_rstd, L->res_mid, tensor_at(m, W, o->ffn_norm), Ns);
    x = tp_all_tokens(m, L->ln2, N);                                   /* f: gate|up are column-parallel */
    linear_forward(m, f8, FP8_W13, L->h13, x, tensor_at(m, W, o->w13), N, C, 2 * F, NULL);
    swiglu_forward_of(m, f8, L->hs, L->h13, N, F);                    /* hs: under fp8, maybe its FP8 copies */
    if (for_backward) return;   /* full recompute: the block's output res[j+1] is not needed again */
    row_parallel_residual(m, f8, FP8_W2, S->res[j + 1], L->hs, tensor_at(m, W, o->w2), N, F, L->res_mid);
}

/* Forward steps [from, to) of chunk k's trunk — [embedding], the chunk's blocks — for slot s:
 * ids or res[0] -> res[n_layers] once every step has run. Step 0 is the embedding when the chunk holds it. */
static void chunk_trunk(Model *m, int k, int s, const int *ids, int B, int T, int from, int to) {
    if (B > m->B || T > m->T) die("internal: micro-batch %dx%d exceeds the allocated %dx%d", B, T, m->B, m->T);
    if (m->sp && (B * T) % m->part.tp) die("internal: sequence parallel splits %d tokens over tp=%d", B * T, m->part.tp);
    ActSlot *S = &m->slots[s];
    m->slot_B[s] = B; m->slot_T[s] = T;
    int emb = k == 0 && m->part.has_embedding;
    if (emb && from == 0) {
        m->be->upload_async(S->ids, ids, (size_t)B * T * sizeof(int));
        embed(m, S->ids, S->res[0], B * T);
    }
    for (int j = 0; j < m->part.chunks[k].n_layers; j++)
        if (from <= j + emb && j + emb < to) block_forward(m, S, m->chunk_first[k] + j, j, B, T, 0, 0, 0);
}

/* The losses are read back without waiting for the device: each head forward
 * queues the download of its per-token losses into a region of its own, and
 * fold_losses sums the regions into losses_taken once the device has written
 * them: per forward a double sum in token order, the forwards in the order
 * they ran. */
static void fold_losses(Model *m) {
    if (m->n_losses_pending) m->be->synchronize();
    for (int k = 0; k < m->n_losses_pending; k++) {
        double sum = 0;
        for (int n = 0; n < m->loss_tokens[k]; n++) sum += m->loss_regions[k][n];
        m->losses_taken += sum;
    }
    m->n_losses_pending = 0;
}

/* Queues the download of a forward's per-token losses (N) into the next free region. */
static void queue_losses(Model *m, const float *losses, int N) {
    if (m->n_losses_pending == MODEL_LOSS_REGIONS) fold_losses(m);   /* all in use: wait for the device once to free them */
    int k = m->n_losses_pending++;
    if (k == m->n_loss_regions)
        m->loss_regions[m->n_loss_regions++] = m->be->alloc_host((size_t)m->B * m->T * sizeof(float), "the losses read back");
    m->loss_tokens[k] = N;
    m->be->download_async(m->loss_regions[k], losses, (size_t)N * sizeof(float));
}

double model_take_losses(Model *m) {
    fold_losses(m);
    double sum = m->losses_taken;
    m->losses_taken = 0;
    return sum;
}

/* The head, chunk by chunk of head_chunk tokens, the LM head column-parallel
 * over the vocabulary: logits of this rank's block -> its cross-entropy
 * statistics, gathered over tp -> loss and dlogits (written over the logits)
 * -> at once the head's backward for the chunk: this rank's share of dlnf
 * (into scratch1) and dW_head; then the sum of the shares (f's backward) and
 * the final norm's backward into the slot's dres. So only one chunk of one
 * block of logits ever exists. The losses are queued for model_take_losses. */
static void head_forward(Model *m, int s, const int *targets, float dloss) {
    const Backend *be = m->be;
    ActSlot *S = &m->slots[s];
    int N = m->slot_B[s] * m->slot_T[s], Ns = stream_tokens(m, N), C = m->C, V = m->V, tp = m->part.tp;
    int nl = m->part.chunks[m->part.n_chunks - 1].n_layers;
    UnitWeights W = unit_weights(m, head_unit(m));
    const void *norm = tensor_at(m, W, m->off_final_norm), *Wh = lm_head(m, W);
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, S->res[nl], norm, Ns, C, m->cfg.norm_eps);
    void *x = tp_all_tokens(m, S->lnf, N);   /* f: the head is column-parallel */
    be->upload_async(S->targets, targets, (size_t)N * sizeof(int));
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        void *xc = act_at(m, x, (size_t)c0 * C);
        size_t counts[tp];
        for (int r = 0; r < tp; r++) counts[r] = 3 * (size_t)n;
        float *mine = m->ce_stats + (size_t)m->part.tp_rank * 3 * n;                        /* my (3,n) of the (tp,3,n) */
        be->matmul_forward(m->logits, xc, Wh, n, C, V, NULL);                               /* (n,V) this rank's block */
        const float *stats = NULL;   /* tp = 1: the loss kernel sums up each row itself (one pass over the logits fewer) */
        if (tp > 1) {
            be->cross_entropy_stats(mine, m->logits, S->targets + c0, n, V, m->v0, m->v_valid);
            comm_allgather(m->comm, GROUP_TP, mine, m->ce_stats, counts, DTYPE_FP32);       /* in place: every rank's */
            stats = m->ce_stats;
        }
        be->cross_entropy_loss(S->losses + c0, m->logits, stats, tp, S->targets + c0, n, V, m->v0, m->v_valid, dloss, IGNORE_INDEX);
        if (dloss != 0)
            be->matmul_backward(act_at(m, m->scratch1, (size_t)c0 * C), grad_at(m, head_unit(m), m->off_lm_head), m->logits, xc, Wh, n, C,
                                V, accumulate_into(m, head_grad(m, 1)));
    }
    if (dloss != 0) {   /* scratch1 holds this rank's share of dlnf: summed, it starts the residual stream's gradient */
        void *dx = tp_sum_tokens(m, m->scratch1, N);
        be->zero(S->dres, (size_t)Ns * C * act_size(m));
        be->rmsnorm_backward(S->dres, grad_at(m, head_unit(m), m->off_final_norm), dx, S->res[nl], norm, S->lnf_rstd, Ns, C,
                             accumulate_into(m, head_grad(m, 0)));
    } else {   /* no backward of the head (evaluation, or a step without a valid target): its gradients are zero, not unwritten */
        if (!accumulate_into(m, head_grad(m, 1))) be->zero(grad_at(m, head_unit(m), m->off_lm_head), (size_t)V * C * sizeof(float));
        if (!accumulate_into(m, head_grad(m, 0))) be->zero(grad_at(m, head_unit(m), m->off_final_norm), (size_t)C * sizeof(float));
    }
    queue_losses(m, S->losses, N);
}

static int chunk_has_head(const Model *m, int chunk) { return chunk == m->part.n_chunks - 1 && m->part.has_head; }

int model_forward_steps(const Model *m, int chunk) {
    return (chunk == 0 && m->part.has_embedding) + m->part.chunks[chunk].n_layers + chunk_has_head(m, chunk);
}

int model_forward_step_unit(const Model *m, int chunk, int step) {
    int emb = chunk == 0 && m->part.has_embedding;
    if (emb && step == 0) return EMBEDDING_UNIT;
    int j = step - emb;
    return j < m->part.chunks[chunk].n_layers ? layer_unit(m, m->chunk_first[chunk] + j) : head_unit(m);
}

int model_backward_step_unit(const Model *m, int chunk, int step) {
    int nl = m->part.chunks[chunk].n_layers;
    return step < nl ? layer_unit(m, m->chunk_first[chunk] + nl - 1 - step) : -1;   /* the embedding's backward reads no weights */
}

void model_forward_chunk_steps(Model *m, int chunk, int slot, const int *ids, const int *targets, int B, int T, float dloss, int from,
                               int to) {
    int n = model_forward_steps(m, chunk);
    chunk_trunk(m, chunk, slot, ids, B, T, from, to);
    if (chunk_has_head(m, chunk) && from < n && n <= to) head_forward(m, slot, targets, dloss);
}

void model_forward_chunk(Model *m, int chunk, int slot, const int *ids, const int *targets, int B, int T, float dloss) {
    model_forward_chunk_steps(m, chunk, slot, ids, targets, B, T, dloss, 0, model_forward_steps(m, chunk));
}

double model_forward(Model *m, const int *ids, const int *targets, int B, int T, float dloss) {
    if (m->part.n_chunks != 1 || !m->part.has_embedding || !m->part.has_head)
        die("internal: model_forward needs the whole model on one rank");
    if (m->n_losses_pending || m->losses_taken != 0)   /* the losses of earlier forwards, queued or folded, not taken */
        die("internal: model_forward while the losses of earlier forwards wait for model_take_losses");
    model_forward_chunk(m, 0, 0, ids, targets, B, T, dloss);
    return model_take_losses(m);
}

void model_logits(Model *m, const int *ids, int B, int T, float *out) {
    const Backend *be = m->be;
    if (m->part.tp != 1 || m->cp != 1) die("internal: model_logits needs the whole model and sequence on one rank (tp=1, cp=1)");
    chunk_trunk(m, 0, 0, ids, B, T, 0, model_forward_steps(m, 0));
    ActSlot *S = &m->slots[0];
    int N = B * T, C = m->C, V = m->V;
    size_t a = act_size(m);
    UnitWeights W = unit_weights(m, head_unit(m));
    const void *Wh = lm_head(m, W);
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, S->res[m->n_local_layers], tensor_at(m, W, m->off_final_norm), N, C, m->cfg.norm_eps);
    void *row = mallocCheck((size_t)m->head_chunk * V * a);
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        be->matmul_forward(m->logits, act_at(m, S->lnf, (size_t)c0 * C), Wh, n, C, V, NULL);
        be->download(row, m->logits, (size_t)n * V * a);
        for (size_t i = 0; i < (size_t)n * V; i++) out[(size_t)c0 * V + i] = dtype_to_float(row, backend_storage(be), i);
    }
    free(row);
}

const float *model_decode(Model *m, const int *ids, int T, int pos0) {
    const Backend *be = m->be;
    int C = m->C, KV = m->NKV * m->HD;
    if (pos0 + T > m->T) die("internal: decode to position %d past the context of %d", pos0 + T, m->T);
    if (m->part.tp != 1 || m->cp != 1) die("internal: model_decode needs the whole model and sequence on one rank (tp=1, cp=1)");
    if (!m->kcache) {
        m->kcache = callocCheck(m->n_local_layers, sizeof(void *));
        m->vcache = callocCheck(m->n_local_layers, sizeof(void *));
        for (int i = 0; i < m->n_local_layers; i++) {
            m->kcache[i] = be->alloc((size_t)m->T * KV * act_size(m), "KV cache");
            m->vcache[i] = be->alloc((size_t)m->T * KV * act_size(m), "KV cache");
        }
        m->host_logits = mallocCheck((size_t)m->V * sizeof(float));
        m->host_row = mallocCheck((size_t)m->V * act_size(m));
    }
    ActSlot *S = &m->slots[0];
    be->upload_async(S->ids, ids, (size_t)T * sizeof(int));
    embed(m, S->ids, S->res[0], T);
    for (int i = 0; i < m->n_local_layers; i++) block_forward(m, S, i, i, 1, T, pos0, 1, 0);
    /* only the last position's logits are needed */
    void *last = act_at(m, S->res[m->n_local_layers], (size_t)(T - 1) * C);
    UnitWeights W = unit_weights(m, head_unit(m));
    const void *Wh = lm_head(m, W);
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, last, tensor_at(m, W, m->off_final_norm), 1, C, m->cfg.norm_eps);
    be->matmul_forward(m->logits, S->lnf, Wh, 1, C, m->V, NULL);
    be->download(m->host_row, m->logits, (size_t)m->V * act_size(m));
    for (int v = 0; v < m->V; v++) m->host_logits[v] = dtype_to_float(m->host_row, backend_storage(be), v);
    return m->host_logits;
}

/* ----------------------------------------------------------------- backward */

/* Bring back what the backward of layer j of the slot reads and the recompute mode dropped. */
static void recompute_block(Model *m, ActSlot *S, int i, int j, int B, int T) {
    const Backend *be = m->be;
    int N = B * T, Ns = stream_tokens(m, N);
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
    if (m->recompute == RECOMPUTE_FULL) block_forward(m, S, i, j, B, T, 0, 0, 1);
    if (m->recompute != RECOMPUTE_SELECTIVE) return;
    UnitWeights W = unit_weights(m, layer_unit(m, i));
    /* not ln1: it shares ln2's buffer, and block_backward brings it back once the MLP is done with ln2 */
    if (m->cp > 1) context_attention_forward(m, L, B, T);
    else be->attention_forward(L->att, L->lse, L->qkv, B, T, m->NH, m->NKV, m->HD);
    rmsnorm_forward_of(m, i, FP8_W13, L->ln2, L->ln2_rstd, L->res_mid, tensor_at(m, W, o->ffn_norm), Ns);
    swiglu_forward_of(m, i, L->hs, L->h13, N, m->F);
}

/* split_backward: W of this layer will read t (bytes) as it is now: copy it into the store, unless the store has no
 * copy of it (NULL: W reads the slot's own, which stays) */
static void keep(Model *m, void *kept, const void *t, size_t bytes) {
    if (kept) m->be->copy(kept, t, bytes);
}

/* Backward of one block: S->dres holds d(res[j+1]) and becomes d(res[j]).
 * Each operator's backward is the other operator: g's is tp_all_tokens, f's
 * tp_sum_tokens. With sequence parallelism the norm outputs were kept for the
 * stream's tokens only and are gathered again for the weight gradients.
 * K not NULL (split_backward): B alone — no gradient is written (the norms'
 * weight gradients go to norm_dw_discard), and each matmul's input and output
 * gradient and each norm's input, rstd and incoming gradient are kept in K for
 * block_weights. */
static void block_backward(Model *m, ActSlot *S, int i, int j, int B, int T, WKeep *K) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int N = B * T, Ns = stream_tokens(m, N), C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    void *s1 = m->scratch1, *s2 = m->scratch2, *dres = S->dres, *dy, *x, *dx;
    int u = layer_unit(m, i);
    size_t a = act_size(m);
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
#define DW(off) (K ? NULL : grad_at(m, u, off))
#define KEEP(field, t, bytes) do { if (K) keep(m, K->field, t, bytes); } while (0)
    recompute_block(m, S, i, j, B, T);
    UnitWeights W = unit_weights(m, u);   /* held since the recompute: no second cast */
    /* MLP: dres is d(res[j+1]) */
    dy = tp_all_tokens(m, dres, N);                                                                  /* g's backward */
    KEEP(dy[FP8_W2], dy, (size_t)N * C * a);
    KEEP(x[FP8_W2], L->hs, (size_t)N * F * a);
    linear_backward(m, i, FP8_W2, s1, DW(o->w2), dy, L->hs, tensor_at(m, W, o->w2), N, F, C);                           /* s1 = dhs (N,F) */
    swiglu_backward_of(m, i, L->h13, s1, N, F);                      /* dh13 (N,2F) over h13 (its last use), or FP8 copies */
    KEEP(dy[FP8_W13], L->h13, (size_t)N * 2 * F * a);
    x = tp_all_tokens(m, L->ln2, N);
    KEEP(x[FP8_W13], x, (size_t)N * C * a);
    linear_backward(m, i, FP8_W13, s1, DW(o->w13), L->h13, x, tensor_at(m, W, o->w13), N, C, 2 * F);                    /* s1 = dln2, this rank's share (N,C) */
    dx = tp_sum_tokens(m, s1, N);                                                                    /* f's backward */
    KEEP(dnorm[1], dx, (size_t)Ns * C * a);
    KEEP(norm_in[1], L->res_mid, (size_t)Ns * C * a);
    KEEP(rstd[1], L->ln2_rstd, (size_t)Ns * sizeof(float));
    be->rmsnorm_backward(dres, K ? m->norm_dw_discard : grad_at(m, u, o->ffn_norm), dx, L->res_mid, tensor_at(m, W, o->ffn_norm),
                         L->ln2_rstd, Ns, C, K ? 0 : accumulate_into(m, layer_grad(i, GRAD_FFN_NORM)));
    /* attention: dres is now d(res_mid) */
    dy = tp_all_tokens(m, dres, N);
    KEEP(dy[FP8_O], dy, (size_t)N * C * a);
    KEEP(x[FP8_O], L->att, (size_t)N * NH * HD * a);
    linear_backward(m, i, FP8_O, s1, DW(o->wo), dy, L->att, tensor_at(m, W, o->wo), N, NH * HD, C);                    /* s1 = datt (N,NH*HD) */
    if (m->cp > 1) context_attention_backward(m, s2, s1, L, B, T);                                 /* s2 = dqkv (N,QKV), before RoPE */
    else be->attention_backward(s2, s1, L->qkv, L->att, L->lse, B, T, NH, NKV, HD, c->rope_theta,  /* s2 = dqkv (N,QKV), before RoPE */
                                L->h13, model_attention_work_bytes(m, B, T));                      /* lent: h13 is dead since w13's gradient */
    KEEP(dy[FP8_QKV], s2, (size_t)N * QKV * a);
    if (L->ln1 == L->ln2)   /* recompute on: ln1 shares the buffer ln2 held until w13's gradient (model/layout.c) */
        rmsnorm_forward_of(m, i, FP8_QKV, L->ln1, L->ln1_rstd, S->res[j], tensor_at(m, W, o->attn_norm), Ns);
    x = tp_all_tokens(m, L->ln1, N);
    KEEP(x[FP8_QKV], x, (size_t)N * C * a);
    linear_backward(m, i, FP8_QKV, s1, DW(o->wqkv), s2, x, tensor_at(m, W, o->wqkv), N, C, QKV);                         /* s1 = dln1, this rank's share (N,C) */
    dx = tp_sum_tokens(m, s1, N);
    KEEP(dnorm[0], dx, (size_t)Ns * C * a);
    KEEP(rstd[0], L->ln1_rstd, (size_t)Ns * sizeof(float));
    be->rmsnorm_backward(dres, K ? m->norm_dw_discard : grad_at(m, u, o->attn_norm), dx, S->res[j], tensor_at(m, W, o->attn_norm),
                         L->ln1_rstd, Ns, C, K ? 0 : accumulate_into(m, layer_grad(i, GRAD_ATTN_NORM)));
#undef DW
#undef KEEP
}

/* W of one block: its weight gradients from what its B kept in K (or, where K has no copy, the slot's own), in the
 * fused backward's order. The norms' come from the backend's norm backward, whose input gradient (into scratch1) is
 * not wanted: it reads a weight only for that, so it is given the incoming gradient's first row as one (finite
 * values; W holds no weights: ZeRO-3 gathers none for it). */
static void block_weights(Model *m, ActSlot *S, int i, int j, int B, int T, const WKeep *kept) {
    const Backend *be = m->be;
    int N = B * T, Ns = stream_tokens(m, N), C = m->C, F = m->F, u = layer_unit(m, i);
    const LayerOffsets *o = &m->layer[i];
    const LayerActs *L = &S->acts[j];
    WKeep own = {.x = {L->ln1, L->att, L->ln2, L->hs}, .norm_in = {S->res[j], L->res_mid}, .rstd = {L->ln1_rstd, L->ln2_rstd}}, k = *kept;
    for (int w = 0; w < FP8_MATMULS; w++) if (!k.x[w]) k.x[w] = own.x[w];
    for (int n = 0; n < 2; n++) {
        if (!k.norm_in[n]) k.norm_in[n] = own.norm_in[n];
        if (!k.rstd[n]) k.rstd[n] = own.rstd[n];
    }
    const WKeep *K = &k;
    be->matmul_backward(NULL, grad_at(m, u, o->w2), K->dy[FP8_W2], K->x[FP8_W2], NULL, N, F, C, accumulate_into(m, layer_grad(i, GRAD_W2)));
    be->matmul_backward(NULL, grad_at(m, u, o->w13), K->dy[FP8_W13], K->x[FP8_W13], NULL, N, C, 2 * F,
                        accumulate_into(m, layer_grad(i, GRAD_W13)));
    be->rmsnorm_backward(m->scratch1, grad_at(m, u, o->ffn_norm), K->dnorm[1], K->norm_in[1], K->dnorm[1], K->rstd[1], Ns, C,
                         accumulate_into(m, layer_grad(i, GRAD_FFN_NORM)));
    be->matmul_backward(NULL, grad_at(m, u, o->wo), K->dy[FP8_O], K->x[FP8_O], NULL, N, m->NH * m->HD, C,
                        accumulate_into(m, layer_grad(i, GRAD_O)));
    be->matmul_backward(NULL, grad_at(m, u, o->wqkv), K->dy[FP8_QKV], K->x[FP8_QKV], NULL, N, C, m->QKV,
                        accumulate_into(m, layer_grad(i, GRAD_QKV)));
    be->rmsnorm_backward(m->scratch1, grad_at(m, u, o->attn_norm), K->dnorm[0], K->norm_in[0], K->dnorm[0], K->rstd[0], Ns, C,
                         accumulate_into(m, layer_grad(i, GRAD_ATTN_NORM)));
}

/* The embedding's backward: the rows of this rank's block gather the gradient of the first residual, every token's */
static void embedding_backward(Model *m, ActSlot *S, int B, int T) {
    void *dy = tp_all_tokens(m, S->dres, B * T);
    m->be->embedding_backward(grad_at(m, EMBEDDING_UNIT, m->off_embedding), dy, S->ids, B * T, m->C, m->v0, m->v_valid);
}

void model_backward_chunk(Model *m, int chunk, int slot, int from, int to) {
    ActSlot *S = &m->slots[slot];
    int B = m->slot_B[slot], T = m->slot_T[slot], nl = m->part.chunks[chunk].n_layers;
    for (int step = from; step < to; step++) {
        if (step < nl) {
            int j = nl - 1 - step;
            block_backward(m, S, m->chunk_first[chunk] + j, j, B, T, NULL);
        } else {
            embedding_backward(m, S, B, T);
        }
    }
}

static WKeep *keep_of(Model *m, int keep, int j) {
    if (!m->part.split_backward || keep < 0 || keep >= m->part.n_keeps)
        die("internal: W store %d of a model laid out with %d (split backward %d)", keep, m->part.n_keeps, m->part.split_backward);
    return &m->keeps[(size_t)keep * m->chunk_layers + j];
}

void model_backward_input_chunk(Model *m, int chunk, int slot, int keep, int from, int to) {
    ActSlot *S = &m->slots[slot];
    int B = m->slot_B[slot], T = m->slot_T[slot], nl = m->part.chunks[chunk].n_layers;
    for (int step = from; step < to && step < nl; step++) {   /* the embedding's step has no input gradient: all W */
        int j = nl - 1 - step;
        block_backward(m, S, m->chunk_first[chunk] + j, j, B, T, keep_of(m, keep, j));
    }
}

void model_backward_weight_chunk(Model *m, int chunk, int slot, int keep, int from, int to) {
    ActSlot *S = &m->slots[slot];
    int B = m->slot_B[slot], T = m->slot_T[slot], nl = m->part.chunks[chunk].n_layers;
    for (int step = from; step < to; step++) {
        int j = nl - 1 - step;
        if (step < nl) block_weights(m, S, m->chunk_first[chunk] + j, j, B, T, keep_of(m, keep, j));
        else embedding_backward(m, S, B, T);
    }
}

void model_backward(Model *m) { model_backward_chunk(m, 0, 0, 0, model_backward_steps(m, 0)); }
