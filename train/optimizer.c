/* train/optimizer.c — AdamW slices (fp32 or 8-bit state), global-norm
 * clipping, the fused update, and the fp32 form of the moments for checkpoints. */
#include "optimizer.h"
#include "../common/util.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_ALIGN 256   /* bytes; every view of the 8-bit state buffer starts on this */

static size_t align_up(size_t x) { return (x + VIEW_ALIGN - 1) / VIEW_ALIGN * VIEW_ALIGN; }

/* The views of the one 8-bit state buffer at base, in this order:
 * m32, v32 (S fp32) | m_absmax, v_absmax (Q/256 fp32) | m_code, v_code (Q uint8).
 * Returns the buffer's size in bytes. */
static size_t q8_layout(char *base, size_t Q, size_t S, AdamW8bitState *st) {
    size_t off[6], n = 0, sizes[6] = {S * sizeof(float), S * sizeof(float), Q / ADAMW8BIT_BLOCK * sizeof(float),
                                      Q / ADAMW8BIT_BLOCK * sizeof(float), Q, Q};
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

static void init_adamw8bit(Optimizer *o, const Model *m, const Config *c) {
    o->slices8 = callocCheck(m->n_tensors ? m->n_tensors : 1, sizeof(AdamW8bitSlice));
    o->n_slices8 = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        float wd = t->is_norm ? 0.0f : c->weight_decay;
        size_t count = (size_t)t->rows * t->cols;
        int quantized = count >= ADAMW8BIT_MIN_NUMEL;
        if (!count) continue;
        AdamW8bitSlice *last = o->n_slices8 ? &o->slices8[o->n_slices8 - 1] : NULL;
        if (last && last->weight_decay == wd && last->quantized == quantized && last->offset + last->count == t->offset)
            last->count += count;
        else
            o->slices8[o->n_slices8++] = (AdamW8bitSlice){t->offset, count, 0, wd, quantized};
    }
    /* each quantized slice's state starts on a whole block, so every block belongs to one slice */
    size_t Q = 0, S = 0;
    for (int s = 0; s < o->n_slices8; s++) {
        AdamW8bitSlice *sl = &o->slices8[s];
        if (sl->quantized) { sl->state = Q; Q += (sl->count + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK * ADAMW8BIT_BLOCK; }
        else { sl->state = S; S += sl->count; }
    }
    o->n_quantized = Q;
    o->n_fp32 = S;
    o->state_bytes = q8_layout(NULL, Q, S, NULL);
    o->state = m->be->alloc(o->state_bytes, "8-bit AdamW state (codes, absmax, small tensors' fp32 moments)");
    q8_layout(o->state, Q, S, &o->q8);
}

void optimizer_init(Optimizer *o, const Model *m, const Config *c) {
    const Backend *be = m->be;
    memset(o, 0, sizeof *o);
    o->kind = c->optimizer;
    if (o->kind == OPTIMIZER_ADAMW8BIT) {
        init_adamw8bit(o, m, c);
    } else {
        o->m = be->alloc(m->n_params * sizeof(float), "AdamW first moment");
        o->v = be->alloc(m->n_params * sizeof(float), "AdamW second moment");
        o->slices = callocCheck(m->n_tensors ? m->n_tensors : 1, sizeof(AdamWSlice));
        o->n_slices = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            const ParamTensor *t = &m->tensors[i];
            float wd = t->is_norm ? 0.0f : c->weight_decay;
            size_t count = (size_t)t->rows * t->cols;
            AdamWSlice *last = o->n_slices ? &o->slices[o->n_slices - 1] : NULL;
            if (last && last->weight_decay == wd && last->offset + last->count == t->offset) last->count += count;
            else o->slices[o->n_slices++] = (AdamWSlice){t->offset, count, wd};
        }
    }
    o->step = 0;
    o->beta1 = c->beta1; o->beta2 = c->beta2; o->eps = c->adam_eps; o->grad_clip = c->grad_clip;
}

void optimizer_free(Optimizer *o, const Backend *be) {
    if (o->m) be->free(o->m);
    if (o->v) be->free(o->v);
    if (o->state) be->free(o->state);
    free(o->slices);
    free(o->slices8);
    memset(o, 0, sizeof *o);
}

size_t optimizer_state_bytes(const Optimizer *o) {
    if (o->kind == OPTIMIZER_ADAMW8BIT) return o->state_bytes;
    size_t n = 0;
    for (int s = 0; s < o->n_slices; s++) n += o->slices[s].count;
    return 2 * n * sizeof(float);
}

double optimizer_step(Optimizer *o, Model *m, float lr, float loss_scale) {
    const Backend *be = m->be;
    /* tp ranks hold disjoint slices of the matrices but the same norm weights;
     * pp stages hold disjoint layers: the squared norm sums over both groups */
    double ss = be->sum_squares(m->grads, m->n_params);
    ss = comm_allreduce_scalar(m->comm, GROUP_PP, ss);
    double norm = sqrt(ss) / loss_scale;
    if (!isfinite(norm)) return norm;   /* before either optimizer touches anything */
    float clip = (o->grad_clip > 0 && norm > o->grad_clip) ? (float)(o->grad_clip / (norm + 1e-6)) : 1.0f;
    o->step++;
    AdamWHyper h = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .grad_scale = clip / loss_scale, .step = o->step};
    void *compute = m->params_compute == (void *)m->params ? NULL : m->params_compute;
    if (o->kind == OPTIMIZER_ADAMW8BIT) {
        if (!be->adamw8bit_update)
            die("optimizer=adamw8bit: the %s backend of this build has no 8-bit AdamW kernel\n"
                "  hint: run with --optimizer=adamw, or rebuild with kernels/cuda/adamw8bit.cu registered", be->name);
        be->adamw8bit_update(m->params, compute, m->grads, o->q8, o->slices8, o->n_slices8, h);
    } else {
        be->adamw_update(m->params, compute, m->grads, o->m, o->v, o->slices, o->n_slices, h);
    }
    return norm;
}

/* ------------------------------------------------ the fp32 form of the moments */

void optimizer_moments_to_fp32(const Optimizer *o, const Model *m, float *m_out, float *v_out) {
    const Backend *be = m->be;
    size_t P = m->n_params;
    if (o->kind != OPTIMIZER_ADAMW8BIT) {
        be->copy(m_out, o->m, P * sizeof(float));
        be->copy(v_out, o->v, P * sizeof(float));
        return;
    }
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    char *hs = mallocCheck(o->state_bytes);
    float *hm = callocCheck(P ? P : 1, sizeof(float)), *hv = callocCheck(P ? P : 1, sizeof(float));
    be->download(hs, o->state, o->state_bytes);
    AdamW8bitState st;
    q8_layout(hs, o->n_quantized, o->n_fp32, &st);
    for (int s = 0; s < o->n_slices8; s++) {
        const AdamW8bitSlice *sl = &o->slices8[s];
        if (!sl->quantized) {
            memcpy(hm + sl->offset, st.m32 + sl->state, sl->count * sizeof(float));
            memcpy(hv + sl->offset, st.v32 + sl->state, sl->count * sizeof(float));
            continue;
        }
        for (size_t j0 = 0; j0 < sl->count; j0 += ADAMW8BIT_BLOCK) {
            size_t q = sl->state + j0, blk = q / ADAMW8BIT_BLOCK;
            int n = sl->count - j0 < ADAMW8BIT_BLOCK ? (int)(sl->count - j0) : ADAMW8BIT_BLOCK;
            adamw8bit_dequantize_block(ms, st.m_code + q, st.m_absmax[blk], n, hm + sl->offset + j0);
            adamw8bit_dequantize_block(mu, st.v_code + q, st.v_absmax[blk], n, hv + sl->offset + j0);
        }
    }
    be->upload(m_out, hm, P * sizeof(float));
    be->upload(v_out, hv, P * sizeof(float));
    free(hs); free(hm); free(hv);
}

void optimizer_moments_from_fp32(Optimizer *o, const Model *m, const float *m_in, const float *v_in) {
    const Backend *be = m->be;
    size_t P = m->n_params;
    if (o->kind != OPTIMIZER_ADAMW8BIT) {
        be->copy(o->m, m_in, P * sizeof(float));
        be->copy(o->v, v_in, P * sizeof(float));
        return;
    }
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    char *hs = callocCheck(o->state_bytes, 1);
    float *hm = mallocCheck((P ? P : 1) * sizeof(float)), *hv = mallocCheck((P ? P : 1) * sizeof(float));
    be->download(hm, m_in, P * sizeof(float));
    be->download(hv, v_in, P * sizeof(float));
    AdamW8bitState st;
    q8_layout(hs, o->n_quantized, o->n_fp32, &st);
    for (int s = 0; s < o->n_slices8; s++) {
        const AdamW8bitSlice *sl = &o->slices8[s];
        if (!sl->quantized) {
            memcpy(st.m32 + sl->state, hm + sl->offset, sl->count * sizeof(float));
            memcpy(st.v32 + sl->state, hv + sl->offset, sl->count * sizeof(float));
            continue;
        }
        for (size_t j0 = 0; j0 < sl->count; j0 += ADAMW8BIT_BLOCK) {
            size_t q = sl->state + j0, blk = q / ADAMW8BIT_BLOCK;
            int n = sl->count - j0 < ADAMW8BIT_BLOCK ? (int)(sl->count - j0) : ADAMW8BIT_BLOCK;
            st.m_absmax[blk] = adamw8bit_quantize_block(ms, hm + sl->offset + j0, n, st.m_code + q);
            st.v_absmax[blk] = adamw8bit_quantize_block(mu, hv + sl->offset + j0, n, st.v_code + q);
        }
    }
    be->upload(o->state, hs, o->state_bytes);
    free(hs); free(hm); free(hv);
}
