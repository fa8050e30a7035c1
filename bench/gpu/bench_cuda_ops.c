/* bench/gpu/bench_cuda_ops.c — times every CUDA op at the l124m shape (B=16,
 * T=1024, C=768, NH=12, NKV=4, HD=64, F=2048, V=32000, 12 layers) in the act
 * dtype given (bf16 by default), and adds them up into one training step of
 * kernels alone, the floor under the real step time.
 *
 * The idea: random inputs, 3 warm-ups, then the median of 15 synchronized runs
 * of each op; the step estimate is 12 x (one layer forward + backward) plus
 * embedding, final norm, LM head, loss and AdamW. Usage:
 *   build/gpu/bench_cuda_ops [fp32|bf16|fp16] [only the ops whose name holds this] [T]
 * T (default 1024) changes the sequence length at about 16k tokens a step (B = 16384 / T, at least 1): the
 * attention rows at long sequences, e.g. `bench_cuda_ops bf16 attention 8192`. */
#include "../../kernels/backend.h"
#include "../../kernels/cuda/cuda_extras.h"
#include "../../common/util.h"
#include "../../common/options.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Backend *g;
static double total_ms = 0;

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

#define REPS 15
/* times `call` (a statement), prints ms, and the achieved rate given flops or bytes; `times` counts it into the step */
static const char *only;   /* argv[2]: run only the ops whose name holds it */
#define BENCH(name, flops, bytes, times, call) do { \
    if (only && !strstr(name, only)) break; \
    for (int w_ = 0; w_ < 3; w_++) { call; } g->synchronize(); \
    double t_[REPS]; \
    for (int r_ = 0; r_ < REPS; r_++) { double s_ = now_seconds(); call; g->synchronize(); t_[r_] = now_seconds() - s_; } \
    qsort(t_, REPS, sizeof(double), cmp_d); \
    double ms_ = t_[REPS / 2] * 1e3; \
    total_ms += ms_ * (times); \
    printf("%-28s %9.3f ms  x%-3d", name, ms_, (int)(times)); \
    if ((flops) > 0) printf("  %7.1f TFLOP/s", (flops) / (ms_ * 1e-3) / 1e12); \
    if ((bytes) > 0) printf("  %7.0f GB/s", (bytes) / (ms_ * 1e-3) / 1e9); \
    printf("\n"); fflush(stdout); \
} while (0)

static void *rand_dev(size_t n, int fp32, float scale, const char *what) {
    /* fill with N(0, scale) in fp32 on the host, then cast on the device */
    float *h = mallocCheck(n * 4);
    Rng r;
    rng_seed(&r, n);
    for (size_t i = 0; i < n; i++) h[i] = rng_normal(&r) * scale;
    float *d32 = g->alloc(n * 4, what);
    g->upload(d32, h, n * 4);
    free(h);
    if (fp32) return d32;
    void *d = g->alloc(n * dtype_size(g->act), what);
    g->cast_from_fp32(d, d32, n);
    g->free(d32);
    return d;
}

int main(int argc, char **argv) {
    DType act = DTYPE_BF16;
    if (argc > 1) act = !strcmp(argv[1], "fp32") ? DTYPE_FP32 : !strcmp(argv[1], "fp16") ? DTYPE_FP16 : DTYPE_BF16;
    if (argc > 2 && *argv[2]) only = argv[2];
    double t = 1024;
    char err[512];
    if (argc > 3 && option_number("T", argv[3], 1, 1048576, 1, &t, err, sizeof err))
        die("bench_cuda_ops: %s\n  hint: build/gpu/bench_cuda_ops [fp32|bf16|fp16] [ops whose name holds this] [T]", err);
    const int T = (int)t;
    const int B = T >= 16384 ? 1 : 16384 / T;   /* about 16k tokens a step at any T */
    g = backend_cuda(act);
    const int C = 768, NH = 12, NKV = 4, HD = 64, F = 2048, V = 32000, L = 12;
    const int N = B * T, QKV = (NH + 2 * NKV) * HD;
    size_t es = dtype_size(act);
    printf("l124m op times, %s, B=%d T=%d C=%d NH=%d NKV=%d HD=%d F=%d V=%d, attention path: %s\n", dtype_name(act), B, T, C,
           NH, NKV, HD, F, V, cuda_attention_simple ? "simple" : cuda_attention_recompute ? "wgmma, recompute" : cuda_attention_wgmma ? "wgmma" : "mma");
    /* activations (act dtype) */
    void *x = rand_dev((size_t)N * C, 0, 1, "x (N,C)"), *y = rand_dev((size_t)N * C, 0, 1, "y (N,C)");
    void *dx = rand_dev((size_t)N * C, 0, 1, "dx (N,C)");
    void *qkv = rand_dev((size_t)N * QKV, 0, 1, "qkv (N,QKV)"), *dqkv = rand_dev((size_t)N * QKV, 0, 1, "dqkv (N,QKV)");
    void *att = rand_dev((size_t)N * C, 0, 1, "att (N,C)"), *datt = rand_dev((size_t)N * C, 0, 1, "datt (N,C)");
    void *h13 = rand_dev((size_t)N * 2 * F, 0, 1, "h13 (N,2F)"), *dh13 = rand_dev((size_t)N * 2 * F, 0, 1, "dh13 (N,2F)");
    void *work = dh13;   /* the attention backward's scratch: the model lends a block's h13, as many bytes as this */
    size_t work_bytes = (size_t)N * 2 * F * es;
    void *hf = rand_dev((size_t)N * F, 0, 1, "h (N,F)"), *dhf = rand_dev((size_t)N * F, 0, 1, "dh (N,F)");
    void *logits = rand_dev((size_t)N * V, 0, 2, "logits (N,V)");
    float *rstd = rand_dev(N, 1, 1, "rstd (N)"), *lse = g->alloc((size_t)B * NH * T * 4, "lse (B,NH,T)");
    float *losses = g->alloc((size_t)N * 4, "losses (N)");
    float *ce_stats = g->alloc(3 * (size_t)N * 4, "cross-entropy statistics (3,N)");
    /* weights */
    void *wqkv = rand_dev((size_t)QKV * C, 0, 0.02f, "wqkv"), *wo = rand_dev((size_t)C * C, 0, 0.02f, "wo");
    void *w13 = rand_dev((size_t)2 * F * C, 0, 0.02f, "w13"), *w2 = rand_dev((size_t)C * F, 0, 0.02f, "w2");
    void *wte = rand_dev((size_t)V * C, 0, 0.02f, "wte"), *lnw = rand_dev(C, 0, 1, "ln");
    float *dw = g->alloc((size_t)V * C * 4, "dweight (fp32)");
    int *ids = g->alloc((size_t)N * 4, "ids");
    {
        int *h = mallocCheck((size_t)N * 4);
        Rng r;
        rng_seed(&r, 7);
        for (int i = 0; i < N; i++) h[i] = (int)(rng_u64(&r) % 1000 < 50 ? rng_u64(&r) % 10 : rng_u64(&r) % V);   /* some frequent tokens */
        g->upload(ids, h, (size_t)N * 4);
        free(h);
    }
    double mm = 2.0 * N;   /* flops per (IC*OC) of a forward matmul */
    printf("-- per layer (x%d)\n", L);
    BENCH("rmsnorm_forward", 0, 3.0 * N * C * es, 2 * L, g->rmsnorm_forward(y, rstd, x, lnw, N, C, 1e-5f));
    BENCH("rmsnorm_backward", 0, 4.0 * N * C * es, 2 * L, g->rmsnorm_backward(dx, dw, y, x, lnw, rstd, N, C, 1));
    BENCH("matmul_fwd qkv", mm * C * QKV, 0, L, g->matmul_forward(qkv, x, wqkv, N, C, QKV, NULL));
    BENCH("matmul_bwd qkv", 2 * mm * C * QKV, 0, L, g->matmul_backward(dx, dw, dqkv, x, wqkv, N, C, QKV, 1));
    BENCH("rope_forward", 0, 2.0 * N * (NH + NKV) * HD * es, L, g->rope_forward(qkv, B, T, NH, NKV, HD, 10000.0f, 0));
    /* the wgmma backward rotates dq, dk itself (in the attention_backward row): no rope_backward kernel then */
    BENCH("rope_backward", 0, 2.0 * N * (NH + NKV) * HD * es, cuda_attention_wgmma ? 0 : L,
          g->rope_backward(dqkv, B, T, NH, NKV, HD, 10000.0f, 0));
    double attf = 4.0 * B * NH * (double)T * T * HD / 2;   /* causal: half the (T,T) square */
    BENCH("attention_forward", attf, 0, L, g->attention_forward(att, lse, qkv, B, T, NH, NKV, HD));
    BENCH("attention_backward", 2.5 * attf, 0, L, g->attention_backward(dqkv, datt, qkv, att, lse, B, T, NH, NKV, HD, 10000.0f, work, work_bytes));
    if (cuda_attention_wgmma && attention_wgmma_backward_stores(T, NH)) {   /* the other Hopper backward */
        cuda_attention_recompute = 1;
        BENCH("  (wgmma attention bwd, recompute)", 2.5 * attf, 0, 0, g->attention_backward(dqkv, datt, qkv, att, lse, B, T, NH, NKV, HD, 10000.0f, work, work_bytes));
        cuda_attention_recompute = 0;
    }
    if (cuda_attention_wgmma) {   /* the portable tensor-core kernels beside the Hopper ones */
        cuda_attention_wgmma = 0;
        BENCH("  (mma attention fwd)", attf, 0, 0, g->attention_forward(att, lse, qkv, B, T, NH, NKV, HD));
        BENCH("  (mma attention bwd)", 2.5 * attf, 0, 0, g->attention_backward(dqkv, datt, qkv, att, lse, B, T, NH, NKV, HD, 0, work, work_bytes));
        cuda_attention_wgmma = 1;
    }
    if (T <= 1024) {   /* the readable kernels: minutes at long T */
        BENCH("  (simple attention fwd)", attf, 0, 0, attention_forward_cuda_simple(att, lse, qkv, B, T, NH, NKV, HD));
        BENCH("  (simple attention bwd)", 2.5 * attf, 0, 0,
              attention_backward_cuda_simple(dqkv, datt, qkv, att, lse, B, T, NH, NKV, HD, 0, NULL, 0));
    }
    BENCH("matmul_fwd o (tp>1: + add)", mm * C * C, 0, 0, g->matmul_forward(y, att, wo, N, C, C, NULL));
    BENCH("matmul_fwd o + residual", mm * C * C, 0, L, g->matmul_forward(y, att, wo, N, C, C, x));
    BENCH("matmul_bwd o", 2 * mm * C * C, 0, L, g->matmul_backward(datt, dw, dx, att, wo, N, C, C, 1));
    BENCH("add (residual, tp>1 only)", 0, 3.0 * N * C * es, 0, g->add(y, x, y, (size_t)N * C));
    BENCH("matmul_fwd gate|up", mm * C * 2 * F, 0, L, g->matmul_forward(h13, x, w13, N, C, 2 * F, NULL));
    BENCH("matmul_bwd gate|up", 2 * mm * C * 2 * F, 0, L, g->matmul_backward(dx, dw, dh13, x, w13, N, C, 2 * F, 1));
    BENCH("swiglu_forward", 0, 3.0 * N * F * es, L, g->swiglu_forward(hf, h13, N, F));
    BENCH("swiglu_backward", 0, 5.0 * N * F * es, L, g->swiglu_backward(dh13, dhf, h13, N, F));
    BENCH("matmul_fwd down (tp>1: + add)", mm * F * C, 0, 0, g->matmul_forward(y, hf, w2, N, F, C, NULL));
    BENCH("matmul_fwd down + residual", mm * F * C, 0, L, g->matmul_forward(y, hf, w2, N, F, C, x));
    BENCH("matmul_bwd down", 2 * mm * F * C, 0, L, g->matmul_backward(dhf, dw, dx, hf, w2, N, F, C, 1));
    if (act == DTYPE_BF16 && !g->fp8_unsupported()) {   /* precision=fp8's block matmuls and its producers (not in the sum) */
        printf("-- precision=fp8 (x%d each; not in the step below)\n", L);
        float *amax = g->alloc(3 * 4, "amax");
        void *scr = g->alloc(matmul_fp8_scratch_bytes(1, N, C, 2 * F), "fp8 scratch"), *form = g->alloc((size_t)N * F * es, "hs cast form");
        void *nform = g->alloc((size_t)N * C * es, "norm cast form");
        Fp8Matmul q = {1.0f / 64, 1.0f, 1.0f / 64, amax, scr, 0, 0}, qx = q, qd = q;
        qx.x_cast = 1; qd.dout_cast = 1;
        BENCH("rmsnorm_forward_fp8", 0, 2.0 * N * C * es + 2.0 * N * C, 0, g->rmsnorm_forward_fp8(nform, rstd, x, lnw, N, C, 1e-5f, &q));
        BENCH("fp8 matmul_fwd qkv", mm * C * QKV, 0, 0, g->matmul_fp8_forward(qkv, x, wqkv, N, C, QKV, NULL, &q));
        BENCH("fp8 matmul_fwd qkv, x cast", mm * C * QKV, 0, 0, g->matmul_fp8_forward(qkv, nform, wqkv, N, C, QKV, NULL, &qx));
        BENCH("fp8 matmul_bwd qkv", 2 * mm * C * QKV, 0, 0, g->matmul_fp8_backward(dx, dw, dqkv, x, wqkv, N, C, QKV, 1, &q));
        BENCH("fp8 matmul_bwd qkv, x cast", 2 * mm * C * QKV, 0, 0, g->matmul_fp8_backward(dx, dw, dqkv, nform, wqkv, N, C, QKV, 1, &qx));
        BENCH("fp8 matmul_fwd o + residual", mm * C * C, 0, 0, g->matmul_fp8_forward(y, att, wo, N, C, C, x, &q));
        BENCH("fp8 matmul_bwd o", 2 * mm * C * C, 0, 0, g->matmul_fp8_backward(datt, dw, dx, att, wo, N, C, C, 1, &q));
        BENCH("fp8 matmul_fwd gate|up", mm * C * 2 * F, 0, 0, g->matmul_fp8_forward(h13, x, w13, N, C, 2 * F, NULL, &q));
        BENCH("fp8 matmul_fwd gate|up, x cast", mm * C * 2 * F, 0, 0, g->matmul_fp8_forward(h13, nform, w13, N, C, 2 * F, NULL, &qx));
        BENCH("fp8 matmul_bwd gate|up", 2 * mm * C * 2 * F, 0, 0, g->matmul_fp8_backward(dx, dw, dh13, x, w13, N, C, 2 * F, 1, &q));
        BENCH("fp8 matmul_bwd gate|up, dout cast", 2 * mm * C * 2 * F, 0, 0, g->matmul_fp8_backward(dx, dw, dh13, x, w13, N, C, 2 * F, 1, &qd));
        BENCH("fp8 matmul_fwd down + residual", mm * F * C, 0, 0, g->matmul_fp8_forward(y, hf, w2, N, F, C, x, &q));
        BENCH("fp8 matmul_fwd down, x cast", mm * F * C, 0, 0, g->matmul_fp8_forward(y, form, w2, N, F, C, x, &qx));
        BENCH("fp8 matmul_bwd down", 2 * mm * F * C, 0, 0, g->matmul_fp8_backward(dhf, dw, dx, hf, w2, N, F, C, 1, &q));
        BENCH("fp8 matmul_bwd down, x cast", 2 * mm * F * C, 0, 0, g->matmul_fp8_backward(dhf, dw, dx, form, w2, N, F, C, 1, &qx));
        BENCH("swiglu_forward_fp8", 0, 3.0 * N * F * es / 2 + 2.0 * N * F, 0, g->swiglu_forward_fp8(form, h13, N, F, &q));
        BENCH("swiglu_backward_fp8", 0, 3.0 * N * F * es + 4.0 * N * F, 0, g->swiglu_backward_fp8(dhf, h13, N, F, &q));
        g->free(amax); g->free(scr); g->free(form); g->free(nform);
    }
    printf("-- once per step\n");
    BENCH("embedding_forward", 0, 2.0 * N * C * es, 1, g->embedding_forward(x, ids, wte, N, C, 0, V));
    BENCH("embedding_backward", 0, (double)N * C * es + 8.0 * N * C, 1, g->embedding_backward(dw, x, ids, N, C, 0, V));
    BENCH("matmul_fwd lm head", mm * C * V, 0, 1, g->matmul_forward(logits, x, wte, N, C, V, NULL));
    BENCH("cross_entropy_stats (tp>1)", 0, 1.0 * N * V * es, 0, g->cross_entropy_stats(ce_stats, logits, ids, N, V, 0, V));
    BENCH("cross_entropy_loss (tp>1)", 0, 2.0 * N * V * es, 0, g->cross_entropy_loss(losses, logits, ce_stats, 1, ids, N, V, 0, V, 1.0f / N, -100));
    BENCH("cross_entropy (tp=1)", 0, 3.0 * N * V * es, 1, g->cross_entropy_loss(losses, logits, NULL, 1, ids, N, V, 0, V, 1.0f / N, -100));
    BENCH("matmul_bwd lm head", 2 * mm * C * V, 0, 1, g->matmul_backward(x, dw, logits, x, wte, N, C, V, 1));
    g->free(logits); g->free(h13); g->free(dh13);
    size_t P = (size_t)2 * V * C + (size_t)L * ((size_t)QKV * C + C * C + 2 * F * C + F * C + 2 * C) + C;
    float *p = rand_dev(P, 1, 0.02f, "params"), *gr = rand_dev(P, 1, 0.001f, "grads");
    float *m = g->alloc(P * 4, "m"), *v = g->alloc(P * 4, "v");
    void *pc = g->alloc(P * es, "params (act)");
    AdamWSlice sl[2] = {{0, P / 2, 0.1f}, {P / 2, P - P / 2, 0.0f}};
    AdamWHyper hy = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 1};
    BENCH("adamw_update (P params)", 0, P * (4.0 * 7 + es), 1, g->adamw_update(p, pc, gr, m, v, sl, 2, hy));
    BENCH("sum_squares (P)", 0, P * 4.0, 1, (void)g->sum_squares(gr, P));
    BENCH("cast_from_fp32 (P)", 0, P * (4.0 + es), 0, g->cast_from_fp32(pc, p, P));
    printf("params P = %.1fM\n", P / 1e6);
    printf("kernels-only step (one micro-batch of %d tokens): %.2f ms -> %.0f tokens/s\n", N, total_ms, N / (total_ms * 1e-3));
    return 0;
}
