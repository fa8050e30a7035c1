/* bench/gpu/bench_attention.c — the attention forward kernels alone, each path
 * at each sequence length, beside what bench/gpu/sdpa_time.py measures for
 * PyTorch's SDPA (cuDNN) with the same heads: causal, bf16, about 16k tokens a
 * call (B = 16384 / T, at least 1).
 *
 *   build/gpu/bench_attention HD [T ...]     (default T: 2048 4096 8192 16384 32768)
 *
 * HD = 64 runs l124m's heads (12 query, 4 kv), HD = 128 16 query and 4 kv heads
 * (sdpa_time.py --hd 128 takes the same). Per T one JSON line: ms and TFLOP/s
 * (the causal count 4*B*NH*T*T*HD/2) of the fa3 forward with and without
 * ping-pong between its consumer warpgroups (FA3_PINGPONG=0: without only), of the fa3 backward (2.5x
 * the forward's count; dQ accumulated by the dk/dv kernel, at HD 128 fa3_bwd_s2 with two Q/dout stages and two
 * staged dQ tiles, and fa3_bwd_sweep: by a second sweep; the model's
 * backward takes whichever attention_dq_accumulates says), and at HD = 64 of the wgmma and mma forwards and the wgmma backward.
 * The idea and the timing are bench_cuda_ops.c's: 3 warm-ups, then the median
 * of 15 synchronized calls. */
#include "../../kernels/backend.h"
#include "../../kernels/cuda/cuda_extras.h"
#include "../../common/util.h"
#include "../../common/options.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Backend *g;
typedef struct { void *out, *dout, *dqkv, *work; float *lse; const void *qkv; size_t work_bytes; int B, T, NH, NKV, HD, backward; } Call;

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void once(const Call *c) {
    if (c->backward)
        g->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->NH, c->NKV, c->HD, 10000.0f, c->work, c->work_bytes);
    else g->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HD);
}
/* median ms of 15 calls after 3 warm-ups */
static double median_ms(const Call *c) {
    double t[15];
    for (int w = 0; w < 3; w++) once(c);
    g->synchronize();
    for (int r = 0; r < 15; r++) {
        double s = now_seconds();
        once(c);
        g->synchronize();
        t[r] = now_seconds() - s;
    }
    qsort(t, 15, sizeof(double), cmp_d);
    return t[7] * 1e3;
}
static void *rand_dev(size_t n, unsigned seed) {
    float *h = mallocCheck(n * 4);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) h[i] = rng_normal(&r);
    float *d32 = g->alloc(n * 4, "bench input (fp32)");
    g->upload(d32, h, n * 4);
    free(h);
    void *d = g->alloc(n * dtype_size(g->act), "bench input");
    g->cast_from_fp32(d, d32, n);
    g->free(d32);
    return d;
}
/* prints `"name": {"ms": .., "tflops": ..}` for the call as the switches stand */
static void row(const char *name, Call *c, double flops, int first) {
    double ms = median_ms(c);
    printf("%s\"%s\": {\"ms\": %.3f, \"tflops\": %.1f}", first ? "" : ", ", name, ms, flops / (ms * 1e-3) / 1e12);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *hint = "  hint: build/gpu/bench_attention HD(64|128) [T ...]";
    double v;
    char err[512];
    if (argc < 2 || option_number("HD", argv[1], 64, 128, 1, &v, err, sizeof err)) die("bench_attention: %s\n%s", argc < 2 ? "no HD" : err, hint);
    int HD = (int)v, NH = HD == 64 ? 12 : 16, NKV = 4;
    if (HD != 64 && HD != 128) die("bench_attention: HD is 64 or 128 (got %d)\n%s", HD, hint);
    int Ts[16], nT = 0;
    for (int i = 2; i < argc && nT < 16; i++) {
        if (option_number("T", argv[i], 1, 1048576, 1, &v, err, sizeof err)) die("bench_attention: %s\n%s", err, hint);
        Ts[nT++] = (int)v;
    }
    if (!nT) { int d[5] = {2048, 4096, 8192, 16384, 32768}; memcpy(Ts, d, sizeof d); nT = 5; }
    const char *pp = getenv("FA3_PINGPONG");
    int pingpong = !pp || strcmp(pp, "0");   /* FA3_PINGPONG=0: the fa3 forward without ping-pong only */
    g = backend_cuda(DTYPE_BF16);
    if (!cuda_attention_wgmma) die("bench_attention: this GPU or build runs no Hopper kernels; the fa3 forward needs them");
    for (int i = 0; i < nT; i++) {
        int T = Ts[i], B = T >= 16384 ? 1 : 16384 / T;
        size_t N = (size_t)B * T, nq = N * (NH + 2 * NKV) * HD, no = N * NH * HD;
        Call c = {rand_dev(no, 1), rand_dev(no, 2), rand_dev(nq, 3), NULL, g->alloc((size_t)B * NH * T * 4, "lse"), rand_dev(nq, 4), 0,
                  B, T, NH, NKV, HD, 0};
        c.work_bytes = attention_backward_scratch(B, T, NH, HD, DTYPE_BF16).ds_tiles;
        if (c.work_bytes) c.work = g->alloc(c.work_bytes, "dS tiles");
        double f = 4.0 * B * NH * (double)T * T * HD / 2;
        printf("{\"T\": %d, \"B\": %d, \"NH\": %d, \"NKV\": %d, \"HD\": %d, ", T, B, NH, NKV, HD);
        int fa3 = cuda_attention_fa3;
        cuda_attention_fa3 = 1;
        long before = cuda_attention_fa3_launches;
        if (pingpong) row("fa3_fwd", &c, f, 1);
        cuda_attention_fa3_pingpong = 0;
        row("fa3_nopp_fwd", &c, f, !pingpong);
        cuda_attention_fa3_pingpong = 1;
        if (cuda_attention_fa3_launches == before) die("bench_attention: the fa3 forward did not run (HD=%d)", HD);
        long bbefore = cuda_attention_fa3_backward_launches;
        int fa3b = cuda_attention_fa3_backward;   /* (2 by default: where wgmma's would store no dS; the rows below force each) */
        cuda_attention_fa3_backward = 1;
        c.backward = 1;
        cuda_attention_fa3_dq = 1;   /* dQ added up by the dk/dv kernel */
        row("fa3_bwd", &c, 2.5 * f, 0);
        if (HD == 128) {   /* the experiment: two Q/dout stages and two staged dQ tiles instead of three and one */
            cuda_attention_fa3_dq_stages128 = 2;
            row("fa3_bwd_s2", &c, 2.5 * f, 0);
            cuda_attention_fa3_dq_stages128 = 1;
        }
        cuda_attention_fa3_dq = 2;   /* dQ by the second sweep, as before the accumulator */
        row("fa3_bwd_sweep", &c, 2.5 * f, 0);
        cuda_attention_fa3_dq = 0;
        c.backward = 0;
        cuda_attention_fa3_backward = 0;
        if (cuda_attention_fa3_backward_launches == bbefore) die("bench_attention: the fa3 backward did not run (HD=%d)", HD);
        cuda_attention_fa3 = 0;
        if (HD == 64) {
            row("wgmma_fwd", &c, f, 0);
            c.backward = 1;
            row("wgmma_bwd", &c, 2.5 * f, 0);
            c.backward = 0;
            cuda_attention_wgmma = 0;
            row("mma_fwd", &c, f, 0);
            cuda_attention_wgmma = 1;
        }
        cuda_attention_fa3 = fa3;
        cuda_attention_fa3_backward = fa3b;
        printf("}\n");
        g->free(c.out); g->free(c.dout); g->free(c.dqkv); g->free(c.lse); g->free((void *)c.qkv);
        if (c.work) g->free(c.work);
    }
    return 0;
}
