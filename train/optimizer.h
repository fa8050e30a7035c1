/* train/optimizer.h — AdamW over the model's flat parameter buffer.
 *
 * The idea: the optimizer sees the parameters as one fp32 buffer cut into
 * slices that differ only in weight decay (none on norm weights); one step is
 * global-norm -> clip factor -> one fused update of every slice. */
#pragma once
#include "config.h"
#include "../model/llama.h"

typedef struct {
    float *m, *v;           /* (n_params) first and second moments, on the backend */
    AdamWSlice *slices;     /* runs of adjacent tensors with the same weight decay */
    int n_slices;
    int step;               /* updates done */
    float beta1, beta2, eps, grad_clip;
} Optimizer;

void optimizer_init(Optimizer *o, const Model *m, const Config *c);
void optimizer_free(Optimizer *o, const Backend *be);
/* The gradients hold loss_scale x the true gradients (1 unless fp16 loss
 * scaling). Unscale, clip to grad_clip by the global norm over every rank
 * holding a part of the model, then update. Returns that (true) norm; a
 * non-finite norm — an overflow somewhere — skips the update. */
double optimizer_step(Optimizer *o, Model *m, float lr, float loss_scale);
