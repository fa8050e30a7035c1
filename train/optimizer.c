/* train/optimizer.c — AdamW slices, global-norm clipping, the fused update. */
#include "optimizer.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>

void optimizer_init(Optimizer *o, const Model *m, const Config *c) {
    const Backend *be = m->be;
    o->m = be->alloc(m->n_params * sizeof(float), "AdamW first moment");
    o->v = be->alloc(m->n_params * sizeof(float), "AdamW second moment");
    o->slices = callocCheck(m->n_tensors, sizeof(AdamWSlice));
    o->n_slices = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        float wd = t->is_norm ? 0.0f : c->weight_decay;
        size_t count = (size_t)t->rows * t->cols;
        AdamWSlice *last = o->n_slices ? &o->slices[o->n_slices - 1] : NULL;
        if (last && last->weight_decay == wd && last->offset + last->count == t->offset) last->count += count;
        else o->slices[o->n_slices++] = (AdamWSlice){t->offset, count, wd};
    }
    o->step = 0;
    o->beta1 = c->beta1; o->beta2 = c->beta2; o->eps = c->adam_eps; o->grad_clip = c->grad_clip;
}

void optimizer_free(Optimizer *o, const Backend *be) {
    be->free(o->m);
    be->free(o->v);
    free(o->slices);
}

double optimizer_step(Optimizer *o, Model *m, float lr, float loss_scale) {
    const Backend *be = m->be;
    /* tp ranks hold disjoint slices of the matrices but the same norm weights;
     * pp stages hold disjoint layers: the squared norm sums over both groups */
    double ss = be->sum_squares(m->grads, m->n_params);
    ss = comm_allreduce_scalar(m->comm, GROUP_PP, ss);
    double norm = sqrt(ss) / loss_scale;
    if (!isfinite(norm)) return norm;
    float clip = (o->grad_clip > 0 && norm > o->grad_clip) ? (float)(o->grad_clip / (norm + 1e-6)) : 1.0f;
    o->step++;
    AdamWHyper h = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .grad_scale = clip / loss_scale, .step = o->step};
    be->adamw_update(m->params, m->params_compute == (void *)m->params ? NULL : m->params_compute, m->grads, o->m, o->v,
                     o->slices, o->n_slices, h);
    return norm;
}
