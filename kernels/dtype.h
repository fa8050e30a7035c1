/* kernels/dtype.h — the element types activations and compute weights can have.
 * Master weights, gradients, optimizer state and statistics are always fp32;
 * the backend's `act` dtype is what the forward and backward passes run in. */
#pragma once
#include <stddef.h>

typedef enum { DTYPE_FP32 = 0, DTYPE_BF16 = 1, DTYPE_FP16 = 2 } DType;

static inline size_t dtype_size(DType t) { return t == DTYPE_FP32 ? 4 : 2; }
static inline const char *dtype_name(DType t) { return t == DTYPE_FP32 ? "fp32" : t == DTYPE_BF16 ? "bf16" : "fp16"; }
