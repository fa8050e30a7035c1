/* kernels/rmsnorm.h — RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight.
 * The forward saves rstd = 1/sqrt(mean(x^2)+eps) per row for the backward.
 * The backward ADDS into dinp: dinp is the residual stream's gradient, and each
 * branch's contribution accumulates there. dweight is written, or added to
 * when accumulate (as kernels/matmul.h's dweight). */
#pragma once
typedef void RmsnormForward(void *out /* (N,C) */, float *rstd /* (N) */, const void *inp /* (N,C) */,
                            const void *weight /* (C) */, int N, int C, float eps);
typedef void RmsnormBackward(void *dinp /* (N,C) += */, float *dweight /* (C) = or += */, const void *dout /* (N,C) */,
                             const void *inp /* (N,C) */, const void *weight /* (C) */, const float *rstd /* (N) */,
                             int N, int C, int accumulate);
RmsnormForward rmsnorm_forward_cpu, rmsnorm_forward_cuda;
RmsnormBackward rmsnorm_backward_cpu, rmsnorm_backward_cuda;
