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
typedef void AdamWUpdate(float *params /* (P) */, void *params_compute /* (P) or NULL */, const float *grads /* (P) */,
                         float *m /* (P) */, float *v /* (P) */, const AdamWSlice *slices, int n_slices, AdamWHyper h);
AdamWUpdate adamw_update_cpu, adamw_update_cuda;
