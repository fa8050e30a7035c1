/* kernels/backend_cpu.c — the CPU backend: host memory and the fp32 reference
 * kernels of kernels/cpu/ put in the Backend table. */
#include "backend.h"
#include "../common/util.h"
#include "cpu/parallel.h"
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* alloc_host (memory download_async writes into): plain host memory, not counted */
static void *cpu_alloc_host(size_t bytes, const char *what) {
    char *p = calloc(1, bytes);
    if (!p) {
        char b[32];
        die("out of host memory allocating %s for %s\n  hint: use a smaller batch_size or model", format_bytes(bytes, b, sizeof b), what);
    }
    return p;
}

/* Bytes allocated through this table, now and at the peak, as the C library's
 * allocator counts them (malloc_usable_size: each block as it was handed out,
 * rounding included): the CPU's counterpart of the CUDA table's accounting. */
static size_t host_bytes_now, host_bytes_peak;
static void *cpu_alloc(size_t bytes, const char *what) {
    void *p = cpu_alloc_host(bytes, what);
    host_bytes_now += malloc_usable_size(p);
    if (host_bytes_now > host_bytes_peak) host_bytes_peak = host_bytes_now;
    return p;
}
static void cpu_free(void *p) {
    if (!p) return;
    host_bytes_now -= malloc_usable_size(p);
    free(p);
}
static void cpu_memcpy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_synchronize(void) {}
static size_t cpu_memory_in_use(void) { return 0; }
static size_t cpu_memory_peak(void) { return host_bytes_peak; }
static void cpu_copy2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows) {
    for (size_t r = 0; r < rows; r++) memmove((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, width);
}

static void *cpu_event_create(void) { return callocCheck(1, sizeof(double)); }
static void cpu_event_record(void *e) { *(double *)e = now_seconds(); }
static double cpu_event_seconds(void *from, void *to) { return *(double *)to - *(double *)from; }
static void cpu_event_destroy(void *e) { free(e); }

static const char *cpu_fp8_unsupported(void) { return NULL; }   /* emulated: kernels/cpu/matmul_fp8.c */

static const Backend cpu = {
    .name = "cpu", .act = DTYPE_FP32,
    .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_memcpy, .download = cpu_memcpy,
    .upload_async = cpu_memcpy, .download_async = cpu_memcpy, .alloc_host = cpu_alloc_host, .free_host = free, .zero = cpu_zero,
    .copy = cpu_memcpy, .copy2d = cpu_copy2d, .synchronize = cpu_synchronize, .memory_in_use = cpu_memory_in_use, .memory_peak = cpu_memory_peak, .memory_free = NULL, .peak_flops = 0,
    .event_create = cpu_event_create, .event_record = cpu_event_record, .event_seconds = cpu_event_seconds, .event_destroy = cpu_event_destroy,
    .embedding_forward = embedding_forward_cpu, .embedding_backward = embedding_backward_cpu,
    .rmsnorm_forward = rmsnorm_forward_cpu, .rmsnorm_backward = rmsnorm_backward_cpu,
    .matmul_forward = matmul_forward_cpu, .matmul_backward = matmul_backward_cpu,
    .matmul_fp8_forward = matmul_fp8_forward_cpu, .matmul_fp8_backward = matmul_fp8_backward_cpu, .fp8_bytes = 4,
    .fp8_unsupported = cpu_fp8_unsupported,
    .rope_forward = rope_forward_cpu, .rope_backward = rope_backward_cpu,
    .attention_forward = attention_forward_cpu, .attention_backward = attention_backward_cpu,
    .attention_cached = attention_cached_cpu,
    .attention_forward_at = attention_forward_at_cpu, .attention_backward_at = attention_backward_at_cpu,
    .swiglu_forward = swiglu_forward_cpu, .swiglu_backward = swiglu_backward_cpu,
    .cross_entropy_stats = cross_entropy_stats_cpu, .cross_entropy_loss = cross_entropy_loss_cpu,
    .adamw_update = adamw_update_cpu, .adamw8bit_update = adamw8bit_update_cpu,
    .add = add_cpu, .sum_squares = sum_squares_cpu, .cast_from_fp32 = cast_from_fp32_cpu,
    .cast_to_fp32 = cast_to_fp32_cpu,
};

const Backend *backend_cpu(void) { return &cpu; }

#ifndef LLM3D_CUDA
const Backend *backend_cuda(DType act) {
    (void)act;
    die("device=cuda, but this build of llm3d has no CUDA backend\n  hint: install the CUDA toolkit (nvcc, cuBLAS, cuDNN) and "
        "rebuild with `make clean && make`, or run with --device=cpu");
}
int backend_cuda_device_count(void) { return 0; }
void backend_cuda_use_device(int ordinal) { (void)ordinal; }
#endif

/* ---------------------------------------------------------------------------
 * bf16 / fp16 emulation: each op runs in fp32, then what it wrote in the
 * activation dtype is rounded to that dtype (round to nearest even; fp16
 * saturates to inf past 65504, as the hardware does). fp32 outputs (rstd, lse,
 * losses, cross-entropy statistics, gradients of weights) are left as they are,
 * as on the GPU. */

static DType emu;   /* the dtype being emulated by the wrappers below */

static void round_to(void *p, size_t n) {
    float *x = p;
    if (emu == DTYPE_BF16) {
#pragma omp parallel for if (cpu_parallel(n))
        for (size_t i = 0; i < n; i++) {
            union { float f; unsigned int u; } v = {x[i]};
            if ((v.u & 0x7f800000u) == 0x7f800000u) continue;     /* inf, nan stay */
            v.u += 0x7fffu + ((v.u >> 16) & 1u);
            v.u &= 0xffff0000u;
            x[i] = v.f;
        }
    } else if (emu == DTYPE_FP16) {
#pragma omp parallel for if (cpu_parallel(n))
        for (size_t i = 0; i < n; i++) x[i] = dtype_round_fp16(x[i]);
    }
}

static void emu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, int N, int C, float eps) {
    rmsnorm_forward_cpu(out, rstd, inp, w, N, C, eps);
    round_to(out, (size_t)N * C);
}
static void emu_rmsnorm_backward(void *dinp, float *dw, const void *dout, const void *inp, const void *w, const float *rstd, int N, int C,
                                 int accumulate) {
    rmsnorm_backward_cpu(dinp, dw, dout, inp, w, rstd, N, C, accumulate);
    round_to(dinp, (size_t)N * C);
}
static void emu_matmul_forward(void *out, const void *inp, const void *w, int N, int IC, int OC, const void *add) {
    matmul_forward_cpu(out, inp, w, N, IC, OC, add);
    round_to(out, (size_t)N * OC);
}
static void emu_matmul_backward(void *dinp, float *dw, const void *dout, const void *inp, const void *w, int N, int IC, int OC,
                                int accumulate) {
    matmul_backward_cpu(dinp, dw, dout, inp, w, N, IC, OC, accumulate);
    if (dinp) round_to(dinp, (size_t)N * IC);
}
static void emu_matmul_fp8_forward(void *out, const void *inp, const void *w, int N, int IC, int OC, const void *add, const Fp8Matmul *q) {
    matmul_fp8_forward_cpu(out, inp, w, N, IC, OC, add, q);
    round_to(out, (size_t)N * OC);
}
static void emu_matmul_fp8_backward(void *dinp, float *dw, const void *dout, const void *inp, const void *w, int N, int IC, int OC,
                                    int accumulate, const Fp8Matmul *q) {
    matmul_fp8_backward_cpu(dinp, dw, dout, inp, w, N, IC, OC, accumulate, q);
    if (dinp) round_to(dinp, (size_t)N * IC);
}
static void emu_rope_forward(void *qkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_forward_cpu(qkv, B, T, NH, NKV, HD, theta, pos0);
    round_to(qkv, (size_t)B * T * (NH + 2 * NKV) * HD);
}
static void emu_rope_backward(void *dqkv, int B, int T, int NH, int NKV, int HD, float theta, int pos0) {
    rope_backward_cpu(dqkv, B, T, NH, NKV, HD, theta, pos0);
    round_to(dqkv, (size_t)B * T * (NH + 2 * NKV) * HD);
}
static void emu_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV, int HD) {
    attention_forward_cpu(out, lse, qkv, B, T, NH, NKV, HD);
    round_to(out, (size_t)B * T * NH * HD);
}
static void emu_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                   int B, int T, int NH, int NKV, int HD, float rope_theta, void *work, size_t work_bytes) {
    attention_backward_cpu(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, 0, work, work_bytes);
    round_to(dqkv, (size_t)B * T * (NH + 2 * NKV) * HD);
    if (rope_theta > 0) emu_rope_backward(dqkv, B, T, NH, NKV, HD, rope_theta, 0);   /* rounded after each, as two ops were */
}
static void emu_attention_cached(void *out, void *kc, void *vc, const void *qkv, int B, int T, int pos0, int Tmax, int NH, int NKV, int HD) {
    attention_cached_cpu(out, kc, vc, qkv, B, T, pos0, Tmax, NH, NKV, HD);
    round_to(out, (size_t)B * T * NH * HD);
}
static void emu_attention_forward_at(void *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int q0, int Tk, int NH, int NKV,
                                     int HD) {
    attention_forward_at_cpu(out, lse, qkv, kv, B, Tq, q0, Tk, NH, NKV, HD);
    round_to(out, (size_t)B * Tq * NH * HD);
}
static void emu_attention_backward_at(void *dqkv, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                                      const float *lse, int B, int Tq, int q0, int Tk, int NH, int NKV, int HD) {
    attention_backward_at_cpu(dqkv, dkv, dout, qkv, kv, out, lse, B, Tq, q0, Tk, NH, NKV, HD);
    round_to(dqkv, (size_t)B * Tq * (NH + 2 * NKV) * HD);   /* its k, v parts: whatever they held, overwritten by the caller; dkv stays fp32 */
}
static void emu_swiglu_forward(void *out, const void *h13, int N, int F) {
    swiglu_forward_cpu(out, h13, N, F);
    round_to(out, (size_t)N * F);
}
static void emu_swiglu_backward(void *dh13, const void *dout, const void *h13, int N, int F) {
    swiglu_backward_cpu(dh13, dout, h13, N, F);
    round_to(dh13, (size_t)N * 2 * F);
}
/* precision=fp8's producers (kernels/fp8.h): the op, rounded to bf16 as it stores, then the emulated cast */
static void emu_rmsnorm_forward_fp8(void *out, float *rstd, const void *inp, const void *w, int N, int C, float eps, const Fp8Matmul *q) {
    emu_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    fp8_cast_in_place_cpu(out, (size_t)N * C, q->x_scale, FP8_E4M3, &q->amax[0]);
}
static void emu_swiglu_forward_fp8(void *hs, const void *h13, int N, int F, const Fp8Matmul *q) {
    emu_swiglu_forward(hs, h13, N, F);
    fp8_cast_in_place_cpu(hs, (size_t)N * F, q->x_scale, FP8_E4M3, &q->amax[0]);
}
static void emu_swiglu_backward_fp8(const void *dout, const void *h13, int N, int F, const Fp8Matmul *q) {
    float *dh13 = matmul_fp8_dout_copy_cpu(q->scratch);   /* (N,2F) */
    emu_swiglu_backward(dh13, dout, h13, N, F);
    fp8_cast_in_place_cpu(dh13, (size_t)N * 2 * F, q->dout_scale, FP8_E5M2, &q->amax[2]);
}
static void emu_cross_entropy_loss(float *losses, void *logits, const float *stats, int n_parts, const int *targets, int N, int V,
                                   int v0, int v_valid, float dloss, int ignore_index) {
    cross_entropy_loss_cpu(losses, logits, stats, n_parts, targets, N, V, v0, v_valid, dloss, ignore_index);
    if (dloss != 0) round_to(logits, (size_t)N * V);
}
static void emu_adamw_update(float *params, void *params_compute, const float *grads, float *m, float *v,
                             const AdamWSlice *slices, int n_slices, AdamWHyper h) {
    adamw_update_cpu(params, params_compute, grads, m, v, slices, n_slices, h);
    for (int s = 0; params_compute && s < n_slices; s++)
        round_to((float *)params_compute + slices[s].offset, slices[s].count);
}
static void emu_add(void *out, const void *a, const void *b, size_t n) {
    add_cpu(out, a, b, n);
    round_to(out, n);
}
/* the input holds act-dtype values; a sum of them (a reduction) is rounded back to the dtype first */
static void emu_cast_to_fp32(float *out, const void *inp, size_t n) {
    cast_to_fp32_cpu(out, inp, n);
    round_to(out, n);
}
static void emu_cast_from_fp32(void *out, const float *inp, size_t n) {
    cast_from_fp32_cpu(out, inp, n);
    round_to(out, n);
}

static Backend cpu_emulated;

const Backend *backend_cpu_emulated(DType act) {
    if (act == DTYPE_FP32) return &cpu;
    emu = act;
    cpu_emulated = cpu;
    cpu_emulated.name = "cpu";
    cpu_emulated.act = act;
    cpu_emulated.emulated = 1;
    cpu_emulated.rmsnorm_forward = emu_rmsnorm_forward;
    cpu_emulated.rmsnorm_backward = emu_rmsnorm_backward;
    cpu_emulated.matmul_forward = emu_matmul_forward;
    cpu_emulated.matmul_backward = emu_matmul_backward;
    cpu_emulated.matmul_fp8_forward = emu_matmul_fp8_forward;
    cpu_emulated.matmul_fp8_backward = emu_matmul_fp8_backward;
    cpu_emulated.rope_forward = emu_rope_forward;
    cpu_emulated.rope_backward = emu_rope_backward;
    cpu_emulated.attention_forward = emu_attention_forward;
    cpu_emulated.attention_backward = emu_attention_backward;
    cpu_emulated.attention_cached = emu_attention_cached;
    cpu_emulated.attention_forward_at = emu_attention_forward_at;
    cpu_emulated.attention_backward_at = emu_attention_backward_at;
    cpu_emulated.swiglu_forward = emu_swiglu_forward;
    cpu_emulated.swiglu_backward = emu_swiglu_backward;
    cpu_emulated.rmsnorm_forward_fp8 = act == DTYPE_BF16 ? emu_rmsnorm_forward_fp8 : NULL;
    cpu_emulated.swiglu_forward_fp8 = act == DTYPE_BF16 ? emu_swiglu_forward_fp8 : NULL;
    cpu_emulated.swiglu_backward_fp8 = act == DTYPE_BF16 ? emu_swiglu_backward_fp8 : NULL;
    cpu_emulated.cross_entropy_loss = emu_cross_entropy_loss;
    cpu_emulated.adamw_update = emu_adamw_update;
    cpu_emulated.add = emu_add;
    cpu_emulated.cast_from_fp32 = emu_cast_from_fp32;
    cpu_emulated.cast_to_fp32 = emu_cast_to_fp32;
    return &cpu_emulated;
}
