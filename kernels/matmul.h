/* kernels/matmul.h — the linear layer without bias, weights stored (out, in)
 * as PyTorch and Hugging Face store them.
 *   forward:  out = inp @ weight^T  (+ add, when add is not NULL: a residual
 *             stream added to the fp32 product before it is rounded; add is not out)
 *   backward: dinp = dout @ weight (overwritten; skipped when dinp is NULL)
 *             dweight (fp32) = dout^T @ inp, or += it when accumulate: the
 *             first write of a step overwrites (no pass zeroing the gradients
 *             first), later micro-batches add; skipped when dweight is NULL
 *             (a zero-bubble pipeline's B, which leaves dweight to its W) */
#pragma once
typedef void MatmulForward(void *out /* (N,OC) */, const void *inp /* (N,IC) */, const void *weight /* (OC,IC) */,
                           int N, int IC, int OC, const void *add /* (N,OC) or NULL */);
typedef void MatmulBackward(void *dinp /* (N,IC) or NULL */, float *dweight /* (OC,IC) = or +=, or NULL */, const void *dout /* (N,OC) */,
                            const void *inp /* (N,IC) */, const void *weight /* (OC,IC) */, int N, int IC, int OC, int accumulate);
MatmulForward matmul_forward_cpu, matmul_forward_cuda;
MatmulBackward matmul_backward_cpu, matmul_backward_cuda;
