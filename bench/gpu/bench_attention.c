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
 * ping-pong between its consumer warpgroups (FA3_PINGPONG=0: without only) and with each stage's K given back
 * with its V (fa3_klate_fwd, the hand-back before 2026-12-07) and on either grid (fa3_persist_fwd: one block an SM walking the items, fa3_items_fwd: a block an item; fa3_fwd
 * takes the first up to T = 4096), of the fa3 backward (2.5x
 * the forward's count; dQ accumulated by the dk/dv kernel, at HD 128 fa3_bwd_s2 with two Q/dout stages and two
 * staged dQ tiles, at HD 64 fa3_bwd_lag with each item's dQ product issued an item late, and fa3_bwd_sweep: by a
 * second sweep; the model's
 * backward takes the accumulator where attention_backward_scratch counts it), and at HD = 64 of the wgmma and mma forwards and the wgmma backward.
 * With BENCH_CP=cp also one context-parallel rank's share (its two chunks at their offsets against the gathered
 * K/V: 1/cp of the causal count) by the offset form's fa3 and mma.sync kernels (cp_rows).
 * The idea and the timing are bench_cuda_ops.c's: 3 warm-ups, then the median
 * of 15 synchronized calls (BENCH_ONCE=1: one call a path, for compute-sanitizer). */
#include "../../kernels/backend.h"
#include "../../kernels/cuda/cuda_extras.h"
#include "../../common/util.h"
#include "../../common/options.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Backend *g;
typedef struct { void *out, *dout, *dqkv, *work; float *lse; const void *qkv; size_t work_bytes; int B, T, NH, NKV, HD, backward; } Call;
/* one cp rank's attention (kernels/attention.h's offset form): its two chunks of C queries, at positions 0 and
 * (2cp-1)C, against the gathered k|v of the whole sequence (B,T,2*NKV*HD), dK|dV added into dkv in fp32 */
typedef struct { const Call *c; const void *kv; float *dkv; int cp; } AtCall;

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void at_once(const AtCall *a) {
    const Call *c = a->c;
    int C = c->T / (2 * a->cp), QKV = (c->NH + 2 * c->NKV) * c->HD;
    for (int half = 0; half < 2; half++) {   /* chunk 0 and chunk 2cp-1: rank 0's (every rank has the same causal work) */
        int q0 = half ? (2 * a->cp - 1) * C : 0;
        size_t rows = (size_t)half * c->B * C, e = dtype_size(g->act);
        char *qkv = (char *)c->qkv + rows * QKV * e, *out = (char *)c->out + rows * c->NH * c->HD * e;
        char *dout = (char *)c->dout + rows * c->NH * c->HD * e, *dqkv = (char *)c->dqkv + rows * QKV * e;
        float *lse = c->lse + (size_t)half * c->B * c->NH * C;
        if (c->backward) g->attention_backward_at(dqkv, a->dkv, dout, qkv, a->kv, out, lse, c->B, C, q0, c->T, c->NH, c->NKV, c->HD);
        else g->attention_forward_at(out, lse, qkv, a->kv, c->B, C, q0, c->T, c->NH, c->NKV, c->HD);
    }
}
static void once(const Call *c) {
    if (c->backward)
        g->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->NH, c->NKV, c->HD, 10000.0f, c->work, c->work_bytes);
    else g->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HD);
}
static int once_only;   /* BENCH_ONCE=1: each path run once, untimed in effect (a tool's run: racecheck, memcheck) */
/* median ms of 15 calls after 3 warm-ups (the offset form's when at) */
static double median_ms(const Call *c, const AtCall *at) {
    double t[15];
    int warm = once_only ? 0 : 3, n = once_only ? 1 : 15;
    for (int w = 0; w < warm; w++) at ? at_once(at) : once(c);
    g->synchronize();
    for (int r = 0; r < n; r++) {
        double s = now_seconds();
        at ? at_once(at) : once(c);
        g->synchronize();
        t[r] = now_seconds() - s;
    }
    qsort(t, n, sizeof(double), cmp_d);
    return t[n / 2] * 1e3;
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
static void row_of(const char *name, Call *c, const AtCall *at, double flops, int first) {
    double ms = median_ms(c, at);
    printf("%s\"%s\": {\"ms\": %.3f, \"tflops\": %.1f}", first ? "" : ", ", name, ms, flops / (ms * 1e-3) / 1e12);
    fflush(stdout);
}
static void row(const char *name, Call *c, double flops, int first) { row_of(name, c, NULL, flops, first); }

/* BENCH_CP=cp: one cp rank's share (1/cp of the causal work) by the offset form's fa3 and mma.sync kernels, forward
 * and backward, rows cp_fa3_fwd, cp_fa3_bwd, cp_mma_fwd, cp_mma_bwd (mma at HD 64 only); f: the whole sequence's
 * forward count */
static void cp_rows(Call *c, int cp, double f) {
    if (c->T % (2 * cp)) { printf(", \"cp\": \"T %% %d != 0\"", 2 * cp); return; }
    size_t nkv = (size_t)c->B * c->T * 2 * c->NKV * c->HD;
    AtCall a = {c, rand_dev(nkv, 5), g->alloc(nkv * 4, "dkv (fp32, zeroed)"), cp};
    printf(", \"cp\": %d", cp);
    long fwd = cuda_attention_fa3_launches, bwd = cuda_attention_fa3_backward_launches;
    int was[3] = {cuda_attention_fa3_at, cuda_attention_fa3, cuda_attention_fa3_backward};
    cuda_attention_fa3_at = cuda_attention_fa3 = cuda_attention_fa3_backward = 1;
    row_of("cp_fa3_fwd", c, &a, f / cp, 0);
    c->backward = 1;
    row_of("cp_fa3_bwd", c, &a, 2.5 * f / cp, 0);
    c->backward = 0;
    if (cuda_attention_fa3_launches == fwd || cuda_attention_fa3_backward_launches == bwd) die("bench_attention: the fa3 offset form did not run");
    cuda_attention_fa3_at = 0;
    if (c->HD == 64) {
        long mma = cuda_attention_at_mma_launches;
        row_of("cp_mma_fwd", c, &a, f / cp, 0);
        c->backward = 1;
        row_of("cp_mma_bwd", c, &a, 2.5 * f / cp, 0);
        c->backward = 0;
        if (cuda_attention_at_mma_launches == mma) die("bench_attention: the mma.sync offset form did not run");
    }
    cuda_attention_fa3_at = was[0]; cuda_attention_fa3 = was[1]; cuda_attention_fa3_backward = was[2];
    g->free((void *)a.kv); g->free(a.dkv);
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
    const char *one = getenv("BENCH_ONCE");
    once_only = one && !strcmp(one, "1");
    const char *pp = getenv("FA3_PINGPONG");
    int pingpong = !pp || strcmp(pp, "0");   /* FA3_PINGPONG=0: the fa3 forward without ping-pong only */
    const char *cps = getenv("BENCH_CP");
    int cp = cps ? atoi(cps) : 0;   /* BENCH_CP=2, 4, ...: also one cp rank's share by the offset form (cp_rows) */
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
        cuda_attention_fa3_early_k = 0;   /* each stage's K given back with its V, as before 2026-12-07 */
        row("fa3_klate_fwd", &c, f, 0);
        cuda_attention_fa3_early_k = 1;
        cuda_attention_fa3_persistent = 1;   /* one block an SM, each walking items (the default up to T = 4096) */
        row("fa3_persist_fwd", &c, f, 0);
        cuda_attention_fa3_persistent = 2;   /* a block an item (the default past T = 4096) */
        row("fa3_items_fwd", &c, f, 0);
        cuda_attention_fa3_persistent = 0;
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
        } else {   /* the experiment: each item's dQ product issued an item late, so the consumers do not wait in step */
            cuda_attention_fa3_dq_lag = 1;
            row("fa3_bwd_lag", &c, 2.5 * f, 0);
            cuda_attention_fa3_dq_lag = 0;
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
        if (cp > 1) cp_rows(&c, cp, f);
        printf("}\n");
        g->free(c.out); g->free(c.dout); g->free(c.dqkv); g->free(c.lse); g->free((void *)c.qkv);
        if (c.work) g->free(c.work);
    }
    return 0;
}
