/* kernels/embedding.h — token embedding lookup and its gradient, on a table
 * that may hold only one block of the vocabulary.
 *
 * The idea (vocab-parallel embedding, Megatron): tensor-parallel rank r holds
 * rows v0 .. v0+V-1 of the whole table. Its forward writes the rows of the ids
 * it holds and zeros for every other id, so the sum over ranks is the lookup;
 * its backward adds only into the rows it holds. One rank holding the whole
 * vocabulary is v0 = 0, V = vocab_size.
 *   out[n,:] = wte[ids[n]-v0,:] if v0 <= ids[n] < v0+V, else 0
 *   dwte[ids[n]-v0,:] += dout[n,:] for those ids; the others are skipped
 * `void *` tensors are in the backend's activation dtype; `float *` are fp32. */
#pragma once
typedef void EmbeddingForward(void *out /* (N,C) */, const int *ids /* (N) */, const void *wte /* (V,C) */, int N, int C,
                              int v0, int V);
typedef void EmbeddingBackward(float *dwte /* (V,C) += */, const void *dout /* (N,C) */, const int *ids /* (N) */, int N, int C,
                               int v0, int V);
EmbeddingForward embedding_forward_cpu, embedding_forward_cuda;
EmbeddingBackward embedding_backward_cpu, embedding_backward_cuda;
