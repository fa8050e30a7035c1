/* train/optimizer.c — AdamW slices (fp32 or 8-bit state), global-norm
 * clipping, the fused update, and the fp32 form of the moments for checkpoints. */
#include "optimizer.h"
#include "../common/util.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_ALIGN 256   /* bytes; every view of the 8-bit state buffer starts on this */
#define CODE_ALIGN 16    /* codes; every 8-bit slice's codes start on this, for the CUDA kernel's packed loads */

static size_t align_up(size_t x) { return (x + VIEW_ALIGN - 1) / VIEW_ALIGN * VIEW_ALIGN; }

/* The views of the one 8-bit state buffer at base, in this order:
 * m32, v32 (S fp32) | m_absmax, v_absmax (NB fp32) | m_code, v_code (Q uint8).
 * Returns the buffer's size in bytes. */
static size_t q8_layout(char *base, size_t Q, size_t NB, size_t S, AdamW8bitState *st) {
    size_t off[6], n = 0, sizes[6] = {S * sizeof(float), S * sizeof(float), NB * sizeof(float), NB * sizeof(float), Q, Q};
    for (int k = 0; k < 6; k++) { off[k] = n; n = align_up(n + sizes[k]); }
    if (base && st) {
        st->m32 = (float *)(base + off[0]);
        st->v32 = (float *)(base + off[1]);
        st->m_absmax = (float *)(base + off[2]);
        st->v_absmax = (float *)(base + off[3]);
        st->m_code = (uint8_t *)(base + off[4]);
        st->v_code = (uint8_t *)(base + off[5]);
    }
    return n;
}

/* The 8-bit rule, one for every layout. Which tensors: those whose WHOLE tensor has at least
 * adamw8bit_min_numel elements (a tp slice may be smaller; it is quantized all the same). Which
 * blocks: each row of the whole tensor is cut into segments no tensor-parallel layout splits, and
 * each segment into blocks of 256 from its start (the last one shorter). tp gives a rank whole rows
 * of q/k/v, gate/up, the embedding and the head, so their segment is the whole row; o_proj and
 * down_proj it splits by columns, at multiples of global_cols / tp, and every valid tp divides
 * g = gcd(n_heads, n_kv_heads, ffn_dim) (model_check_tp), so their segment is global_cols / g, the
 * finest slice any tp could cut (l124m: g = 4, o_proj rows in 4 segments of 192, down_proj in 4 of
 * 512). A block thus lies inside one rank's slice at every tp, holds the same elements and so gets
 * the same absmax as on one rank; dp and pp hold whole tensors; ZeRO-1 cuts only at block starts
 * (optimizer_cut). Blocks within rows rather than across them cost absmax values only where a
 * segment is not a multiple of 256. The alternatives: a block size dividing every slice (64 or less
 * for most models: 4x the absmax), or one absmax shared over the tp group (a collective inside the
 * update). Returns the segment length, or 0: fp32 moments. */
size_t optimizer_q8_row(const Model *m, const Config *c, const ParamTensor *t) {
    size_t whole = (size_t)t->global_rows * t->global_cols;
    if (c->optimizer != OPTIMIZER_ADAMW8BIT || whole < (size_t)c->adamw8bit_min_numel) return 0;
    if (!t->split_cols) return (size_t)t->global_cols;
    int g = m->cfg.n_heads;
    for (int b = m->cfg.n_kv_heads; b;) { int r = g % b; g = b; b = r; }
    for (int b = m->cfg.ffn_dim; b;) { int r = g % b; g = b; b = r; }
    return (size_t)t->global_cols / g;
}

/* The unsharded layout: runs of adjacent tensors with the same weight decay
 * and, for adamw8bit, the same row segment (0: fp32 state), in the model's buffer. */
typedef struct { size_t offset, count; float weight_decay; size_t row; } Run;

static int build_runs(const Model *m, const Config *c, Run *runs) {
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        float wd = t->is_norm ? 0.0f : c->weight_decay;
        size_t count = (size_t)t->rows * t->cols, row = optimizer_q8_row(m, c, t);
        if (!count) continue;
        Run *last = n ? &runs[n - 1] : NULL;
        if (last && last->weight_decay == wd && last->row == row && last->offset + last->count == t->offset)
            last->count += count;
        else
            runs[n++] = (Run){t->offset, count, wd, row};
    }
    return n;
}

/* The start of the 8-bit block holding element o of a quantized run (rows of r->row elements). */
static size_t block_start(const Run *r, size_t o) {
    size_t j = o - r->offset;
    return r->offset + j / r->row * r->row + j % r->row / ADAMW8BIT_BLOCK * ADAMW8BIT_BLOCK;
}

size_t optimizer_cut(const Model *m, const Config *c, size_t offset) {
    Run *runs = callocCheck(m->n_tensors + 1, sizeof(Run));
    int n = build_runs(m, c, runs);
    size_t cut = offset;
    for (int r = 0; r < n; r++)
        if (runs[r].row && runs[r].offset <= offset && offset < runs[r].offset + runs[r].count) cut = block_start(&runs[r], offset);
    free(runs);
    return cut;
}

size_t optimizer_cut_rule(const void *ctx, size_t offset) {
    const OptimizerCut *k = ctx;
    return optimizer_cut(k->m, k->c, offset);
}

OptimizerView optimizer_zero_view(const Ddp *d, OptPiece **pieces) {
    int me = comm_group_rank(d->comm, comm_replica_group(d->comm)), n = 0;
    *pieces = callocCheck(d->n_buckets + 1, sizeof(OptPiece));
    for (int b = d->n_buckets - 1; b >= 0; b--) {   /* buffer order */
        const Bucket *k = &d->buckets[b];
        if (k->counts[me]) (*pieces)[n++] = (OptPiece){k->piece_offset, k->counts[me], k->shard_at};
    }
    return (OptimizerView){d->master_shard, d->grad_shard, d->compute_shard, d->shard_n, *pieces, n, 1};
}

/* One 8-bit slice of run elements [lo, hi) at view element at, rows of `row` from lo; its codes and absmax
 * appended to the state (codes from a multiple of CODE_ALIGN). */
static void add_slice8(Optimizer *o, size_t at, size_t count, size_t row, float wd) {
    AdamW8bitSlice *sl = &o->slices8[o->n_slices8++];
    *sl = (AdamW8bitSlice){at, count, 0, 0, row, wd, row > 0};
    if (!row) { sl->row = count; sl->state = o->n_fp32; o->n_fp32 += count; return; }
    sl->state = (o->n_quantized + CODE_ALIGN - 1) / CODE_ALIGN * CODE_ALIGN;
    sl->block = o->n_blocks;
    o->n_quantized = sl->state + count;
    o->n_blocks += adamw8bit_slice_blocks(sl);
}

/* The view's slices: each run cut to each piece, in view elements. Pieces start at cuts optimizer_cut
 * allows, so an 8-bit slice starts on a block of the global rule; one that starts inside a row gets the
 * rest of that row as a slice of its own (rows of its length), so the kernel cuts the same blocks. */
static void build_slices(Optimizer *o, const Model *m, const Config *c) {
    Run *runs = callocCheck(m->n_tensors + 1, sizeof(Run));
    int n_runs = build_runs(m, c, runs);
    const OptimizerView *v = &o->view;
    int cap = 2 * (n_runs + v->n_pieces) + m->n_tensors + 1;
    o->slices = callocCheck(cap, sizeof(AdamWSlice));
    o->slices8 = callocCheck(cap, sizeof(AdamW8bitSlice));
    o->replicated = callocCheck(cap, sizeof(OptPiece));
    for (int p = 0; p < v->n_pieces; p++) {
        const OptPiece *pc = &v->pieces[p];
        for (int r = 0; r < n_runs; r++) {
            const Run *run = &runs[r];
            size_t lo = run->offset > pc->offset ? run->offset : pc->offset;
            size_t hi = run->offset + run->count < pc->offset + pc->count ? run->offset + run->count : pc->offset + pc->count;
            if (lo >= hi) continue;
            size_t at = pc->at + (lo - pc->offset), count = hi - lo;
            AdamWSlice *last = o->n_slices ? &o->slices[o->n_slices - 1] : NULL;
            if (last && last->weight_decay == run->weight_decay && last->offset + last->count == at) last->count += count;
            else o->slices[o->n_slices++] = (AdamWSlice){at, count, run->weight_decay};
            if (run->row && block_start(run, lo) != lo) die("internal: a ZeRO-1 piece cuts an 8-bit AdamW block at element %zu", lo);
            size_t into = run->row ? (lo - run->offset) % run->row : 0;
            if (into) {   /* the rest of a row */
                size_t head = run->row - into < count ? run->row - into : count;
                add_slice8(o, at, head, head, run->weight_decay);
                at += head; count -= head;
            }
            if (count) add_slice8(o, at, count, run->row, run->weight_decay);
        }
        /* tensors every tensor-parallel rank holds whole (norms; an embedding not split over the vocabulary) */
        for (int i = 0; m->part.tp > 1 && i < m->n_tensors; i++) {
            const ParamTensor *t = &m->tensors[i];
            size_t lo = t->offset > pc->offset ? t->offset : pc->offset, end = t->offset + (size_t)t->rows * t->cols;
            size_t hi = end < pc->offset + pc->count ? end : pc->offset + pc->count;
            int whole = t->rows == t->global_rows && t->cols == t->global_cols;
            if (whole && lo < hi) o->replicated[o->n_replicated++] = (OptPiece){lo, hi - lo, pc->at + (lo - pc->offset)};
        }
    }
    for (int i = 0; i < m->n_tensors; i++) o->n_q8_tensors += optimizer_q8_row(m, c, &m->tensors[i]) > 0;
    for (int r = 0; m->sp && r < o->n_replicated; r++) o->n_tp_pack += o->replicated[r].count;
    free(runs);
}

static void layout(Optimizer *o, const Model *m, const Config *c, const OptimizerView *view) {
    memset(o, 0, sizeof *o);
    o->kind = c->optimizer;
    OptPiece whole = {0, m->n_params, 0};
    if (view) o->view = *view;
    else {
        o->view = (OptimizerView){m->params, m->grads, m->params_compute == (void *)m->params ? NULL : m->params_compute,
                                  m->n_params, &whole, 1, 0};
    }
    OptPiece *pieces = mallocCheck((o->view.n_pieces + 1) * sizeof(OptPiece));   /* the optimizer keeps its own copy */
    memcpy(pieces, o->view.pieces, o->view.n_pieces * sizeof(OptPiece));
    o->view.pieces = pieces;
    build_slices(o, m, c);
    if (o->kind == OPTIMIZER_ADAMW8BIT) o->state_bytes = q8_layout(NULL, o->n_quantized, o->n_blocks, o->n_fp32, NULL);
    else { o->n_slices8 = 0; o->state_bytes = 2 * o->view.n * sizeof(float); o->n_quantized = o->n_blocks = o->n_fp32 = 0; }
    o->beta1 = c->beta1; o->beta2 = c->beta2; o->eps = c->adam_eps; o->grad_clip = c->grad_clip;
}

void optimizer_plan(Optimizer *o, const Model *m, const Config *c, const OptimizerView *view) { layout(o, m, c, view); }

void optimizer_init(Optimizer *o, const Model *m, const Config *c, const OptimizerView *view) {
    const Backend *be = m->be;
    layout(o, m, c, view);
    if (o->kind == OPTIMIZER_ADAMW8BIT) {
        o->state = be->alloc(o->state_bytes, "8-bit AdamW state (codes, absmax, small tensors' fp32 moments)");
        q8_layout(o->state, o->n_quantized, o->n_blocks, o->n_fp32, &o->q8);
    } else {
        o->m = be->alloc(o->view.n * sizeof(float), "AdamW first moment");
        o->v = be->alloc(o->view.n * sizeof(float), "AdamW second moment");
    }
    if (o->n_tp_pack) o->tp_pack = be->alloc(o->n_tp_pack * sizeof(float), "norm gradients packed for the sum over tensor-parallel ranks");
}

void optimizer_free(Optimizer *o, const Backend *be) {
    if (o->m) be->free(o->m);
    if (o->v) be->free(o->v);
    if (o->state) be->free(o->state);
    if (o->tp_pack) be->free(o->tp_pack);
    free(o->slices);
    free(o->slices8);
    free(o->replicated);
    free((void *)o->view.pieces);
    memset(o, 0, sizeof *o);
}

size_t optimizer_state_bytes(const Optimizer *o) { return o->state_bytes + o->n_tp_pack * sizeof(float); }

/* Sequence parallelism: every tp rank holds the norm weights whole, but its
 * gradient of them covers only its own N/tp tokens; the gradient is their sum
 * over tp. Done once a step, all of them packed into one all-reduce (after the
 * data-parallel reduction, with which it commutes). */
static void sum_replicated_over_tp(Optimizer *o, const Model *m) {
    const Backend *be = m->be;
    size_t at = 0;
    for (int r = 0; r < o->n_replicated; r++) {
        const OptPiece *p = &o->replicated[r];
        be->copy(o->tp_pack + at, o->view.grads + p->at, p->count * sizeof(float));
        at += p->count;
    }
    comm_allreduce(m->comm, GROUP_TP, o->tp_pack, o->n_tp_pack, DTYPE_FP32);
    at = 0;
    for (int r = 0; r < o->n_replicated; r++) {
        const OptPiece *p = &o->replicated[r];
        be->copy(o->view.grads + p->at, o->tp_pack + at, p->count * sizeof(float));
        at += p->count;
    }
}

double optimizer_step(Optimizer *o, Model *m, float lr, float loss_scale) {
    const Backend *be = m->be;
    const OptimizerView *v = &o->view;
    if (o->tp_pack) sum_replicated_over_tp(o, m);
    /* tp ranks hold disjoint slices of the matrices but the same norm weights (counted
     * on tp rank 0 only); pp stages hold disjoint layers; zero=1 dp ranks disjoint pieces */
    double ss = be->sum_squares(v->grads, v->n);
    if (m->part.tp_rank > 0) {
        for (int r = 0; r < o->n_replicated; r++) ss -= be->sum_squares(v->grads + o->replicated[r].at, o->replicated[r].count);
        if (ss < 0) ss = 0;
    }
    ss = comm_sum(m->comm, GROUP_MP, ss);
    if (v->sharded_over_dp) ss = comm_sum(m->comm, comm_replica_group(m->comm), ss);   /* ZeRO shards over dp x cp */
    double norm = sqrt(ss) / loss_scale;
    if (!isfinite(norm)) return norm;   /* before either optimizer touches anything */
    float clip = (o->grad_clip > 0 && norm > o->grad_clip) ? (float)(o->grad_clip / (norm + 1e-6)) : 1.0f;
    o->step++;
    AdamWHyper h = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .grad_scale = clip / loss_scale, .step = o->step};
    if (o->kind == OPTIMIZER_ADAMW8BIT) {
        if (!be->adamw8bit_update)
            die("optimizer=adamw8bit: the %s backend of this build has no 8-bit AdamW kernel\n"
                "  hint: run with --optimizer=adamw, or rebuild with kernels/cuda/adamw8bit.cu registered", be->name);
        be->adamw8bit_update(v->master, v->compute, v->grads, o->q8, o->slices8, o->n_slices8, h);
    } else {
        be->adamw_update(v->master, v->compute, v->grads, o->m, o->v, o->slices, o->n_slices, h);
    }
    model_master_changed(m);   /* compute_weights=per_layer: the layer cast from the old master is stale */
    return norm;
}

/* ------------------------------------------------ the fp32 form of the moments */

size_t optimizer_drop_lost_moments(float *m, const float *v, size_t n) {
    size_t lost = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] == 0.0f && m[i] != 0.0f) { m[i] = 0.0f; lost++; }
    return lost;
}

void optimizer_moments_get(const Optimizer *o, const Model *m, float *hm, float *hv) {
    const Backend *be = m->be;
    size_t P = o->view.n;
    if (o->kind != OPTIMIZER_ADAMW8BIT) {
        be->download(hm, o->m, P * sizeof(float));
        be->download(hv, o->v, P * sizeof(float));
        return;
    }
    char *hs = mallocCheck(o->state_bytes);
    memset(hm, 0, P * sizeof(float));
    memset(hv, 0, P * sizeof(float));
    be->download(hs, o->state, o->state_bytes);
    AdamW8bitState st;
    q8_layout(hs, o->n_quantized, o->n_blocks, o->n_fp32, &st);
    adamw8bit_state_get(st, o->slices8, o->n_slices8, hm, hv);
    free(hs);
}

void optimizer_moments_set(Optimizer *o, const Model *m, const float *hm, const float *hv) {
    const Backend *be = m->be;
    size_t P = o->view.n;
    if (o->kind != OPTIMIZER_ADAMW8BIT) {
        be->upload(o->m, hm, P * sizeof(float));
        be->upload(o->v, hv, P * sizeof(float));
        return;
    }
    char *hs = callocCheck(o->state_bytes, 1);
    AdamW8bitState st;
    q8_layout(hs, o->n_quantized, o->n_blocks, o->n_fp32, &st);
    adamw8bit_state_set(st, o->slices8, o->n_slices8, hm, hv);   /* drops an m whose v is 0, as optimizer_drop_lost_moments */
    be->upload(o->state, hs, o->state_bytes);
    free(hs);
}
