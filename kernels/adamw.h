/* kernels/adamw.h — AdamW with decoupled weight decay (PyTorch's update rule),
 * over all parameter tensors in one call: each slice of the flat buffers carries
 * its own weight decay (0 for norm weights). grad_scale multiplies every
 * gradient first (global-norm clipping, loss-scale removal). The fp32 master
 * weights are updated and, when params_compute is not NULL, their copy in the
 * activation dtype is refreshed in the same pass. */
#pragma once
#include <stddef.h>
typedef struct { size_t offset, count; float weight_decay; } AdamWSlice;
typedef struct { float lr, beta1, beta2, eps, grad_scale; int step; /* 1-based */ } AdamWHyper;
/* One element of the update (the CPU kernels' shared arithmetic): moments m, v
 * updated in place, the new weight returned. decay = 1 - lr * weight_decay,
 * step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t). */
static inline float adamw_element(float p, float g, float *m, float *v, float decay, float step_size, float bc2_sqrt,
                                  const AdamWHyper *h) {
    g *= h->grad_scale;
    p *= decay;
    *m = h->beta1 * *m + (1.0f - h->beta1) * g;
    *v = h->beta2 * *v + (1.0f - h->beta2) * g * g;
    return p - step_size * *m / (__builtin_sqrtf(*v) / bc2_sqrt + h->eps);
}
typedef void AdamWUpdate(float *params /* (P) */, void *params_compute /* (P) or NULL */, const float *grads /* (P) */,
                         float *m /* (P) */, float *v /* (P) */, const AdamWSlice *slices, int n_slices, AdamWHyper h);
AdamWUpdate adamw_update_cpu, adamw_update_cuda;
