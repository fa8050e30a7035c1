/* kernels/embedding.h — token embedding lookup and its gradient.
 * out[n,:] = wte[ids[n],:]; backward scatters dout rows back into dwte.
 * `void *` tensors are in the backend's activation dtype; `float *` are fp32. */
#pragma once
typedef void EmbeddingForward(void *out /* (N,C) */, const int *ids /* (N) */, const void *wte /* (V,C) */, int N, int C);
typedef void EmbeddingBackward(float *dwte /* (V,C) += */, const void *dout /* (N,C) */, const int *ids /* (N) */, int N, int C);
EmbeddingForward embedding_forward_cpu, embedding_forward_cuda;
EmbeddingBackward embedding_backward_cpu, embedding_backward_cuda;
