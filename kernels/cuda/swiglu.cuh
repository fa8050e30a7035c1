/* kernels/cuda/swiglu.cuh — SwiGLU's arithmetic, one place for the two kernels
 * that compute it: swiglu.cu's (act-dtype output) and matmul_fp8.cu's producers
 * (FP8 output), so both round the very same fp32 values. With sg = sigmoid(g):
 * out = g sg u;  du = dout g sg;  dg = dout u sg (1 + g (1 - sg)). */
#pragma once

__device__ __forceinline__ float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ void swiglu_grads(float g, float u, float dy, float *dg, float *du) {
    float sg = 1.0f / (1.0f + expf(-g));
    *du = dy * g * sg;
    *dg = dy * u * sg * (1.0f + g * (1.0f - sg));
}
