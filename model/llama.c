/* model/llama.c — the LLaMA decoder on local shapes: layout, init, forward, backward.
 *
 * One step of data: ids -> embedding -> L x [RMSNorm -> qkv -> RoPE -> causal
 * GQA attention -> wo -> +residual -> RMSNorm -> gate|up -> SwiGLU -> w2 ->
 * +residual] -> RMSNorm -> LM head -> cross-entropy; backward in reverse.
 * Tensor parallel: wqkv and w13 are column-parallel, wo and w2 row-parallel,
 * so the forward sums their outputs over the tp group and the backward sums the
 * gradient of each column-parallel input (Megatron's f and g operators). */
#include "llama.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_CHUNK_ELEMENTS (64u << 20)   /* logits per LM-head chunk: 128 MiB in bf16 */

static size_t act_size(const Model *m) { return dtype_size(backend_storage(m->be)); }
static void *act_at(const Model *m, void *base, size_t elements) { return (char *)base + elements * act_size(m); }

static void add_tensor(Model *m, size_t *cursor, const char *name, int rows, int cols, int grows, int gcols,
                       int row0, int col0, int is_norm) {
    ParamTensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = *cursor;
    t->rows = rows; t->cols = cols;
    t->global_rows = grows; t->global_cols = gcols;
    t->row0 = row0; t->col0 = col0;
    t->is_norm = is_norm;
    *cursor += (size_t)rows * cols;
}

/* Lay out this rank's parameters: HF names, local shapes, offsets. */
static void build_layout(Model *m) {
    const ModelConfig *c = &m->cfg;
    int r = m->comm->tp_rank, C = m->C, HD = m->HD;
    m->tensors = callocCheck(9 * (size_t)m->n_local_layers + 4, sizeof(ParamTensor));
    m->layer = callocCheck(m->n_local_layers, sizeof(LayerOffsets));
    size_t at = 0;
    char name[96];
    if (m->has_embedding) {
        m->off_embedding = at;
        add_tensor(m, &at, "model.embed_tokens.weight", c->vocab_size, C, c->vocab_size, C, 0, 0, 0);
    }
    for (int i = 0; i < m->n_local_layers; i++) {
        int l = m->layer0 + i;
        LayerOffsets *o = &m->layer[i];
#define LNAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        o->attn_norm = at;
        add_tensor(m, &at, LNAME("input_layernorm.weight"), 1, C, 1, C, 0, 0, 1);
        o->wqkv = at;   /* q, k, v rows of this tp rank, adjacent: one fused matrix */
        add_tensor(m, &at, LNAME("self_attn.q_proj.weight"), m->NH * HD, C, c->n_heads * HD, C, r * m->NH * HD, 0, 0);
        add_tensor(m, &at, LNAME("self_attn.k_proj.weight"), m->NKV * HD, C, c->n_kv_heads * HD, C, r * m->NKV * HD, 0, 0);
        add_tensor(m, &at, LNAME("self_attn.v_proj.weight"), m->NKV * HD, C, c->n_kv_heads * HD, C, r * m->NKV * HD, 0, 0);
        o->wo = at;
        add_tensor(m, &at, LNAME("self_attn.o_proj.weight"), C, m->NH * HD, C, c->n_heads * HD, 0, r * m->NH * HD, 0);
        o->ffn_norm = at;
        add_tensor(m, &at, LNAME("post_attention_layernorm.weight"), 1, C, 1, C, 0, 0, 1);
        o->w13 = at;    /* gate and up rows of this tp rank, adjacent */
        add_tensor(m, &at, LNAME("mlp.gate_proj.weight"), m->F, C, c->ffn_dim, C, r * m->F, 0, 0);
        add_tensor(m, &at, LNAME("mlp.up_proj.weight"), m->F, C, c->ffn_dim, C, r * m->F, 0, 0);
        o->w2 = at;
        add_tensor(m, &at, LNAME("mlp.down_proj.weight"), C, m->F, C, c->ffn_dim, 0, r * m->F, 0);
#undef LNAME
    }
    if (m->has_head) {
        m->off_final_norm = at;
        add_tensor(m, &at, "model.norm.weight", 1, C, 1, C, 0, 0, 1);
        if (c->tie_embeddings) {
            if (!m->has_embedding) die("tie_embeddings with pipeline stages is not supported: untie, or use pp=1");
            m->off_lm_head = m->off_embedding;
        } else {
            m->off_lm_head = at;
            add_tensor(m, &at, "lm_head.weight", c->vocab_size, C, c->vocab_size, C, 0, 0, 0);
        }
    }
    m->n_params = at;
}

/* Carve the activation views out of one allocation (or measure it when base
 * is NULL). Each layer's activations are either kept per layer or, when the
 * recompute mode recomputes them in the backward, one buffer shared by all
 * layers: full keeps only each block's input (res), selective also keeps the
 * matmul outputs (qkv, h13), the attention statistics (lse) and res_mid, and
 * recomputes the norms, the attention output and the SwiGLU activation. */
static size_t layout_activations(Model *m, char *base) {
    size_t B = m->B, T = m->T, N = B * T, a = act_size(m), at = 0;
    /* backward scratch: s1 holds dlnf, dhs, datt and dln (widths C, F, NH*HD, C), s2 holds dqkv */
    size_t S1 = (size_t)m->C;
    if ((size_t)m->F > S1) S1 = m->F;
    if ((size_t)m->NH * m->HD > S1) S1 = (size_t)m->NH * m->HD;
#define TAKE(bytes) (at += ((bytes) + 255) & ~(size_t)255, base ? (void *)(base + at - (((bytes) + 255) & ~(size_t)255)) : NULL)
    int sel = m->recompute == RECOMPUTE_SELECTIVE, full = m->recompute == RECOMPUTE_FULL;
    LayerActs shared = {0};   /* what is recomputed lives once, here */
    if (sel || full) {
        shared.ln1 = TAKE(N * m->C * a);
        shared.ln1_rstd = TAKE(N * 4);
        shared.att = TAKE(N * m->NH * m->HD * a);
        shared.ln2 = TAKE(N * m->C * a);
        shared.ln2_rstd = TAKE(N * 4);
        shared.hs = TAKE(N * m->F * a);
    }
    if (full) {
        shared.qkv = TAKE(N * m->QKV * a);
        shared.lse = TAKE(B * m->NH * T * 4);
        shared.res_mid = TAKE(N * m->C * a);
        shared.h13 = TAKE(N * 2 * m->F * a);
    }
    for (int i = 0; i <= m->n_local_layers; i++) m->res[i] = TAKE(N * m->C * a);
    for (int i = 0; i < m->n_local_layers; i++) {
        LayerActs *L = &m->acts[i];
        L->ln1 = sel || full ? shared.ln1 : TAKE(N * m->C * a);
        L->ln1_rstd = sel || full ? shared.ln1_rstd : TAKE(N * 4);
        L->qkv = full ? shared.qkv : TAKE(N * m->QKV * a);
        L->att = sel || full ? shared.att : TAKE(N * m->NH * m->HD * a);
        L->lse = full ? shared.lse : TAKE(B * m->NH * T * 4);
        L->res_mid = full ? shared.res_mid : TAKE(N * m->C * a);
        L->ln2 = sel || full ? shared.ln2 : TAKE(N * m->C * a);
        L->ln2_rstd = sel || full ? shared.ln2_rstd : TAKE(N * 4);
        L->h13 = full ? shared.h13 : TAKE(N * 2 * m->F * a);
        L->hs = sel || full ? shared.hs : TAKE(N * m->F * a);
    }
    m->lnf = TAKE(N * m->C * a);
    m->lnf_rstd = TAKE(N * 4);
    m->logits = TAKE((size_t)m->head_chunk * m->V * a);
    m->losses = TAKE(N * 4);
    m->dres = TAKE(N * m->C * a);
    m->scratch1 = TAKE(N * S1 * a);
    m->tmp = m->scratch1;   /* the forward's tmp is dead whenever the backward's scratch1 is live, and vice versa */
    m->scratch2 = TAKE(N * m->QKV * a);
    m->ids = TAKE(N * 4);
    m->targets = TAKE(N * 4);
#undef TAKE
    return at;
}

void model_plan(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, int B, int T, int recompute) {
    memset(m, 0, sizeof *m);
    m->recompute = recompute;
    m->cfg = *cfg;
    m->be = be;
    m->comm = comm;
    int tp = comm->tp, pp = comm->pp;
    if (cfg->n_heads % tp || cfg->n_kv_heads % tp)
        die("tp=%d must divide n_heads=%d and n_kv_heads=%d: each tensor-parallel rank holds whole heads", tp, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->ffn_dim % tp) die("tp=%d must divide ffn_dim=%d: each tensor-parallel rank holds ffn_dim/tp columns", tp, cfg->ffn_dim);
    if (cfg->n_layers < pp) die("pp=%d stages but only n_layers=%d: each stage needs at least one layer", pp, cfg->n_layers);
    m->C = cfg->dim;
    m->HD = cfg->dim / cfg->n_heads;
    m->NH = cfg->n_heads / tp;
    m->NKV = cfg->n_kv_heads / tp;
    m->F = cfg->ffn_dim / tp;
    m->QKV = (m->NH + 2 * m->NKV) * m->HD;
    m->V = cfg->vocab_size;
    int per = cfg->n_layers / pp, extra = cfg->n_layers % pp, s = comm->pp_rank;
    m->layer0 = s * per + (s < extra ? s : extra);
    m->n_local_layers = per + (s < extra);
    m->has_embedding = s == 0;
    m->has_head = s == pp - 1;
    build_layout(m);
    m->B = B; m->T = T;
    /* the LM head runs over chunks of tokens so the (B*T, V) logits never exist at once */
    m->head_chunk = (int)(HEAD_CHUNK_ELEMENTS / (m->V > 0 ? m->V : 1));
    if (m->head_chunk > 64) m->head_chunk &= ~63;
    if (m->head_chunk < 1) m->head_chunk = 1;
    if (m->head_chunk > B * T) m->head_chunk = B * T;
    m->res = callocCheck(m->n_local_layers + 1, sizeof(void *));
    m->acts = callocCheck(m->n_local_layers, sizeof(LayerActs));
    m->act_bytes = layout_activations(m, NULL);
}

void model_create(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, int B, int T, int recompute) {
    model_plan(m, cfg, be, comm, B, T, recompute);
    size_t P = m->n_params;
    m->params = be->alloc(P * sizeof(float), "fp32 master weights");
    m->params_compute = be->act == DTYPE_FP32 ? (void *)m->params : be->alloc(P * act_size(m), "compute-dtype weights");
    m->grads = be->alloc(P * sizeof(float), "gradients");
    m->act_memory = be->alloc(m->act_bytes, "activations");
    layout_activations(m, m->act_memory);
    m->host_losses = mallocCheck((size_t)B * T * sizeof(float));
}

void model_plan_free(Model *m) {
    free(m->tensors); free(m->layer); free(m->res); free(m->acts);
    memset(m, 0, sizeof *m);
}

void model_free(Model *m) {
    const Backend *be = m->be;
    if (m->params_compute != (void *)m->params) be->free(m->params_compute);
    be->free(m->params);
    be->free(m->grads);
    be->free(m->act_memory);
    for (int i = 0; m->kcache && i < m->n_local_layers; i++) { be->free(m->kcache[i]); be->free(m->vcache[i]); }
    free(m->kcache); free(m->vcache); free(m->host_logits); free(m->host_row);
    free(m->tensors); free(m->layer); free(m->res); free(m->acts); free(m->host_losses);
    memset(m, 0, sizeof *m);
}

const ParamTensor *model_find_tensor(const Model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void model_init_weights(Model *m, uint64_t seed, float init_std) {
    float *host = mallocCheck(m->n_params * sizeof(float));
    float out_std = init_std / sqrtf(2.0f * m->cfg.n_layers);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        float *dst = host + t->offset;
        if (t->is_norm) { for (int j = 0; j < t->cols; j++) dst[j] = 1.0f; continue; }
        int is_out = strstr(t->name, "o_proj") || strstr(t->name, "down_proj");
        float std = is_out ? out_std : init_std;
        Rng rng;
        rng_seed(&rng, seed ^ name_hash(t->name));
        /* draw the whole tensor in row-major order, keep this rank's slice */
        for (int r = 0; r < t->global_rows; r++)
            for (int c = 0; c < t->global_cols; c++) {
                float x = rng_normal(&rng) * std;
                int lr = r - t->row0, lc = c - t->col0;
                if (lr >= 0 && lr < t->rows && lc >= 0 && lc < t->cols) dst[(size_t)lr * t->cols + lc] = x;
            }
    }
    model_set_params(m, host);
    free(host);
}

void model_set_params(Model *m, const float *host) {
    m->be->upload(m->params, host, m->n_params * sizeof(float));
    if (m->params_compute != (void *)m->params) m->be->cast_from_fp32(m->params_compute, m->params, m->n_params);
}

void model_get_params(const Model *m, float *host) { m->be->download(host, m->params, m->n_params * sizeof(float)); }
void model_get_grads(const Model *m, float *host) { m->be->download(host, m->grads, m->n_params * sizeof(float)); }
void model_zero_grads(Model *m) { m->be->zero(m->grads, m->n_params * sizeof(float)); }

/* ------------------------------------------------------------------ forward */

/* One decoder block, forward, on res[i] -> res[i+1]. Training attention saves
 * lse for the backward; generation (cached) attends through the KV cache at
 * positions pos0 .. pos0+T-1 instead. for_backward: the full-recompute re-run,
 * which stops once every activation the backward reads is back. */
static void block_forward(Model *m, int i, int B, int T, int pos0, int cached, int for_backward) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int N = B * T, C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    void *W = m->params_compute;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &m->acts[i];
    be->rmsnorm_forward(L->ln1, L->ln1_rstd, m->res[i], act_at(m, W, o->attn_norm), N, C, c->norm_eps);
    be->matmul_forward(L->qkv, L->ln1, act_at(m, W, o->wqkv), N, C, QKV);
    be->rope_forward(L->qkv, B, T, NH, NKV, HD, c->rope_theta, pos0);
    if (cached) be->attention_cached(L->att, m->kcache[i], m->vcache[i], L->qkv, B, T, pos0, m->T, NH, NKV, HD);
    else be->attention_forward(L->att, L->lse, L->qkv, B, T, NH, NKV, HD);
    be->matmul_forward(m->tmp, L->att, act_at(m, W, o->wo), N, NH * HD, C);
    comm_allreduce_sum(m->comm, GROUP_TP, m->tmp, (size_t)N * C);      /* row-parallel: sum partial outputs */
    be->add(L->res_mid, m->res[i], m->tmp, (size_t)N * C);
    be->rmsnorm_forward(L->ln2, L->ln2_rstd, L->res_mid, act_at(m, W, o->ffn_norm), N, C, c->norm_eps);
    be->matmul_forward(L->h13, L->ln2, act_at(m, W, o->w13), N, C, 2 * F);
    be->swiglu_forward(L->hs, L->h13, N, F);
    if (for_backward) return;   /* full recompute: the block's output res[i+1] is not needed again */
    be->matmul_forward(m->tmp, L->hs, act_at(m, W, o->w2), N, F, C);
    comm_allreduce_sum(m->comm, GROUP_TP, m->tmp, (size_t)N * C);
    be->add(m->res[i + 1], L->res_mid, m->tmp, (size_t)N * C);
}

/* Embedding, the blocks and the final norm: ids (B,T) -> m->lnf (B,T,C). */
static void trunk_forward(Model *m, const int *ids, int B, int T) {
    const Backend *be = m->be;
    if (B > m->B || T > m->T) die("internal: micro-batch %dx%d exceeds the allocated %dx%d", B, T, m->B, m->T);
    int N = B * T, C = m->C;
    m->cur_B = B; m->cur_T = T;
    void *W = m->params_compute;
    be->upload(m->ids, ids, (size_t)N * sizeof(int));
    be->embedding_forward(m->res[0], m->ids, act_at(m, W, m->off_embedding), N, C);
    for (int i = 0; i < m->n_local_layers; i++) block_forward(m, i, B, T, 0, 0, 0);
    be->rmsnorm_forward(m->lnf, m->lnf_rstd, m->res[m->n_local_layers], act_at(m, W, m->off_final_norm), N, C, m->cfg.norm_eps);
}

/* The LM head and the loss, chunk by chunk of head_chunk tokens: logits ->
 * cross-entropy (the gradient written over the logits) -> at once the head's
 * backward for the chunk: dlnf rows (into scratch1) and dW_head. So only one
 * chunk of logits ever exists. */
double model_forward(Model *m, const int *ids, const int *targets, int B, int T, float dloss) {
    const Backend *be = m->be;
    trunk_forward(m, ids, B, T);
    int N = B * T, C = m->C, V = m->V;
    void *W = m->params_compute, *Wh = act_at(m, W, m->off_lm_head);
    be->upload(m->targets, targets, (size_t)N * sizeof(int));
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        void *x = act_at(m, m->lnf, (size_t)c0 * C);
        be->matmul_forward(m->logits, x, Wh, n, C, V);
        be->cross_entropy(m->losses + c0, m->logits, m->targets + c0, n, V, dloss, IGNORE_INDEX);
        if (dloss != 0) be->matmul_backward(act_at(m, m->scratch1, (size_t)c0 * C), m->grads + m->off_lm_head, m->logits, x, Wh, n, C, V);
    }
    be->download(m->host_losses, m->losses, (size_t)N * sizeof(float));
    double sum = 0;
    for (int n = 0; n < N; n++) sum += m->host_losses[n];
    return sum;
}

void model_logits(Model *m, const int *ids, int B, int T, float *out) {
    const Backend *be = m->be;
    trunk_forward(m, ids, B, T);
    int N = B * T, C = m->C, V = m->V;
    size_t a = act_size(m);
    void *row = mallocCheck((size_t)m->head_chunk * V * a);
    for (int c0 = 0; c0 < N; c0 += m->head_chunk) {
        int n = N - c0 < m->head_chunk ? N - c0 : m->head_chunk;
        be->matmul_forward(m->logits, act_at(m, m->lnf, (size_t)c0 * C), act_at(m, m->params_compute, m->off_lm_head), n, C, V);
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
    void *W = m->params_compute;
    be->upload(m->ids, ids, (size_t)T * sizeof(int));
    be->embedding_forward(m->res[0], m->ids, act_at(m, W, m->off_embedding), T, C);
    for (int i = 0; i < m->n_local_layers; i++) block_forward(m, i, 1, T, pos0, 1, 0);
    /* only the last position's logits are needed */
    void *last = act_at(m, m->res[m->n_local_layers], (size_t)(T - 1) * C);
    be->rmsnorm_forward(m->lnf, m->lnf_rstd, last, act_at(m, W, m->off_final_norm), 1, C, m->cfg.norm_eps);
    be->matmul_forward(m->logits, m->lnf, act_at(m, W, m->off_lm_head), 1, C, m->V);
    be->download(m->host_row, m->logits, (size_t)m->V * act_size(m));
    for (int v = 0; v < m->V; v++) m->host_logits[v] = dtype_to_float(m->host_row, backend_storage(be), v);
    return m->host_logits;
}

/* ----------------------------------------------------------------- backward */

/* Bring back what layer i's backward reads and the recompute mode dropped. */
static void recompute_block(Model *m, int i, int B, int T) {
    const Backend *be = m->be;
    int N = B * T, C = m->C;
    void *W = m->params_compute;
    const LayerOffsets *o = &m->layer[i];
    LayerActs *L = &m->acts[i];
    if (m->recompute == RECOMPUTE_FULL) block_forward(m, i, B, T, 0, 0, 1);
    if (m->recompute != RECOMPUTE_SELECTIVE) return;
    be->rmsnorm_forward(L->ln1, L->ln1_rstd, m->res[i], act_at(m, W, o->attn_norm), N, C, m->cfg.norm_eps);
    be->attention_forward(L->att, L->lse, L->qkv, B, T, m->NH, m->NKV, m->HD);
    be->rmsnorm_forward(L->ln2, L->ln2_rstd, L->res_mid, act_at(m, W, o->ffn_norm), N, C, m->cfg.norm_eps);
    be->swiglu_forward(L->hs, L->h13, N, m->F);
}

void model_backward(Model *m) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    int B = m->cur_B, T = m->cur_T, N = B * T, C = m->C, NH = m->NH, NKV = m->NKV, HD = m->HD, F = m->F, QKV = m->QKV;
    void *W = m->params_compute;
    float *G = m->grads;
    void *s1 = m->scratch1, *s2 = m->scratch2, *dres = m->dres;

    /* the head's backward ran inside model_forward: s1 holds dlnf; dlnf -> dres */
    void *x = m->res[m->n_local_layers];
    be->zero(dres, (size_t)N * C * act_size(m));
    be->rmsnorm_backward(dres, G + m->off_final_norm, s1, x, act_at(m, W, m->off_final_norm), m->lnf_rstd, N, C);

    for (int i = m->n_local_layers - 1; i >= 0; i--) {
        const LayerOffsets *o = &m->layer[i];
        LayerActs *L = &m->acts[i];
        recompute_block(m, i, B, T);
        /* MLP: dres is d(res[i+1]) */
        be->matmul_backward(s1, G + o->w2, dres, L->hs, act_at(m, W, o->w2), N, F, C);                /* s1 = dhs (N,F) */
        be->swiglu_backward(L->h13, s1, L->h13, N, F);                  /* dh13 (N,2F) over h13: its last use */
        be->matmul_backward(s1, G + o->w13, L->h13, L->ln2, act_at(m, W, o->w13), N, C, 2 * F);       /* s1 = dln2 (N,C) */
        comm_allreduce_sum(m->comm, GROUP_TP, s1, (size_t)N * C);                                   /* column-parallel input */
        be->rmsnorm_backward(dres, G + o->ffn_norm, s1, L->res_mid, act_at(m, W, o->ffn_norm), L->ln2_rstd, N, C);
        /* attention: dres is now d(res_mid) */
        be->matmul_backward(s1, G + o->wo, dres, L->att, act_at(m, W, o->wo), N, NH * HD, C);        /* s1 = datt (N,NH*HD) */
        be->attention_backward(s2, s1, L->qkv, L->att, L->lse, B, T, NH, NKV, HD);                  /* s2 = dqkv (N,QKV) */
        be->rope_backward(s2, B, T, NH, NKV, HD, c->rope_theta, 0);
        be->matmul_backward(s1, G + o->wqkv, s2, L->ln1, act_at(m, W, o->wqkv), N, C, QKV);          /* s1 = dln1 (N,C) */
        comm_allreduce_sum(m->comm, GROUP_TP, s1, (size_t)N * C);
        be->rmsnorm_backward(dres, G + o->attn_norm, s1, m->res[i], act_at(m, W, o->attn_norm), L->ln1_rstd, N, C);
    }
    be->embedding_backward(G + m->off_embedding, dres, m->ids, N, C);
}

int model_config_check(const ModelConfig *c, char *err, size_t err_size) {
#define BAD(...) do { snprintf(err, err_size, __VA_ARGS__); return -1; } while (0)
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24)) BAD("vocab_size %d is outside [1, 16777216]", c->vocab_size);
    if (c->dim < 2 || c->dim > 65536) BAD("dim %d is outside [2, 65536]", c->dim);
    if (c->n_layers < 1 || c->n_layers > 1024) BAD("n_layers %d is outside [1, 1024]", c->n_layers);
    if (c->n_heads < 1 || c->n_heads > 1024) BAD("n_heads %d is outside [1, 1024]", c->n_heads);
    if (c->n_kv_heads < 1 || c->n_kv_heads > c->n_heads) BAD("n_kv_heads %d is outside [1, n_heads = %d]", c->n_kv_heads, c->n_heads);
    if (c->dim % c->n_heads || c->n_heads % c->n_kv_heads || (c->dim / c->n_heads) % 2)
        BAD("dim %d, n_heads %d, n_kv_heads %d: heads must divide dim into even head dims, and KV heads the heads", c->dim, c->n_heads, c->n_kv_heads);
    if (c->ffn_dim < 1 || c->ffn_dim > (1 << 20)) BAD("ffn_dim %d is outside [1, 1048576]", c->ffn_dim);
    if (c->seq_len < 1 || c->seq_len > (1 << 20)) BAD("seq_len %d is outside [1, 1048576]", c->seq_len);
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1) BAD("tie_embeddings %d is not 0 or 1", c->tie_embeddings);
    if (!(c->rope_theta >= 1 && c->rope_theta <= 1e12f)) BAD("rope_theta %g is outside [1, 1e12]", (double)c->rope_theta);
    if (!(c->norm_eps >= 1e-12f && c->norm_eps <= 1)) BAD("norm_eps %g is outside [1e-12, 1]", (double)c->norm_eps);
    return 0;
#undef BAD
}

size_t model_count_params(const ModelConfig *c) {
    size_t C = c->dim, HD = c->dim / c->n_heads, L = c->n_layers, V = c->vocab_size, F = c->ffn_dim;
    size_t layer = 2 * C + (c->n_heads + 2 * c->n_kv_heads) * HD * C + c->n_heads * HD * C + 3 * F * C;
    return V * C + L * layer + C + (c->tie_embeddings ? 0 : V * C);
}

double model_flops_per_token(const ModelConfig *c) {
    double n_matmul = (double)model_count_params(c) - (double)c->vocab_size * c->dim;  /* embedding lookup is no matmul */
    if (c->tie_embeddings) n_matmul += (double)c->vocab_size * c->dim;                   /* the tied head still is */
    return 6.0 * n_matmul + 6.0 * c->n_layers * c->dim * (double)c->seq_len;
}
