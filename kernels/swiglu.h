/* kernels/swiglu.h — the SwiGLU activation of the LLaMA MLP on the fused
 * gate|up activation: out = silu(gate) * up, silu(g) = g * sigmoid(g).
 * dh13 is overwritten; it may be h13 itself (each element pair is read before
 * it is written), which is how the model saves a (N,2F) buffer. */
#pragma once
typedef void SwigluForward(void *out /* (N,F) */, const void *h13 /* (N,2F): gate | up */, int N, int F);
typedef void SwigluBackward(void *dh13 /* (N,2F) */, const void *dout /* (N,F) */, const void *h13 /* (N,2F) */, int N, int F);
SwigluForward swiglu_forward_cpu, swiglu_forward_cuda;
SwigluBackward swiglu_backward_cpu, swiglu_backward_cuda;
