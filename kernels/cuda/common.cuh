/* kernels/cuda/common.cuh — what every CUDA kernel file of llm3d shares: the
 * checked-call macros, the activation dtype the backend was opened with, float
 * <-> activation conversions, 16-byte packed loads and stores, warp and block
 * reductions, persistent scratch buffers, and the cuBLASLt call of matmul.cu.
 *
 * The idea: a kernel is written once as a template on its storage type T
 * (float, __nv_bfloat16 or __half) and does its arithmetic in fp32; the C
 * launcher picks T from `cuda_act` with ACT_SWITCH. A failing CUDA, cuBLAS or
 * cuDNN call stops the program with the file, line, the call, the library's
 * words for the error and a hint for the person at the keyboard. */
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include "../dtype.h"
}

/* ---- checked calls ---------------------------------------------------------- */
extern "C" void cuda_fail(const char *what, const char *err, const char *hint, const char *file, int line)
    __attribute__((noreturn));
const char *cuda_hint(cudaError_t e);
const char *cublas_hint(cublasStatus_t s);

#define cudaCheck(call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) cuda_fail(#call, cudaGetErrorString(e_), cuda_hint(e_), __FILE__, __LINE__); } while (0)
#define cublasCheck(call) do { cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) cuda_fail(#call, cublasGetStatusString(s_), cublas_hint(s_), __FILE__, __LINE__); } while (0)
/* after every launch: a bad launch configuration is reported where it happened */
#define launchCheck() cudaCheck(cudaGetLastError())

/* ---- the backend's state, shared by the kernel files ---------------------------- */
extern DType cuda_act;                 /* activation dtype chosen by backend_cuda() */
extern cudaStream_t cuda_stream;       /* every launch goes here (0: the legacy default stream) */
extern cublasLtHandle_t cuda_cublaslt;
extern void *cuda_cublaslt_workspace;  /* one workspace, allocated once */
extern size_t cuda_cublaslt_workspace_size;
extern int cuda_num_sms;
/* The one cuBLASLt call (matmul.cu), shared with matmul_fp8.cu: column-major D (m,n) ldd = alpha * op(A) (m,k) @ op(B) (k,n)
 * + beta * C (C: D's shape and type; NULL: D itself), op transposing when ta / tb; fp32 accumulation; plans cached per shape. */
void lt_matmul(void *D, const void *A, const void *B, const void *C, int m, int n, int k, int lda, int ldb, int ldd,
               int ta, int tb, cudaDataType_t a_type, cudaDataType_t b_type, cudaDataType_t d_type, float alpha, float beta);
/* A buffer owned by one op that only grows: returns *buf with at least `bytes`. */
void *cuda_scratch(void **buf, size_t *capacity, size_t bytes, const char *what);

/* ACT_SWITCH(T, code): runs `code` with T the storage type of cuda_act. */
#define ACT_SWITCH(T, ...) switch (cuda_act) { \
    case DTYPE_FP32: { typedef float T; __VA_ARGS__; } break; \
    case DTYPE_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break; \
    default: { typedef __half T; __VA_ARGS__; } break; }

/* ---- element conversions ----------------------------------------------------------- */
template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

/* ---- packs: P elements loaded or stored at once (16 bytes when P*sizeof(T) == 16) ---- */
template <typename T> struct Pack16 { static constexpr int n = 16 / sizeof(T); };
template <typename T, int P> struct Vec { float v[P]; };
template <typename T, int P> __device__ __forceinline__ Vec<T, P> vload(const T *p) {
    Vec<T, P> r;
    if constexpr (P * sizeof(T) == 16) {
        int4 raw = *reinterpret_cast<const int4 *>(p);
        const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
        for (int i = 0; i < P; i++) r.v[i] = to_f(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < P; i++) r.v[i] = to_f(p[i]);
    }
    return r;
}
template <typename T, int P> __device__ __forceinline__ void vstore(T *p, const Vec<T, P> &x) {
    if constexpr (P * sizeof(T) == 16) {
        int4 raw;
        T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
        for (int i = 0; i < P; i++) e[i] = from_f<T>(x.v[i]);
        *reinterpret_cast<int4 *>(p) = raw;
    } else {
#pragma unroll
        for (int i = 0; i < P; i++) p[i] = from_f<T>(x.v[i]);
    }
}
/* true when 16-byte packs of T can be used on a row length n through these pointers */
static inline bool packable(size_t n, size_t elem, const void *a, const void *b = 0, const void *c = 0) {
    return n % (16 / elem) == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* ---- reductions ------------------------------------------------------------------------ */
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it */
__device__ __forceinline__ float block_sum(float x) {
    __shared__ float s[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) s[w] = x;
    __syncthreads();
    x = lane < nw ? s[lane] : 0.0f;
    return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x) {
    __shared__ float s[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) s[w] = x;
    __syncthreads();
    x = lane < nw ? s[lane] : -INFINITY;
    return warp_max(x);
}

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }
