/* kernels/rope.h — rotary position embedding on the q and k parts of the fused
 * qkv activation, in place, with Hugging Face's rotate-half pairing: element i
 * of a head pairs with element i + HD/2 and rotates by angle
 * pos * theta^(-2i/HD), pos = pos0 + t. So LLaMA weights move to and from
 * Hugging Face unchanged. The backward rotates the gradient by -angle. */
#pragma once
#include <math.h>

/* the frequency of pair i, in fp32 as Hugging Face computes it: every backend uses this one expression */
static inline float rope_inv_freq(float theta, int i, int HD) { return 1.0f / powf(theta, (float)(2 * i) / (float)HD); }

typedef void Rope(void *qkv /* (B,T,(NH+2*NKV)*HD), q and k rotated in place */, int B, int T, int NH, int NKV, int HD,
                  float theta, int pos0);
Rope rope_forward_cpu, rope_forward_cuda;
Rope rope_backward_cpu, rope_backward_cuda;
