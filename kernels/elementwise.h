/* kernels/elementwise.h — the small ops between the big ones: residual add,
 * sum of squares (for the global gradient norm; NaN/inf propagate so it doubles
 * as the overflow check), fp32 <-> activation-dtype casts (weights; gradients
 * sent in bf16 by data parallelism). */
#pragma once
#include <stddef.h>
typedef void Add(void *out /* (n) */, const void *a /* (n) */, const void *b /* (n) */, size_t n);
typedef double SumSquares(const float *x /* (n) */, size_t n);
typedef void CastFromFp32(void *out /* (n), activation dtype */, const float *inp /* (n) */, size_t n);
typedef void CastToFp32(float *out /* (n) */, const void *inp /* (n), activation dtype */, size_t n);
Add add_cpu, add_cuda;
SumSquares sum_squares_cpu, sum_squares_cuda;
CastFromFp32 cast_from_fp32_cpu, cast_from_fp32_cuda;
CastToFp32 cast_to_fp32_cpu, cast_to_fp32_cuda;
