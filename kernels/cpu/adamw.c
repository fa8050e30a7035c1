/* kernels/cpu/adamw.c — fp32 reference AdamW, PyTorch's order of operations:
 * p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
#include "../adamw.h"
#include "parallel.h"
#include <math.h>

void adamw_update_cpu(float *params, void *params_compute, const float *grads, float *m, float *v,
                      const AdamWSlice *slices, int n_slices, AdamWHyper h) {
    float bc1 = 1.0f - powf(h.beta1, (float)h.step), bc2_sqrt = sqrtf(1.0f - powf(h.beta2, (float)h.step));
    float step_size = h.lr / bc1;
    for (int s = 0; s < n_slices; s++) {
        float decay = 1.0f - h.lr * slices[s].weight_decay;
        size_t lo = slices[s].offset, hi = lo + slices[s].count;
#pragma omp parallel for if (cpu_parallel(hi - lo))
        for (size_t i = lo; i < hi; i++) {
            float p = adamw_element(params[i], grads[i], &m[i], &v[i], decay, step_size, bc2_sqrt, &h);
            params[i] = p;
            if (params_compute) ((float *)params_compute)[i] = p;
        }
    }
}
