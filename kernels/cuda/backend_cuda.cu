/* kernels/cuda/backend_cuda.cu — the CUDA backend: device memory, page-locked
 * host memory and the staging ring of uploads that do not wait, the cuBLASLt
 * handle and its one workspace, the checked-call reporting, and the Backend
 * table of the *_cuda launchers for the activation dtype asked for (and whether
 * precision=fp8 can run on this GPU).
 *
 * The idea: backend_cuda(act) is the only door. It checks the GPU can run the
 * dtype, sets the file-static state every kernel file reads (cuda_act,
 * cuda_stream, the cuBLASLt handle), and returns one table per dtype. All work
 * goes to one stream, so ops run in the order the model calls them. */
#include "common.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "../backend.h"
#include "../../common/util.h"
#include "../../common/errors.h"
#include "../../common/options.h"
#include "cuda_extras.h"
}

DType cuda_act = DTYPE_FP32;
cudaStream_t cuda_stream = 0;
cublasLtHandle_t cuda_cublaslt = 0;
void *cuda_cublaslt_workspace = 0;
size_t cuda_cublaslt_workspace_size = BACKEND_CUDA_WORKSPACE_BYTES;   /* kernels/backend.h */
int cuda_num_sms = 0;

/* ---- error reporting -------------------------------------------------------------------- */
/* through the error table (common/errors.h): a row that knows the raw error gives its cause
 * and fix, else the hint below; then the run ends as die() ends it (every rank of a job) */
extern "C" void cuda_fail(const char *what, const char *err, const char *hint, const char *file, int line) {
    error_fail(file, line, what, err, NULL, hint);
}
const char *cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation: return "out of GPU memory: try a smaller batch_size, recompute, or optimizer=adamw8bit";
    case cudaErrorNoDevice: case cudaErrorInsufficientDriver: case cudaErrorInitializationError:
        return "no usable NVIDIA GPU or driver here (check nvidia-smi); run with device=cpu";
    case cudaErrorNoKernelImageForDevice: case cudaErrorUnsupportedPtxVersion:
        return "this build has no kernels for this GPU: rebuild with CUDA_ARCH naming its compute capability";
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure:
        return "a kernel read or wrote outside its buffers: run under compute-sanitizer to find which (tests/gpu/run.sh does)";
    case cudaErrorInvalidValue: return "a launcher was given a bad size or pointer; check the shapes passed";
    default: return "see the CUDA error above; CUDA_LAUNCH_BLOCKING=1 makes the failing launch report itself";
    }
}
const char *cublas_hint(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: return "out of GPU memory: try a smaller batch_size, recompute, or optimizer=adamw8bit";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLASLt has no kernel for this dtype/shape/alignment on this GPU; try dtype=fp32";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS could not start: is the GPU visible (nvidia-smi)? else run with device=cpu";
    default: return "see the cuBLAS status above";
    }
}

/* ---- memory --------------------------------------------------------------------------------- */
/* Bytes allocated through this table, now and at the peak: what PyTorch calls
 * memory_allocated / max_memory_allocated (no CUDA context, no library pools). */
#define MAX_ALLOCS 4096
static struct { void *p; size_t bytes; } allocs[MAX_ALLOCS];
static size_t n_allocs, bytes_now, bytes_peak;
static void track_alloc(void *p, size_t bytes) {
    if (n_allocs == MAX_ALLOCS) die("internal: more than %d live GPU allocations", MAX_ALLOCS);
    allocs[n_allocs].p = p;
    allocs[n_allocs++].bytes = bytes;
    bytes_now += bytes;
    if (bytes_now > bytes_peak) bytes_peak = bytes_now;
}
static void track_free(void *p) {
    for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].p == p) {
            bytes_now -= allocs[i].bytes;
            allocs[i] = allocs[--n_allocs];
            return;
        }
}
static size_t cuda_memory_peak(void) { return bytes_peak; }
static size_t cuda_memory_free(void) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

static void *cuda_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        char b1[32], b2[32], b3[32];
        die("out of GPU memory allocating %s for %s (%s free of %s): %s\n"
            "  hint: try a smaller batch_size, recompute, optimizer=adamw8bit or compute_weights=per_layer",
            format_bytes((double)bytes, b1, sizeof b1), what, format_bytes((double)free_b, b2, sizeof b2),
            format_bytes((double)total_b, b3, sizeof b3), cudaGetErrorString(e));
    }
    cudaCheck(cudaMemsetAsync(p, 0, bytes, cuda_stream));
    track_alloc(p, bytes);
    return p;
}
static void cuda_free_(void *p) {
    if (!p) return;
    track_free(p);
    cudaCheck(cudaFree(p));
}
static void cuda_upload(void *dst, const void *src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_stream));
    cudaCheck(cudaStreamSynchronize(cuda_stream));   /* the host buffer may be reused at once */
}
static void cuda_download(void *dst, const void *src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream));
    cudaCheck(cudaStreamSynchronize(cuda_stream));
}
static void cuda_zero(void *p, size_t bytes) { cudaCheck(cudaMemsetAsync(p, 0, bytes, cuda_stream)); }
static void cuda_copy(void *dst, const void *src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream));
}
static void cuda_copy2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows) {
    if (width && rows) cudaCheck(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, cuda_stream));
}

/* ---- copies that do not wait for the device ------------------------------------------------ */
/* Page-locked host memory: what a copy between host and device needs to run on the stream without the host. */
static void *cuda_alloc_host(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        char b[32];
        die("out of page-locked host memory allocating %s for %s: %s\n  hint: free host memory, or use a smaller batch_size",
            format_bytes((double)bytes, b, sizeof b), what, cudaGetErrorString(e));
    }
    return p;
}
static void cuda_free_host(void *p) {
    if (p) cudaCheck(cudaFreeHost(p));
}
/* upload_async first copies the bytes into the next slot of a ring of page-locked staging buffers, so the caller's buffer
 * is free on return and the copy runs on the stream in order with the ops. A slot is written again only once its event
 * says the copy out of it has run: the host waits there only when it is STAGING_SLOTS uploads ahead of the device. A slot
 * grows to the largest upload it has held (at least STAGING_MIN_BYTES); the ring lives as long as the backend. */
#define STAGING_SLOTS 16
#define STAGING_MIN_BYTES ((size_t)64 << 10)
typedef struct { void *host; size_t capacity; cudaEvent_t copied; } StagingSlot;
static StagingSlot staging[STAGING_SLOTS];
static int staging_next;
static void cuda_upload_async(void *dst, const void *src, size_t bytes) {
    StagingSlot *s = &staging[staging_next];
    staging_next = (staging_next + 1) % STAGING_SLOTS;
    if (!s->copied) cudaCheck(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
    cudaCheck(cudaEventSynchronize(s->copied));   /* the slot's last copy has run (at once for an event never recorded) */
    if (bytes > s->capacity) {
        cuda_free_host(s->host);
        s->capacity = bytes > STAGING_MIN_BYTES ? bytes : STAGING_MIN_BYTES;
        s->host = cuda_alloc_host(s->capacity, "the upload staging ring");
    }
    memcpy(s->host, src, bytes);
    cudaCheck(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, cuda_stream));
    cudaCheck(cudaEventRecord(s->copied, cuda_stream));
}
/* host_dst must be page-locked (alloc_host): a copy into pageable memory would make the host wait for it */
static void cuda_download_async(void *dst, const void *src, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream));
}

/* ---- synchronisation and timing --------------------------------------------------------------- */
static void cuda_synchronize(void) { cudaCheck(cudaStreamSynchronize(cuda_stream)); cudaCheck(cudaGetLastError()); }
static void *cuda_event_create(void) {
    cudaEvent_t e;
    cudaCheck(cudaEventCreate(&e));
    return (void *)e;
}
static void cuda_event_record(void *e) { cudaCheck(cudaEventRecord((cudaEvent_t)e, cuda_stream)); }
static double cuda_event_seconds(void *from, void *to) {
    float ms = 0;
    cudaCheck(cudaEventSynchronize((cudaEvent_t)to));
    cudaCheck(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return ms / 1e3;
}
static void cuda_event_destroy(void *e) { cudaEventDestroy((cudaEvent_t)e); }
static size_t cuda_memory_in_use(void) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

void *cuda_scratch(void **buf, size_t *capacity, size_t bytes, const char *what) {
    if (bytes > *capacity) {
        if (*buf) cudaCheck(cudaFree(*buf));   /* cudaFree waits for the work that used it */
        *buf = cuda_alloc(bytes, what);
        *capacity = bytes;
    }
    return *buf;
}

/* ---- the table -------------------------------------------------------------------------------- */
static int gpu_ordinal, gpu_major, gpu_minor;   /* the GPU backend_cuda opened, for the sentences below */
static char gpu_name[256];

/* NULL where precision=fp8 runs: FP8 tensor cores (compute capability 8.9 and later) and LLM3D_FP8 not "off" (the
 * tests force the bf16 path this way); else why not, in words. Read at every call, so a test may set the variable. */
static const char *cuda_fp8_unsupported(void) {
    static char why[512];
    const char *e = getenv("LLM3D_FP8");
    if (e && strcmp(e, "off") == 0)
        snprintf(why, sizeof why, "precision=fp8 is switched off by LLM3D_FP8=off (GPU %d, %s) — unset it, or use precision=bf16",
                 gpu_ordinal, gpu_name);
    else if (gpu_major * 10 + gpu_minor < 89)
        snprintf(why, sizeof why, "precision=fp8 needs FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper), "
                 "and GPU %d (%s) has %d.%d — use precision=bf16", gpu_ordinal, gpu_name, gpu_major, gpu_minor);
    else
        return NULL;
    return why;
}

#define CUDA_OPS \
    .alloc = cuda_alloc, .free = cuda_free_, .upload = cuda_upload, .download = cuda_download, \
    .upload_async = cuda_upload_async, .download_async = cuda_download_async, .alloc_host = cuda_alloc_host, \
    .free_host = cuda_free_host, .zero = cuda_zero, .copy = cuda_copy, .copy2d = cuda_copy2d, .synchronize = cuda_synchronize, .memory_in_use = cuda_memory_in_use, .memory_peak = cuda_memory_peak, .memory_free = cuda_memory_free, .peak_flops = 0, \
    .event_create = cuda_event_create, .event_record = cuda_event_record, .event_seconds = cuda_event_seconds, \
    .event_destroy = cuda_event_destroy, \
    .embedding_forward = embedding_forward_cuda, .embedding_backward = embedding_backward_cuda, \
    .rmsnorm_forward = rmsnorm_forward_cuda, .rmsnorm_backward = rmsnorm_backward_cuda, \
    .matmul_forward = matmul_forward_cuda, .matmul_backward = matmul_backward_cuda, \
    .matmul_fp8_forward = matmul_fp8_forward_cuda, .matmul_fp8_backward = matmul_fp8_backward_cuda, \
    .rmsnorm_forward_fp8 = rmsnorm_forward_fp8_cuda, .swiglu_forward_fp8 = swiglu_forward_fp8_cuda, .swiglu_backward_fp8 = swiglu_backward_fp8_cuda, .fp8_bytes = 1, \
    .fp8_unsupported = cuda_fp8_unsupported, \
    .rope_forward = rope_forward_cuda, .rope_backward = rope_backward_cuda, \
    .attention_forward = attention_forward_cuda, .attention_backward = attention_backward_cuda, \
    .attention_cached = attention_cached_cuda, \
    .attention_forward_at = attention_forward_at_cuda, .attention_backward_at = attention_backward_at_cuda, \
    .swiglu_forward = swiglu_forward_cuda, .swiglu_backward = swiglu_backward_cuda, \
    .cross_entropy_stats = cross_entropy_stats_cuda, .cross_entropy_loss = cross_entropy_loss_cuda, \
    .adamw_update = adamw_update_cuda, .adamw8bit_update = adamw8bit_update_cuda, \
    .add = add_cuda, .sum_squares = sum_squares_cuda, .cast_from_fp32 = cast_from_fp32_cuda, \
    .cast_to_fp32 = cast_to_fp32_cuda
static Backend tables[3] = {
    {.name = "cuda", .act = DTYPE_FP32, CUDA_OPS},
    {.name = "cuda", .act = DTYPE_BF16, CUDA_OPS},
    {.name = "cuda", .act = DTYPE_FP16, CUDA_OPS},
};

/* Dense tensor-core peak of the act dtype, for MFU. bf16/fp16: H100 SXM and H200
 * (sm_90) 989 TFLOP/s, H100 PCIe 756. fp32 runs exact fp32 GEMMs (no TF32) by
 * default, so its peak is left 0 (unknown); with LLM3D_TF32=1 it is the TF32
 * tensor-core figure, 494 TFLOP/s on sm_90. Other GPUs: 0. */
static double peak_flops_for(const cudaDeviceProp *p, DType act, int tf32) {
    if (p->major != 9 || p->minor != 0) return 0;
    double half = strstr(p->name, "PCIe") ? 756e12 : 989e12;
    if (act != DTYPE_FP32) return half;
    return tf32 ? half / 2 : 0;
}

extern "C" int backend_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}
extern "C" void backend_cuda_use_device(int ordinal) {
    cudaCheck(cudaSetDevice(ordinal));
}

int cuda_tf32 = 0;   /* read by matmul.cu: fp32 GEMMs through TF32 tensor cores (LLM3D_TF32=1) */

extern "C" const Backend *backend_cuda(DType act) {
    static int opened = 0;
    if (!opened) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess || n == 0)
            die("device=cuda, but no usable NVIDIA GPU was found (%s)\n  hint: check nvidia-smi, or run with device=cpu",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, dev));
        if (prop.major < 8)
            die("GPU %d (%s) has compute capability %d.%d; this build's kernels need 8.0 or newer%s\n"
                "  hint: %s", dev, prop.name, prop.major, prop.minor,
                act == DTYPE_BF16 ? " (bf16 needs 8.0: Ampere or later)" : "",
                act == DTYPE_BF16 ? "use precision=fp16 or precision=fp32 and rebuild with CUDA_ARCH naming this GPU, or run with device=cpu"
                                  : "rebuild with CUDA_ARCH naming this GPU, or run with device=cpu");
        cuda_num_sms = prop.multiProcessorCount;
        gpu_ordinal = dev; gpu_major = prop.major; gpu_minor = prop.minor;
        snprintf(gpu_name, sizeof gpu_name, "%s", prop.name);
        const char *t = getenv("LLM3D_TF32");
        double tf32 = 0;
        char why[256];
        if (t && option_number("LLM3D_TF32", t, 0, 1, 1, &tf32, why, sizeof why) != 0)
            die("environment: %s\n  hint: LLM3D_TF32=1 lets fp32 matmuls use TF32; 0 or unset keeps them fp32", why);
        cuda_tf32 = tf32 != 0;
        /* attention path: unset, Hopper's fa3 forward, and its backward where the wgmma backward would store no dS
         * tiles (T past ATTENTION_DS_MAX_T, head_dim 128), else the wgmma backward; fa3 (Hopper, the
         * warp-specialized forward and backward), wgmma (Hopper's first kernels, forward and backward), recompute
         * (those, the backward computing dS again at every T), mma (portable tensor cores), simple (readable) */
        const char *a = getenv("LLM3D_ATTENTION");
        if (a && *a && strcmp(a, "simple") && strcmp(a, "mma") && strcmp(a, "wgmma") && strcmp(a, "recompute") && strcmp(a, "fa3"))
            die("LLM3D_ATTENTION=%s is not an attention path\n  hint: use wgmma (Hopper), recompute (Hopper, the backward "
                "stores no dS tiles), fa3 (Hopper, the warp-specialized forward and backward), mma (any GPU from sm_80) or simple "
                "(the readable kernels), or unset it", a);
        cuda_attention_simple = a && strcmp(a, "simple") == 0;
        cuda_attention_recompute = a && strcmp(a, "recompute") == 0;
        cuda_attention_fa3_backward = a && strcmp(a, "fa3") == 0;
        int hopper = attention_wgmma_available(), want_hopper = a && (!strcmp(a, "wgmma") || cuda_attention_recompute || cuda_attention_fa3_backward);
        if (want_hopper && !hopper)
            die("LLM3D_ATTENTION=%s, but GPU %d (%s, sm_%d%d) cannot run this build's Hopper kernels\n"
                "  hint: they need an sm_90 GPU and a build whose CUDA_ARCH has -gencode=arch=compute_90a,code=sm_90a; "
                "unset LLM3D_ATTENTION to use the portable kernels", a, dev, prop.name, prop.major, prop.minor);
        cuda_attention_wgmma = hopper && (!a || !*a || want_hopper);
        cuda_attention_fa3 = hopper && (!a || !*a || cuda_attention_fa3_backward);
        if (hopper && (!a || !*a)) cuda_attention_fa3_backward = 2;   /* the default: fa3's backward where wgmma's stores no dS */
        /* context parallelism's chunks on the fa3 kernels wherever the fa3 forward runs (tests/gpu/test_cuda_attention_at.c
         * passed on an H100, 2026-12-07: 1.4-2.4x the mma.sync kernels at an offset); else the mma.sync kernels */
        cuda_attention_fa3_at = cuda_attention_fa3;
        if (!cuda_attention_wgmma && !cuda_attention_simple) {   /* said once, at start-up */
            if (hopper) fprintf(stderr, "llm3d: attention: LLM3D_ATTENTION=mma; the portable mma.sync kernels run\n");
            else fprintf(stderr, "llm3d: attention: GPU %d (%s, sm_%d%d) %s; the portable mma.sync kernels run\n", dev, prop.name,
                         prop.major, prop.minor, prop.major == 9 && prop.minor == 0 ? "runs no sm_90a code of this build" : "has no wgmma");
        }
        cublasCheck(cublasLtCreate(&cuda_cublaslt));
        cuda_cublaslt_workspace = cuda_alloc(cuda_cublaslt_workspace_size, "the cuBLASLt workspace");
        for (int d = 0; d < 3; d++) {
            tables[d].peak_flops = peak_flops_for(&prop, (DType)d, cuda_tf32);
            tables[d].workspace_bytes = cuda_cublaslt_workspace_size;
            tables[d].stream = (void *)cuda_stream;
        }
        opened = 1;
    }
    cuda_act = act;   /* the launchers run in the dtype of the latest call (tests switch between dtypes) */
    return &tables[act];
}
