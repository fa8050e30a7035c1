/* kernels/backend.h — the one table through which model code reaches a device.
 *
 * The idea: the model is written once against this table; `device=cpu` fills
 * it with the fp32 reference kernels of kernels/cpu/, `device=cuda` with the
 * CUDA kernels of kernels/cuda/. Memory lives wherever the backend says, and
 * the model only ever passes the pointers the backend gave it back to it. */
#pragma once
#include <stddef.h>
#include "dtype.h"
#include "embedding.h"
#include "rmsnorm.h"
#include "matmul.h"
#include "rope.h"
#include "attention.h"
#include "swiglu.h"
#include "cross_entropy.h"
#include "adamw.h"
#include "adamw8bit.h"
#include "elementwise.h"
#include "fp8.h"

typedef struct Backend {
    const char *name;              /* "cpu" or "cuda" */
    DType act;                     /* dtype of activations and compute weights */
    int emulated;                  /* 1: values are rounded to act's precision but stored as fp32 (CPU emulation) */
    /* memory: what is allocated here is only touched through this table */
    void *(*alloc)(size_t bytes, const char *what);   /* zeroed; dies with a hint on out-of-memory */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);     /* returns with the copy done */
    void (*download)(void *host_dst, const void *src, size_t bytes);   /* returns with the data in host_dst */
    /* copies that do not wait for the device, in the order of the ops: upload_async takes host_src's bytes at once (cuda:
     * into a pinned staging ring), so the caller may reuse it on return; download_async into host_dst from alloc_host
     * (page-locked on cuda) holds the data after the next synchronize */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes);
    void (*download_async)(void *host_dst, const void *src, size_t bytes);
    void *(*alloc_host)(size_t bytes, const char *what);   /* host memory for download_async; dies with a hint when out */
    void (*free_host)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* rows strided copies: `rows` runs of `width` bytes, src_pitch and dst_pitch bytes apart (context parallelism's
     * packing of k|v out of qkv and its chunk reordering) */
    void (*copy2d)(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows);
    void (*synchronize)(void);
    size_t (*memory_in_use)(void); /* bytes the device reports in use, CUDA context included (0 on cpu) */
    size_t (*memory_peak)(void);   /* most bytes ever allocated through alloc at once (on cpu: as malloc_usable_size counts them) */
    size_t (*memory_free)(void);   /* bytes the device can still allocate (0 on cpu: unknown) */
    double peak_flops;             /* dense peak of the act dtype, for MFU; 0 if unknown */
    size_t workspace_bytes;        /* the libraries' fixed workspace the backend allocates once (cuBLASLt's); 0 on cpu */
    void *stream;                  /* cuda: the cudaStream_t every op runs on (NULL: the default stream), for the communicator's events */
    /* timing: an event marks a point in the device's work (cuda: in the stream's order; cpu: the host clock) */
    void *(*event_create)(void);
    void (*event_record)(void *event);
    double (*event_seconds)(void *from, void *to);   /* between two recorded events; waits for `to` */
    void (*event_destroy)(void *event);
    /* ops, one family per header in kernels/ */
    EmbeddingForward *embedding_forward;
    EmbeddingBackward *embedding_backward;
    RmsnormForward *rmsnorm_forward;
    RmsnormBackward *rmsnorm_backward;
    MatmulForward *matmul_forward;
    MatmulBackward *matmul_backward;
    MatmulFp8Forward *matmul_fp8_forward;    /* precision=fp8's block matmuls (kernels/fp8.h) */
    MatmulFp8Backward *matmul_fp8_backward;
    RmsnormForwardFp8 *rmsnorm_forward_fp8;  /* precision=fp8's producers that cast (kernels/fp8.h); NULL: none */
    SwigluForwardFp8 *swiglu_forward_fp8;
    SwigluBackwardFp8 *swiglu_backward_fp8;
    size_t fp8_bytes;                        /* bytes an FP8 operand copy takes an element: 1 (cuda), 4 (cpu: emulated in fp32) */
    const char *(*fp8_unsupported)(void);    /* NULL where FP8 matmuls run, else why not, in words naming the device */
    Rope *rope_forward;
    Rope *rope_backward;
    AttentionForward *attention_forward;
    AttentionBackward *attention_backward;
    AttentionCached *attention_cached;
    AttentionForwardAt *attention_forward_at;     /* NULL: this device has no offset form yet (cp > 1 is refused there) */
    AttentionBackwardAt *attention_backward_at;
    SwigluForward *swiglu_forward;
    SwigluBackward *swiglu_backward;
    CrossEntropyStats *cross_entropy_stats;
    CrossEntropyLoss *cross_entropy_loss;
    AdamWUpdate *adamw_update;
    AdamW8bitUpdate *adamw8bit_update;
    Add *add;
    SumSquares *sum_squares;
    CastFromFp32 *cast_from_fp32;
    CastToFp32 *cast_to_fp32;
} Backend;

/* The cuBLASLt workspace the CUDA backend allocates once (64 MiB: enough for
 * Hopper's split-K and stream-K kernels); a memory plan counts it even where
 * no GPU is open. */
#define BACKEND_CUDA_WORKSPACE_BYTES ((size_t)64 << 20)

/* The dtype activation bytes are stored in: act, or fp32 where emulated. */
static inline DType backend_storage(const Backend *be) { return be->emulated ? DTYPE_FP32 : be->act; }

/* The CPU backend: fp32 reference kernels, OpenMP, BLAS matmuls. */
const Backend *backend_cpu(void);
/* The CPU backend with bf16 or fp16 activations emulated: every op runs in
 * fp32 and rounds what it writes in the activation dtype to that dtype's
 * precision and range (fp16 overflows to inf), so mixed precision and loss
 * scaling are testable without a GPU. DTYPE_FP32 gives backend_cpu(). */
const Backend *backend_cpu_emulated(DType act);
/* The CUDA backend for the given activation dtype. Dies with a clear message
 * when this build has no CUDA, or there is no usable GPU. */
const Backend *backend_cuda(DType act);
/* GPUs this process sees (0 without CUDA or a driver), and the one the CUDA
 * backend will run on: call before backend_cuda (a rank takes its local rank's GPU).
 * Defined in kernels/cuda/backend_cuda.cu, or kernels/backend_cpu.c in a build
 * without CUDA; comm/ and train/ reach them through this header only. */
int backend_cuda_device_count(void);
void backend_cuda_use_device(int ordinal);
