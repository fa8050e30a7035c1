/* kernels/cuda/rmsnorm.cuh — RMSNorm's forward arithmetic, one place for the two
 * kernels that compute it: rmsnorm.cu's (act-dtype output) and matmul_fp8.cu's
 * producer (FP8 output), so both round the very same fp32 values:
 * r = 1 / sqrt(mean(x^2) + eps) per row (one warp's sum, rmsnorm.cu), out = (x r) w. */
#pragma once

__device__ __forceinline__ float rmsnorm_value(float x, float r, float w) { return (x * r) * w; }

/* rstd (N) of inp (N,C) in the act dtype, exactly as rmsnorm_forward_cuda computes it (inp, C: packable, see the
 * producer's checks), without writing the output */
void rmsnorm_rstd_cuda(float *rstd, const void *inp, int N, int C, float eps);
