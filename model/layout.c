/* model/layout.c — where everything of a Model lives: the parameter layout of
 * this rank's part (named tensors, per-layer offsets, gradient units), the
 * activation slots carved out of one allocation (buffers whose lives never
 * overlap sharing memory; with a split backward, the W stores), the places per-layer compute weights are cast
 * into, init and host copies.
 *
 * The parameter buffer holds, in forward order: the embedding (first chunk of
 * the model), each chunk's layers, the final norm and LM head (last chunk).
 * Data parallelism reduces it in buckets of whole units from the end backwards,
 * the order in which the backward completes them. Tensor parallelism slices
 * every matrix (ParamTensor says which rectangle of the whole this rank holds)
 * and pads the vocabulary to tp equal blocks: the padding rows follow the real
 * ones in the buffer but belong to no tensor, so no file ever sees them. */
#include "llama.h"
#include "context.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* logits per LM-head chunk, at most: 256 MiB in bf16, 4,096 tokens at V = 32,000 (plan_head_chunk says when half) */
#define HEAD_CHUNK_ELEMENTS (128u << 20)

static size_t act_size(const Model *m) { return dtype_size(backend_storage(m->be)); }

ModelPart model_part_whole(const ModelConfig *cfg) {
    ModelPart p = {.tp = 1, .tp_rank = 0, .n_chunks = 1, .has_embedding = 1, .has_head = 1, .n_slots = 1};
    p.chunks[0] = (ModelChunk){0, cfg->n_layers};
    return p;
}

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

/* A tensor of vocabulary rows (the embedding, the LM head): this rank's block
 * of V rows, of which the tensor is the v_valid real ones; the padding rows of
 * a vocabulary tp does not divide follow it in the buffer but lie in no
 * tensor, so they are never saved, exported or updated (and stay 0). */
static void add_vocab_tensor(Model *m, size_t *cursor, const char *name) {
    size_t start = *cursor;
    int vocab = m->cfg.vocab_size, row0 = m->v0 < vocab ? m->v0 : vocab;
    add_tensor(m, cursor, name, m->v_valid, m->C, vocab, m->C, row0, 0, 0);
    *cursor = start + (size_t)m->V * m->C;
}

static void add_unit(Model *m, size_t offset, size_t end, int chunk, int step) {
    m->units[m->n_units++] = (ModelUnit){offset, end - offset, chunk, step};
}

/* Lay out this rank's parameters: HF names, local shapes, offsets, units. */
static void build_layout(Model *m) {
    const ModelConfig *c = &m->cfg;
    const ModelPart *p = &m->part;
    int r = p->tp_rank, C = m->C, HD = m->HD;
    m->tensors = callocCheck(9 * (size_t)m->n_local_layers + 4, sizeof(ParamTensor));
    m->layer = callocCheck(m->n_local_layers ? m->n_local_layers : 1, sizeof(LayerOffsets));
    m->units = callocCheck((size_t)m->n_local_layers + 2, sizeof(ModelUnit));
    size_t at = 0;
    char name[96];
    if (p->has_embedding) {
        m->off_embedding = at;
        add_vocab_tensor(m, &at, "model.embed_tokens.weight");
        add_unit(m, 0, at, 0, p->chunks[0].n_layers);
    }
    for (int k = 0; k < p->n_chunks; k++) {
        for (int j = 0; j < p->chunks[k].n_layers; j++) {
            int i = m->chunk_first[k] + j, l = p->chunks[k].first_layer + j;
            size_t start = at;
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
            m->tensors[m->n_tensors - 1].split_cols = 1;
            o->ffn_norm = at;
            add_tensor(m, &at, LNAME("post_attention_layernorm.weight"), 1, C, 1, C, 0, 0, 1);
            o->w13 = at;    /* gate and up rows of this tp rank, adjacent */
            add_tensor(m, &at, LNAME("mlp.gate_proj.weight"), m->F, C, c->ffn_dim, C, r * m->F, 0, 0);
            add_tensor(m, &at, LNAME("mlp.up_proj.weight"), m->F, C, c->ffn_dim, C, r * m->F, 0, 0);
            o->w2 = at;
            add_tensor(m, &at, LNAME("mlp.down_proj.weight"), C, m->F, C, c->ffn_dim, 0, r * m->F, 0);
            m->tensors[m->n_tensors - 1].split_cols = 1;
#undef LNAME
            add_unit(m, start, at, k, p->chunks[k].n_layers - 1 - j);
        }
    }
    if (p->has_head) {
        size_t start = at;
        m->off_final_norm = at;
        add_tensor(m, &at, "model.norm.weight", 1, C, 1, C, 0, 0, 1);
        if (c->tie_embeddings) {
            if (!p->has_embedding)
                die("tie_embeddings=1 shares the embedding with the LM head, but this pipeline puts them on different stages\n"
                    "  hint: use --tie_embeddings=0 with pp > 1, or pp=1");
            m->off_lm_head = m->off_embedding;
        } else {
            m->off_lm_head = at;
            add_vocab_tensor(m, &at, "lm_head.weight");
        }
        add_unit(m, start, at, p->n_chunks - 1, -1);
    }
    m->n_params = at;
}

/* Carve the activation views out of one allocation (or measure it when base
 * is NULL). Each slot keeps, per layer of a chunk, what the backward reads;
 * what the recompute mode recomputes lives once, in m->shared: full keeps only
 * each block's input (res), selective also keeps the matmul outputs (qkv,
 * h13), the attention statistics (lse) and res_mid, and recomputes the norms,
 * the attention output and the SwiGLU activation.
 *
 * Buffers whose lives never overlap share memory; each case rests on what
 * model/llama.c reads and writes when:
 *  - the recompute buffers (m->shared) hold only what one call on one block
 *    writes and then reads: block_forward's temporaries, or what
 *    recompute_block brings back for the block_backward that called it.
 *  - the head buffers (lnf, logits, ce_stats and, with per-layer weights, the
 *    embedding's and head's places) are written and read only inside one call
 *    of embed, head_forward or model_logits' / model_decode's head, and none
 *    of those runs a block: they lie over the recompute buffers. lnf is one
 *    buffer for every slot for the same reason.
 *  - precision=fp8's scratch (the FP8 copies of one block matmul's operands)
 *    is written and read only inside one call on one block (a matmul, or a
 *    producer and the matmul after it in the same block_backward), so it lies
 *    after the recompute buffers, which such a call also uses, and under the
 *    head buffers: without recompute at l124m's widths the logits' chunk
 *    covers it, and fp8 takes bf16's activation memory plus the amax record;
 *    with recompute the recompute buffers already reach past the head's.
 *  - ln1 and ln2 (recompute on): the forward reads ln1 only in the qkv matmul,
 *    before ln2 is written; the backward reads ln2 (w13's gradient) before it
 *    needs ln1, which block_backward then brings back into the same buffer.
 *  - scratch2, dqkv (recompute on), lies in hs: block_backward reads hs last
 *    in w2's gradient, then writes dqkv in the attention backward and reads it
 *    last in wqkv's gradient; the next write of hs is the next block's call.
 *  - the attention backward's scratch (kernels/attention.h: the Hopper kernels'
 *    dS tiles) is the block's h13: block_backward reads h13 last in w13's
 *    gradient, before the attention backward; the next write of h13 is the
 *    next forward (or recompute) of that block. The CPU backends fill the lent
 *    scratch with NaN, so a change that breaks this fails the CPU tests.
 *  - tmp is scratch1: the forward's tmp is dead whenever the backward's
 *    scratch1 is live, and vice versa. */
/* split_backward: store K of what W reads (llama.h WKeep): a copy of each tensor the slot does not keep unchanged
 * until W. Without recompute the slot keeps every input and rstd (the backward writes none of them, and the slot's
 * next forward comes after W), except the norm outputs with sequence parallelism, which W needs gathered. Recompute
 * brings its activations back into the shared buffers, which the next layer's recompute overwrites: those are
 * copied (full recompute: res_mid too). The output gradients are always copies (B's scratch and dres move on; h13,
 * holding dh13, is the attention backward's work space). */
static void layout_keep(Model *m, WKeep *K, char *base, size_t *cursor) {
    size_t N = (size_t)m->B * m->T, Ns = m->sp ? N / m->part.tp : N, a = act_size(m), at = *cursor, C = m->C, F = m->F;
    int own = m->recompute == RECOMPUTE_NONE, full = m->recompute == RECOMPUTE_FULL;
#define TAKE(bytes) (at += ((bytes) + 255) & ~(size_t)255, base ? (void *)(base + at - (((bytes) + 255) & ~(size_t)255)) : NULL)
    memset(K, 0, sizeof *K);
    if (!own || m->sp) K->x[FP8_QKV] = TAKE(N * C * a);
    if (!own) K->x[FP8_O] = TAKE(N * m->NH * m->HD * a);
    if (!own || m->sp) K->x[FP8_W13] = TAKE(N * C * a);
    if (!own) K->x[FP8_W2] = TAKE(N * F * a);
    K->dy[FP8_QKV] = TAKE(N * m->QKV * a);
    K->dy[FP8_O] = TAKE(N * C * a);
    K->dy[FP8_W13] = TAKE(N * 2 * F * a);
    K->dy[FP8_W2] = TAKE(N * C * a);
    if (full) K->norm_in[1] = TAKE(Ns * C * a);   /* norm_in[0], the block's input res[j], is always the slot's */
    if (!own) for (int k = 0; k < 2; k++) K->rstd[k] = TAKE(Ns * sizeof(float));
    for (int k = 0; k < 2; k++) K->dnorm[k] = TAKE(Ns * C * a);
#undef TAKE
    *cursor = at;
}

static size_t layout_activations(Model *m, char *base, size_t *head_past) {
    size_t B = m->B, T = m->T, N = B * T, a = act_size(m), at = 0;
    size_t Ns = m->sp ? N / m->part.tp : N;   /* the stream tokens: sequence parallelism keeps N/tp */
    /* backward scratch: s1 holds dlnf, dhs, datt and dln (widths C, F, NH*HD, C), s2 holds dqkv */
    size_t S1 = (size_t)m->C;
    if ((size_t)m->F > S1) S1 = m->F;
    if ((size_t)m->NH * m->HD > S1) S1 = (size_t)m->NH * m->HD;
#define TAKE(bytes) (at += ((bytes) + 255) & ~(size_t)255, base ? (void *)(base + at - (((bytes) + 255) & ~(size_t)255)) : NULL)
    int sel = m->recompute == RECOMPUTE_SELECTIVE, full = m->recompute == RECOMPUTE_FULL, head = m->part.has_head;
    LayerActs *sh = &m->shared;
    memset(sh, 0, sizeof *sh);
    size_t region = at;   /* the recompute buffers, then the head buffers over them */
    if (sel || full) {
        sh->ln1 = sh->ln2 = TAKE(Ns * m->C * a);
        sh->ln1_rstd = TAKE(Ns * 4);
        sh->att = TAKE(N * m->NH * m->HD * a);
        sh->ln2_rstd = TAKE(Ns * 4);
        sh->hs = TAKE(N * m->F * a);
    }
    if (full) {
        sh->qkv = TAKE(N * m->QKV * a);
        sh->lse = TAKE(B * m->NH * T * 4);
        sh->res_mid = TAKE(Ns * m->C * a);
        sh->h13 = TAKE(N * 2 * m->F * a);
    }
    if (m->part.fp8) {   /* the FP8 copies of the widest block matmul's operands: after the recompute buffers, under the head's */
        size_t widest = 0;
        const int ic[FP8_MATMULS] = {m->C, m->NH * m->HD, m->C, m->F}, oc[FP8_MATMULS] = {m->QKV, m->C, 2 * m->F, m->C};
        for (int k = 0; k < FP8_MATMULS; k++) {
            size_t b = matmul_fp8_scratch_bytes(m->be->fp8_bytes, (int)N, ic[k], oc[k]);
            if (b > widest) widest = b;
        }
        m->fp8.scratch = TAKE(widest);
    }
    size_t region_end = at;
    at = region;
    void *lnf = head ? TAKE(Ns * m->C * a) : NULL;
    m->logits = head ? TAKE((size_t)m->head_chunk * m->V * a) : NULL;
    m->ce_stats = head ? TAKE((size_t)m->part.tp * 3 * m->head_chunk * 4) : NULL;
    if (m->part.weights_per_layer && (sel || full)) m->vocab_weights = TAKE(m->vocab_weights_bytes);
    if (head_past) *head_past = at > region_end ? at - region_end : 0;
    if (at < region_end) at = region_end;
    for (int s = 0; s < m->part.n_slots; s++) {
        ActSlot *S = &m->slots[s];
        for (int j = 0; j <= m->chunk_layers; j++) S->res[j] = TAKE(Ns * m->C * a);
        for (int j = 0; j < m->chunk_layers; j++) {
            LayerActs *L = &S->acts[j];
            L->ln1 = sel || full ? sh->ln1 : TAKE(Ns * m->C * a);
            L->ln1_rstd = sel || full ? sh->ln1_rstd : TAKE(Ns * 4);
            L->qkv = full ? sh->qkv : TAKE(N * m->QKV * a);
            L->att = sel || full ? sh->att : TAKE(N * m->NH * m->HD * a);
            L->lse = full ? sh->lse : TAKE(B * m->NH * T * 4);
            L->res_mid = full ? sh->res_mid : TAKE(Ns * m->C * a);
            L->ln2 = sel || full ? sh->ln2 : TAKE(Ns * m->C * a);
            L->ln2_rstd = sel || full ? sh->ln2_rstd : TAKE(Ns * 4);
            L->h13 = full ? sh->h13 : TAKE(N * 2 * m->F * a);
            L->hs = sel || full ? sh->hs : TAKE(N * m->F * a);
        }
        if (head) {
            S->lnf = lnf;
            S->lnf_rstd = TAKE(Ns * 4);
            S->losses = TAKE(N * 4);
            S->targets = TAKE(N * 4);
        }
        if (m->part.has_embedding) S->ids = TAKE(N * 4);
        S->dres = TAKE(Ns * m->C * a);
    }
    for (int k = 0; m->part.split_backward && k < m->part.n_keeps * m->chunk_layers; k++) layout_keep(m, &m->keeps[k], base, &at);
    m->scratch1 = TAKE(N * S1 * a);
    m->tmp = m->scratch1;
    m->scratch2 = (sel || full) && m->QKV <= m->F ? sh->hs : TAKE(N * m->QKV * a);
    m->gathered = m->sp ? TAKE(N * m->C * a) : NULL;
    if (m->cp > 1) {   /* context parallel: whole-sequence K/V, one layer at a time (model/context.c) */
        m->cp_kv = TAKE(context_buffer_bytes(m, (int)B, (int)T, 0));
        m->cp_kv_of = NULL;   /* it holds nobody's K/V yet */
        m->cp_ranks = TAKE(context_buffer_bytes(m, (int)B, (int)T, 1));
        m->cp_dkv = TAKE(context_buffer_bytes(m, (int)B, (int)T, 2));
    }
    m->norm_dw_discard = m->part.split_backward ? TAKE((size_t)m->C * sizeof(float)) : NULL;
    if (m->part.fp8) m->fp8.amax = TAKE((size_t)m->n_local_layers * FP8_MATMULS * FP8_ROLES * 4);   /* the record: lives a step */
#undef TAKE
    return at;
}

/* ------------------------------------------------ per-layer compute weights */

#define PLACE_ALIGN 256   /* bytes: cuBLASLt picks a matmul's algorithm by its pointers' alignment up to 256 (kernels/cuda/matmul.cu) */

static size_t place_align(size_t bytes) { return (bytes + PLACE_ALIGN - 1) / PLACE_ALIGN * PLACE_ALIGN; }
/* A unit's cast starts this far into its place: its own byte offset in a whole compute copy, modulo 256, so
 * every tensor keeps the alignment it has there and the kernels and matmul algorithms of compute_weights=keep run. */
static size_t unit_skew(const Model *m, int u) { return m->units[u].offset * act_size(m) % PLACE_ALIGN; }
static size_t unit_span(const Model *m, int u) { return unit_skew(m, u) + m->units[u].count * act_size(m); }
static int is_embedding_unit(const Model *m, int u) { return m->part.has_embedding && u == 0; }
static int is_head_unit(const Model *m, int u) { return m->part.has_head && u == m->n_units - 1; }

/* What the compute-dtype weights take: a whole copy (keep; none in fp32, where the master is read), or the places
 * per-layer casts go to: one for every layer, sized for the largest, and one for the embedding and the head. */
static void plan_weights(Model *m) {
    if (m->be->act == DTYPE_FP32) m->part.weights_per_layer = 0;   /* nothing to cast: the master is the compute copy */
    if (m->part.weights_per_layer && m->part.master_in_shard)
        die("internal: per-layer compute weights are cast from a whole fp32 master, and ZeRO-1 holds it in shards");
    if (m->part.weights_elsewhere) m->part.weights_per_layer = 0;   /* zero=3: the gathered places are parallel/ddp.c's */
    if (!m->part.weights_per_layer) {
        m->weight_bytes = m->be->act == DTYPE_FP32 || m->part.weights_elsewhere ? 0 : m->n_params * act_size(m);
        return;
    }
    size_t emb = 0, head = 0;
    for (int u = 0; u < m->n_units; u++) {
        size_t span = place_align(unit_span(m, u));
        if (is_embedding_unit(m, u)) emb = span;
        else if (is_head_unit(m, u)) head = span;
        else if (span > m->layer_weights_bytes) m->layer_weights_bytes = span;
    }
    m->vocab_weights_bytes = m->cfg.tie_embeddings ? emb + head : emb > head ? emb : head;
    m->weight_bytes = m->layer_weights_bytes + (m->recompute == RECOMPUTE_NONE ? m->vocab_weights_bytes : 0);
}

void *model_unit_place(const Model *m, int u) {
    char *place = m->layer_weights;
    if (is_embedding_unit(m, u)) place = m->vocab_weights;
    else if (is_head_unit(m, u))   /* tied: after the embedding's place, since the head reads both */
        place = (char *)m->vocab_weights + (m->cfg.tie_embeddings ? place_align(unit_span(m, 0)) : 0);
    return place + unit_skew(m, u);
}

void model_master_changed(Model *m) { m->layer_weights_unit = -1; }

/* The LM head's chunk of tokens: the largest power of two whose logits stay
 * under HEAD_CHUNK_ELEMENTS (4,096 at V = 32,000: the loss kernel runs twice
 * the rows a wave and the head's weight gradient is reread half as often as at
 * 2,048, +2.5% on the l124m step, docs/performance.md 2026-12-06). Recompute
 * is chosen to save memory, so there the chunk halves, down to half that
 * size, while the head's buffers would reach past the recompute buffers they
 * lie over: the larger chunk is taken only where it costs no memory. */
static void plan_head_chunk(Model *m, int tokens) {
    int fit = (int)(HEAD_CHUNK_ELEMENTS / (m->V > 0 ? m->V : 1));
    for (m->head_chunk = 1; 2 * m->head_chunk <= fit; m->head_chunk *= 2) {}   /* a power of two: equal chunks */
    int floor = m->head_chunk / 2 > 0 ? m->head_chunk / 2 : 1;
    if (floor > tokens) floor = tokens;
    if (m->head_chunk > tokens) m->head_chunk = tokens;
    size_t past = 0;
    while (m->recompute != RECOMPUTE_NONE && m->head_chunk > floor) {
        layout_activations(m, NULL, &past);
        if (past == 0) break;
        m->head_chunk /= 2;
    }
}

/* precision=fp8: every layer's scales, none yet, and which global layer each local one is */
static void plan_fp8(Model *m) {
    if (m->be->act != DTYPE_BF16) die("internal: precision=fp8 runs with bf16 activations, not %s", dtype_name(m->be->act));
    Fp8State *s = &m->fp8;
    size_t n = (size_t)m->cfg.n_layers * FP8_MATMULS * FP8_ROLES;
    s->history = callocCheck((size_t)FP8_HISTORY * n, sizeof(float));
    s->scale = callocCheck(n, sizeof(float));
    s->global_layer = callocCheck(m->n_local_layers ? m->n_local_layers : 1, sizeof(int));
    const char *fused = getenv("LLM3D_FP8_FUSED");
    s->producers = m->be->rmsnorm_forward_fp8 && m->be->swiglu_forward_fp8 && m->be->swiglu_backward_fp8 &&
                   !(fused && strcmp(fused, "off") == 0);
    for (int k = 0; k < m->part.n_chunks; k++)
        for (int j = 0; j < m->part.chunks[k].n_layers; j++) s->global_layer[m->chunk_first[k] + j] = m->part.chunks[k].first_layer + j;
}

void model_plan(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, const ModelPart *part, int B, int T,
                int recompute) {
    memset(m, 0, sizeof *m);
    m->part = part ? *part : model_part_whole(cfg);
    const ModelPart *p = &m->part;
    m->recompute = recompute;
    m->cfg = *cfg;
    m->be = be;
    m->comm = comm ? comm : comm_one();   /* a model alone needs no grid of its own */
    int tp = p->tp;
    char err[512];
    if (model_check_tp(cfg, tp, err, sizeof err) != 0) die("%s", err);
    if (p->tp_rank < 0 || p->tp_rank >= tp) die("internal: tp rank %d of %d", p->tp_rank, tp);
    if (p->n_chunks < 1 || p->n_chunks > MODEL_MAX_CHUNKS) die("internal: a model part of %d chunks", p->n_chunks);
    if (p->n_slots < 1) die("internal: a model part with %d activation slots", p->n_slots);
    if (p->split_backward && p->fp8) die("internal: precision=fp8 with a backward split into B and W");
    m->C = cfg->dim;
    m->HD = cfg->dim / cfg->n_heads;
    m->NH = cfg->n_heads / tp;
    m->NKV = cfg->n_kv_heads / tp;
    m->F = cfg->ffn_dim / tp;
    m->QKV = (m->NH + 2 * m->NKV) * m->HD;
    m->V = (cfg->vocab_size + tp - 1) / tp;   /* vocab-parallel: equal blocks, the last one padded */
    m->v0 = p->tp_rank * m->V;
    m->v_valid = cfg->vocab_size - m->v0 < 0 ? 0 : cfg->vocab_size - m->v0 < m->V ? cfg->vocab_size - m->v0 : m->V;
    m->sp = p->sequence_parallel && tp > 1;
    m->cp = p->cp > 1 ? p->cp : 1;
    m->cp_rank = m->cp > 1 ? p->cp_rank : 0;
    if (m->cp > 1 && T % 2) die("internal: context parallel needs an even number of tokens a sequence here, not %d", T);
    m->chunk_first = callocCheck((size_t)p->n_chunks + 1, sizeof(int));
    for (int k = 0; k < p->n_chunks; k++) {
        if (p->chunks[k].n_layers < 0) die("internal: a chunk of %d layers", p->chunks[k].n_layers);
        m->chunk_first[k + 1] = m->chunk_first[k] + p->chunks[k].n_layers;
        if (p->chunks[k].n_layers > m->chunk_layers) m->chunk_layers = p->chunks[k].n_layers;
    }
    m->n_local_layers = m->chunk_first[p->n_chunks];
    build_layout(m);
    m->B = B; m->T = T;
    m->slots = callocCheck(p->n_slots, sizeof(ActSlot));
    for (int s = 0; s < p->n_slots; s++) {
        m->slots[s].res = callocCheck((size_t)m->chunk_layers + 1, sizeof(void *));
        m->slots[s].acts = callocCheck(m->chunk_layers ? m->chunk_layers : 1, sizeof(LayerActs));
    }
    if (p->split_backward) m->keeps = callocCheck((size_t)(p->n_keeps > 0 ? p->n_keeps : 1) * (m->chunk_layers ? m->chunk_layers : 1), sizeof(WKeep));
    m->slot_B = callocCheck(p->n_slots, sizeof(int));
    m->slot_T = callocCheck(p->n_slots, sizeof(int));
    plan_weights(m);
    if (p->fp8) plan_fp8(m);
    plan_head_chunk(m, B * T);   /* the LM head runs over chunks of tokens so the (B*T, V) logits never exist at once */
    m->act_bytes = layout_activations(m, NULL, NULL);
}

/* grad_fresh's entries: a layer's GRAD_PER_LAYER, then the final norm's and the LM head's */
static size_t grad_fresh_count(const Model *m) { return (size_t)m->n_local_layers * GRAD_PER_LAYER + 2; }

void model_create(Model *m, const ModelConfig *cfg, const Backend *be, const Comm *comm, const ModelPart *part, int B, int T,
                  int recompute) {
    model_plan(m, cfg, be, comm, part, B, T, recompute);
    size_t P = m->n_params;
    if (m->part.master_in_shard && be->act == DTYPE_FP32) die("internal: the master weights are the compute weights in fp32");
    int no_master = m->part.master_in_shard || m->part.weights_elsewhere;
    m->params = no_master ? NULL : be->alloc(P * sizeof(float), "fp32 master weights");
    if (m->part.weights_elsewhere) {}   /* zero=3: each unit's weights are gathered where weights_at says */
    else if (be->act == DTYPE_FP32) m->params_compute = m->params;
    else if (!m->part.weights_per_layer) m->params_compute = be->alloc(P * act_size(m), "compute-dtype weights");
    else if (m->weight_bytes) {   /* the places; the embedding's and head's lie in act_memory with recompute */
        m->weight_buffer = be->alloc(m->weight_bytes, "per-layer compute-dtype weights");
        m->layer_weights = m->weight_buffer;
        if (m->recompute == RECOMPUTE_NONE) m->vocab_weights = (char *)m->weight_buffer + m->layer_weights_bytes;
    }
    m->layer_weights_unit = -1;
    m->grads = m->part.grads_elsewhere ? NULL : be->alloc(P * sizeof(float), "gradients");
    if (m->grads) m->grad_fresh = callocCheck(grad_fresh_count(m), 1);
    const char *poison = getenv("LLM3D_POISON_GRADS");
    m->poison_grads = m->grads && poison && !strcmp(poison, "1");   /* zero=2/3: the schedule opens the places, with zeros */
    m->act_memory = be->alloc(m->act_bytes, "activations");
    layout_activations(m, m->act_memory, NULL);
}

void model_plan_free(Model *m) {
    for (int s = 0; m->slots && s < m->part.n_slots; s++) { free(m->slots[s].res); free(m->slots[s].acts); }
    free(m->keeps);
    free(m->slots); free(m->slot_B); free(m->slot_T);
    free(m->tensors); free(m->layer); free(m->units); free(m->chunk_first); free(m->grads_at); free(m->weights_at);
    free(m->fp8.history); free(m->fp8.scale); free(m->fp8.global_layer);
    memset(m, 0, sizeof *m);
}

void model_free(Model *m) {
    const Backend *be = m->be;
    if (m->params_compute && m->params_compute != (void *)m->params) be->free(m->params_compute);
    if (m->weight_buffer) be->free(m->weight_buffer);
    if (m->params) be->free(m->params);
    if (m->grads) be->free(m->grads);
    free(m->grad_fresh);
    be->free(m->act_memory);
    for (int i = 0; m->kcache && i < m->n_local_layers; i++) { be->free(m->kcache[i]); be->free(m->vcache[i]); }
    free(m->kcache); free(m->vcache); free(m->host_logits); free(m->host_row);
    for (int k = 0; k < m->n_loss_regions; k++) be->free_host(m->loss_regions[k]);
    model_plan_free(m);
}

const ParamTensor *model_find_tensor(const Model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

void *model_chunk_input(Model *m, int chunk, int slot) { (void)chunk; return m->slots[slot].res[0]; }
void *model_chunk_output(Model *m, int chunk, int slot) { return m->slots[slot].res[m->part.chunks[chunk].n_layers]; }
size_t model_boundary_elements(const Model *m, int B, int T) { return (size_t)B * T / (m->sp ? m->part.tp : 1) * m->C; }
size_t model_attention_work_bytes(const Model *m, int B, int T) { return (size_t)B * T * 2 * m->F * act_size(m); }
int model_backward_steps(const Model *m, int chunk) {
    return m->part.chunks[chunk].n_layers + (chunk == 0 && m->part.has_embedding);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void model_init_values(const Model *m, uint64_t seed, float init_std, float *host) {
    float out_std = init_std / sqrtf(2.0f * m->cfg.n_layers);
    memset(host, 0, m->n_params * sizeof(float));   /* the vocabulary padding, in no tensor, is 0 */
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
}

void model_init_weights(Model *m, uint64_t seed, float init_std) {
    float *host = mallocCheck(m->n_params * sizeof(float));
    model_init_values(m, seed, init_std, host);
    model_set_params(m, host);
    free(host);
}

void model_set_params(Model *m, const float *host) {
    model_master_changed(m);
    if (!m->params && !m->params_compute) return;   /* zero=3: nothing whole here; the shards take the values (parallel/ddp.h) */
    if (!m->params && !m->grads) {   /* zero=2 in bf16/fp16: only the compute copy, cast on the host */
        DType dt = backend_storage(m->be);
        void *cast = mallocCheck(m->n_params * dtype_size(dt) + 1);
        for (size_t i = 0; i < m->n_params; i++) {   /* rounded as cast_from_fp32 rounds (also where act is emulated in fp32) */
            float one[1];
            dtype_from_float(one, m->be->act, 0, host[i]);
            dtype_from_float(cast, dt, i, dtype_to_float(one, m->be->act, 0));
        }
        m->be->upload(m->params_compute, cast, m->n_params * dtype_size(dt));
        free(cast);
        return;
    }
    float *master = m->params ? m->params : m->grads;   /* no master here: the values pass through the gradient buffer */
    m->be->upload(master, host, m->n_params * sizeof(float));
    if (m->params_compute && m->params_compute != (void *)master) m->be->cast_from_fp32(m->params_compute, master, m->n_params);
}

void model_get_params(const Model *m, float *host) {
    if (!m->params) die("internal: this rank's fp32 master weights live in its ZeRO-1 shard, not in the model");
    m->be->download(host, m->params, m->n_params * sizeof(float));
}
void model_get_grads(const Model *m, float *host) {
    if (!m->grads) die("internal: this rank's gradients live in its ZeRO-2/3 shard, not in the model");
    m->be->download(host, m->grads, m->n_params * sizeof(float));
}
/* Only the embedding's gradient is zeroed: its backward adds each token's row into it. Every other gradient is
 * written whole by its first backward of the step (grad_fresh), so no pass over n_params zeroes it first. The test
 * knob LLM3D_POISON_GRADS=1 fills those with NaN instead, so a gradient the step forgets to write shows in the norm. */
void model_zero_grads(Model *m) {
    if (!m->grads) return;   /* zero=2/3: the schedule opens each unit's place itself */
    memset(m->grad_fresh, 1, grad_fresh_count(m));
    size_t emb = m->part.has_embedding ? (size_t)m->V * m->C : 0;   /* at offset 0, vocabulary padding included */
    if (emb) m->be->zero(m->grads, emb * sizeof(float));
    if (m->poison_grads && m->n_params > emb) {
        size_t n = m->n_params - emb;
        float *nan = mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) nan[i] = NAN;
        m->be->upload(m->grads + emb, nan, n * sizeof(float));
        free(nan);
    }
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

/* Common divisors of the three sizes tp splits, as "1, 2, 4". */
static void valid_tp_values(const ModelConfig *c, char *out, size_t size) {
    int o = 0;
    out[0] = 0;
    for (int t = 1; t <= c->n_kv_heads && o < (int)size; t++)
        if (c->n_heads % t == 0 && c->n_kv_heads % t == 0 && c->ffn_dim % t == 0) o += snprintf(out + o, size - o, o ? ", %d" : "%d", t);
}

int model_check_tp(const ModelConfig *c, int tp, char *err, size_t size) {
    const char *what[3] = {"n_heads", "n_kv_heads", "ffn_dim"};
    const char *why[3] = {"whole query heads", "whole KV heads (and the query heads that read them)", "ffn_dim/tp FFN columns"};
    int value[3] = {c->n_heads, c->n_kv_heads, c->ffn_dim}, bad[3], n_bad = 0;
    for (int k = 0; k < 3; k++)
        if (value[k] % tp) bad[n_bad++] = k;
    if (!n_bad) return 0;
    char names[128] = "", reasons[256] = "", valid[256];
    int on = 0, orr = 0;
    for (int i = 0; i < n_bad; i++) {
        const char *sep = i == 0 ? "" : i == n_bad - 1 ? " and " : ", ";
        on += snprintf(names + on, sizeof names - on, "%s%s=%d", sep, what[bad[i]], value[bad[i]]);
        orr += snprintf(reasons + orr, sizeof reasons - orr, "%s%s", sep, why[bad[i]]);
    }
    valid_tp_values(c, valid, sizeof valid);
    snprintf(err, size, "tp=%d must divide %s: each tensor-parallel rank holds %s\n"
             "  hint: the tp values this model takes are %s (the common divisors of n_heads=%d, n_kv_heads=%d and ffn_dim=%d)",
             tp, names, reasons, valid, c->n_heads, c->n_kv_heads, c->ffn_dim);
    return -1;
}
