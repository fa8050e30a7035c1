/* kernels/backend_cpu.c — the CPU backend: host memory and the fp32 reference
 * kernels of kernels/cpu/ put in the Backend table. */
#include "backend.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes, const char *what) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        char b[32];
        die("out of host memory allocating %s for %s\n  hint: use a smaller batch_size or model", format_bytes(bytes, b, sizeof b), what);
    }
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_memcpy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_synchronize(void) {}
static size_t cpu_memory_in_use(void) { return 0; }

static const Backend cpu = {
    .name = "cpu", .act = DTYPE_FP32,
    .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_memcpy, .download = cpu_memcpy, .zero = cpu_zero,
    .copy = cpu_memcpy, .synchronize = cpu_synchronize, .memory_in_use = cpu_memory_in_use, .peak_flops = 0,
    .embedding_forward = embedding_forward_cpu, .embedding_backward = embedding_backward_cpu,
    .rmsnorm_forward = rmsnorm_forward_cpu, .rmsnorm_backward = rmsnorm_backward_cpu,
    .matmul_forward = matmul_forward_cpu, .matmul_backward = matmul_backward_cpu,
    .rope_forward = rope_forward_cpu, .rope_backward = rope_backward_cpu,
    .attention_forward = attention_forward_cpu, .attention_backward = attention_backward_cpu,
    .attention_cached = attention_cached_cpu,
    .swiglu_forward = swiglu_forward_cpu, .swiglu_backward = swiglu_backward_cpu,
    .cross_entropy = cross_entropy_cpu, .adamw_update = adamw_update_cpu,
    .add = add_cpu, .sum_squares = sum_squares_cpu, .cast_from_fp32 = cast_from_fp32_cpu,
};

const Backend *backend_cpu(void) { return &cpu; }

#ifndef LLM3D_CUDA
const Backend *backend_cuda(DType act) {
    (void)act;
    die("device=cuda, but this build of llm3d has no CUDA backend\n  hint: install the CUDA toolkit (nvcc, cuBLAS, cuDNN) and "
        "rebuild with `make clean && make`, or run with --device=cpu");
}
#endif
