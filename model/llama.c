/* model/llama.c — the LLaMA decoder on local shapes: forward, backward, logits, decode.
 *
 * One step of data: ids -> embedding -> L x [RMSNorm -> qkv -> RoPE -> causal
 * GQA attention -> wo -> +residual -> RMSNorm -> gate|up -> SwiGLU -> w2 ->
 * +residual] -> RMSNorm -> LM head -> cross-entropy; backward in reverse.
 * Everything runs on one chunk of layers for the micro-batch of one slot
 * (model/llama.h), so a pipeline schedule can interleave micro-batches.
 * Tensor parallel: wqkv and w13 are column-parallel, wo and w2 row-parallel,
 * so the forward sums their outputs over the tp group (Megatron's g) and the
 * backward sums the gradient of each column-parallel input (Megatron's f). */
#include "llama.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t act_size(const Model *m) { return dtype_size(backend_storage(m->be)); }
static void *act_at(const Model *m, void *base, size_t elements) { return (char *)base + elements * act_size(m); }

/* Megatron's g (forward) and f (backward) operators: the sum over the tp group. */
static void tp_sum(const Model *m, void *x, size_t n) { comm_allreduce(m->comm, GROUP_TP, x, n, backend_storage(m->be)); }

/* ------------------------------------------------------------------ forward */

/* One decoder block, forward, on S->res[j] -> S->res[j+1], with the weights of
 * local layer i (j: its index inside the chunk). Training attention saves lse
 * for the backward; generation (cached) attends through the KV cache at
 * positions pos0 .. pos0+T-1 instead. for_backward: the full-recompute re-run,
 * which stops once every activation the backward reads is back. */
static void block_forward(Model *m, ActSlot *S, int i, int j, int B, int T, int pos0, int cached, int for_backward) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int N = B * T, C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    void *W = m->params_compute;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
    be->rmsnorm_forward(L->ln1, L->ln1_rstd, S->res[j], act_at(m, W, o->attn_norm), N, C, c->norm_eps);
    be->matmul_forward(L->qkv, L->ln1, act_at(m, W, o->wqkv), N, C, QKV);
    be->rope_forward(L->qkv, B, T, NH, NKV, HD, c->rope_theta, pos0);
    if (cached) be->attention_cached(L->att, m->kcache[i], m->vcache[i], L->qkv, B, T, pos0, m->T, NH, NKV, HD);
    else be->attention_forward(L->att, L->lse, L->qkv, B, T, NH, NKV, HD);
    be->matmul_forward(m->tmp, L->att, act_at(m, W, o->wo), N, NH * HD, C);
    tp_sum(m, m->tmp, (size_t)N * C);      /* row-parallel: sum partial outputs */
    be->add(L->res_mid, S->res[j], m->tmp, (size_t)N * C);
    be->rmsnorm_forward(L->ln2, L->ln2_rstd, L->res_mid, act_at(m, W, o->ffn_norm), N, C, c->norm_eps);
    be->matmul_forward(L->h13, L->ln2, act_at(m, W, o->w13), N, C, 2 * F);
    be->swiglu_forward(L->hs, L->h13, N, F);
    if (for_backward) return;   /* full recompute: the block's output res[j+1] is not needed again */
    be->matmul_forward(m->tmp, L->hs, act_at(m, W, o->w2), N, F, C);
    tp_sum(m, m->tmp, (size_t)N * C);
    be->add(S->res[j + 1], L->res_mid, m->tmp, (size_t)N * C);
}

/* [embedding] and the chunk's blocks: ids or res[0] -> res[n_layers] of the slot. */
static void chunk_trunk(Model *m, int k, int s, const int *ids, int B, int T) {
    const Backend *be = m->be;
    if (B > m->B || T > m->T) die("internal: micro-batch %dx%d exceeds the allocated %dx%d", B, T, m->B, m->T);
    ActSlot *S = &m->slots[s];
    m->slot_B[s] = B; m->slot_T[s] = T;
    if (k == 0 && m->part.has_embedding) {
        be->upload(S->ids, ids, (size_t)B * T * sizeof(int));
        be->embedding_forward(S->res[0], S->ids, act_at(m, m->params_compute, m->off_embedding), B * T, m->C);
    }
    for (int j = 0; j < m->part.chunks[k].n_layers; j++) block_forward(m, S, m->chunk_first[k] + j, j, B, T, 0, 0, 0);
}

/* The head, chunk by chunk of head_chunk tokens: logits -> cross-entropy (the
 * gradient written over the logits) -> at once the head's backward for the
 * chunk: dlnf rows (into scratch1) and dW_head; then the final norm's
 * backward into the slot's dres. So only one chunk of logits ever exists. */
static double head_forward(Model *m, int s, const int *targets, float dloss) {
    const Backend *be = m->be;
    ActSlot *S = &m->slots[s];
    int N = m->slot_B[s] * m->slot_T[s], C = m->C, V = m->V, nl = m->part.chunks[m->part.n_chunks - 1].n_layers;
    void *W = m->params_compute, *Wh = act_at(m, W, m->off_lm_head);
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, S->res[nl], act_at(m, W, m->off_final_norm), N, C, m->cfg.norm_eps);
    be->upload(S->targets, targets, (size_t)N * sizeof(int));
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        void *x = act_at(m, S->lnf, (size_t)c0 * C);
        be->matmul_forward(m->logits, x, Wh, n, C, V);
        be->cross_entropy(S->losses + c0, m->logits, S->targets + c0, n, V, dloss, IGNORE_INDEX);
        if (dloss != 0) be->matmul_backward(act_at(m, m->scratch1, (size_t)c0 * C), m->grads + m->off_lm_head, m->logits, x, Wh, n, C, V);
    }
    if (dloss != 0) {   /* scratch1 holds dlnf: the final norm's backward starts the residual stream's gradient */
        be->zero(S->dres, (size_t)N * C * act_size(m));
        be->rmsnorm_backward(S->dres, m->grads + m->off_final_norm, m->scratch1, S->res[nl], act_at(m, W, m->off_final_norm),
                             S->lnf_rstd, N, C);
    }
    be->download(m->host_losses, S->losses, (size_t)N * sizeof(float));
    double sum = 0;
    for (int n = 0; n < N; n++) sum += m->host_losses[n];
    return sum;
}

double model_forward_chunk(Model *m, int chunk, int slot, const int *ids, const int *targets, int B, int T, float dloss) {
    chunk_trunk(m, chunk, slot, ids, B, T);
    if (chunk != m->part.n_chunks - 1 || !m->part.has_head) return 0;
    return head_forward(m, slot, targets, dloss);
}

double model_forward(Model *m, const int *ids, const int *targets, int B, int T, float dloss) {
    if (m->part.n_chunks != 1 || !m->part.has_embedding || !m->part.has_head)
        die("internal: model_forward needs the whole model on one rank");
    return model_forward_chunk(m, 0, 0, ids, targets, B, T, dloss);
}

void model_logits(Model *m, const int *ids, int B, int T, float *out) {
    const Backend *be = m->be;
    chunk_trunk(m, 0, 0, ids, B, T);
    ActSlot *S = &m->slots[0];
    int N = B * T, C = m->C, V = m->V;
    size_t a = act_size(m);
    void *W = m->params_compute;
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, S->res[m->n_local_layers], act_at(m, W, m->off_final_norm), N, C, m->cfg.norm_eps);
    void *row = mallocCheck((size_t)m->head_chunk * V * a);
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        be->matmul_forward(m->logits, act_at(m, S->lnf, (size_t)c0 * C), act_at(m, W, m->off_lm_head), n, C, V);
        be->download(row, m->logits, (size_t)n * V * a);
        for (size_t i = 0; i < (size_t)n * V; i++) out[(size_t)c0 * V + i] = dtype_to_float(row, backend_storage(be), i);
    }
    free(row);
}

const float *model_decode(Model *m, const int *ids, int T, int pos0) {
    const Backend *be = m->be;
    int C = m->C, KV = m->NKV * m->HD;
    if (pos0 + T > m->T) die("internal: decode to position %d past the context of %d", pos0 + T, m->T);
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
    void *W = m->params_compute;
    be->upload(S->ids, ids, (size_t)T * sizeof(int));
    be->embedding_forward(S->res[0], S->ids, act_at(m, W, m->off_embedding), T, C);
    for (int i = 0; i < m->n_local_layers; i++) block_forward(m, S, i, i, 1, T, pos0, 1, 0);
    /* only the last position's logits are needed */
    void *last = act_at(m, S->res[m->n_local_layers], (size_t)(T - 1) * C);
    be->rmsnorm_forward(S->lnf, S->lnf_rstd, last, act_at(m, W, m->off_final_norm), 1, C, m->cfg.norm_eps);
    be->matmul_forward(m->logits, S->lnf, act_at(m, W, m->off_lm_head), 1, C, m->V);
    be->download(m->host_row, m->logits, (size_t)m->V * act_size(m));
    for (int v = 0; v < m->V; v++) m->host_logits[v] = dtype_to_float(m->host_row, backend_storage(be), v);
    return m->host_logits;
}

/* ----------------------------------------------------------------- backward */

/* Bring back what the backward of layer j of the slot reads and the recompute mode dropped. */
static void recompute_block(Model *m, ActSlot *S, int i, int j, int B, int T) {
    const Backend *be = m->be;
    int N = B * T, C = m->C;
    void *W = m->params_compute;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
    if (m->recompute == RECOMPUTE_FULL) block_forward(m, S, i, j, B, T, 0, 0, 1);
    if (m->recompute != RECOMPUTE_SELECTIVE) return;
    be->rmsnorm_forward(L->ln1, L->ln1_rstd, S->res[j], act_at(m, W, o->attn_norm), N, C, m->cfg.norm_eps);
    be->attention_forward(L->att, L->lse, L->qkv, B, T, m->NH, m->NKV, m->HD);
    be->rmsnorm_forward(L->ln2, L->ln2_rstd, L->res_mid, act_at(m, W, o->ffn_norm), N, C, m->cfg.norm_eps);
    be->swiglu_forward(L->hs, L->h13, N, m->F);
}

/* Backward of one block: S->dres holds d(res[j+1]) and becomes d(res[j]). */
static void block_backward(Model *m, ActSlot *S, int i, int j, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int N = B * T, C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    void *W = m->params_compute, *s1 = m->scratch1, *s2 = m->scratch2, *dres = S->dres;
    float *G = m->grads;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &S->acts[j];
    recompute_block(m, S, i, j, B, T);
    /* MLP: dres is d(res[j+1]) */
    be->matmul_backward(s1, G + o->w2, dres, L->hs, act_at(m, W, o->w2), N, F, C);                /* s1 = dhs (N,F) */
    be->swiglu_backward(L->h13, s1, L->h13, N, F);                  /* dh13 (N,2F) over h13: its last use */
    be->matmul_backward(s1, G + o->w13, L->h13, L->ln2, act_at(m, W, o->w13), N, C, 2 * F);       /* s1 = dln2 (N,C) */
    tp_sum(m, s1, (size_t)N * C);                                                                   /* column-parallel input */
    be->rmsnorm_backward(dres, G + o->ffn_norm, s1, L->res_mid, act_at(m, W, o->ffn_norm), L->ln2_rstd, N, C);
    /* attention: dres is now d(res_mid) */
    be->matmul_backward(s1, G + o->wo, dres, L->att, act_at(m, W, o->wo), N, NH * HD, C);        /* s1 = datt (N,NH*HD) */
    be->attention_backward(s2, s1, L->qkv, L->att, L->lse, B, T, NH, NKV, HD);                  /* s2 = dqkv (N,QKV) */
    be->rope_backward(s2, B, T, NH, NKV, HD, c->rope_theta, 0);
    be->matmul_backward(s1, G + o->wqkv, s2, L->ln1, act_at(m, W, o->wqkv), N, C, QKV);          /* s1 = dln1 (N,C) */
    tp_sum(m, s1, (size_t)N * C);
    be->rmsnorm_backward(dres, G + o->attn_norm, s1, S->res[j], act_at(m, W, o->attn_norm), L->ln1_rstd, N, C);
}

void model_backward_chunk(Model *m, int chunk, int slot, int from, int to) {
    ActSlot *S = &m->slots[slot];
    int B = m->slot_B[slot], T = m->slot_T[slot], nl = m->part.chunks[chunk].n_layers;
    for (int step = from; step < to; step++) {
        if (step < nl) {
            int j = nl - 1 - step;
            block_backward(m, S, m->chunk_first[chunk] + j, j, B, T);
        } else {   /* the embedding: its rows gather the gradient of the first residual */
            m->be->embedding_backward(m->grads + m->off_embedding, S->dres, S->ids, B * T, m->C);
        }
    }
}

void model_backward(Model *m) { model_backward_chunk(m, 0, 0, 0, model_backward_steps(m, 0)); }
