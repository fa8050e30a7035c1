/* tests/gpu/test_cuda_ops.c — every CUDA op against the fp32 CPU reference, in
 * fp32, bf16 and fp16, on random shapes including odd ones.
 *
 * The idea: draw random fp32 inputs, round them to the act dtype, and give the
 * same values to both backends (the CPU one in fp32). Outputs are poisoned
 * (NaN bytes) before each GPU run, so an element the kernel forgot to write
 * fails; accumulating outputs (+=) start from the same random values on both.
 * The error is the norm ratio |gpu - cpu| / |cpu|; NaN never passes.
 * Tolerances: fp32 1e-5 (exact fp32 everywhere, matmuls included; with
 * LLM3D_TF32=1 matmuls get 2e-3: TF32 keeps 10 mantissa bits, ~5e-4 per
 * product), bf16 and fp16 1e-2 (the GPU rounds outputs to 8 or 11 bits).
 * precision=fp8's matmuls: test_cuda_fp8.c. The shared harness: ops_check.h.
 * Run on a GPU machine: tests/gpu/run.sh. */
#include "ops_check.h"


/* ---- the ops ---- */
static void test_matmul(int N, int IC, int OC) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d IC=%d OC=%d", N, IC, OC);
    float *x = rand_act((size_t)N * IC, 1), *w = rand_act((size_t)OC * IC, 0.1f), *dy = rand_act((size_t)N * OC, 1);
    float *dw0 = rand_act((size_t)OC * IC, 1);
    float *out = mallocCheck((size_t)N * OC * 4), *dx = mallocCheck((size_t)N * IC * 4), *dw = copy_f(dw0, (size_t)OC * IC);
    cpu->matmul_forward(out, x, w, N, IC, OC, NULL);
    cpu->matmul_backward(dx, dw, dy, x, w, N, IC, OC, 1);
    void *gx = up_act(x, (size_t)N * IC), *gw = up_act(w, (size_t)OC * IC), *gdy = up_act(dy, (size_t)N * OC);
    void *gout = gpu->alloc((size_t)N * OC * dtype_size(act), "t"), *gdx = gpu->alloc((size_t)N * IC * dtype_size(act), "t");
    float *gdw = up_f32(dw0, (size_t)OC * IC);
    poison(gout, (size_t)N * OC * dtype_size(act));
    poison(gdx, (size_t)N * IC * dtype_size(act));
    gpu->matmul_forward(gout, gx, gw, N, IC, OC, NULL);
    gpu->matmul_backward(gdx, gdw, gdy, gx, gw, N, IC, OC, 1);
    float *h = mallocCheck(((size_t)N * OC + (size_t)N * IC + (size_t)OC * IC) * 4);
    down_act(h, gout, (size_t)N * OC);
    compare("matmul_forward", h, out, (size_t)N * OC, tol_matmul, shape);
    /* a residual in the epilogue (dy stands in for it) */
    cpu->matmul_forward(out, x, w, N, IC, OC, dy);
    poison(gout, (size_t)N * OC * dtype_size(act));
    gpu->matmul_forward(gout, gx, gw, N, IC, OC, gdy);
    down_act(h, gout, (size_t)N * OC);
    compare("matmul_forward + residual", h, out, (size_t)N * OC, tol_matmul, shape);
    down_act(h, gdx, (size_t)N * IC);
    compare("matmul_backward dinp", h, dx, (size_t)N * IC, tol_matmul, shape);
    gpu->download(h, gdw, (size_t)OC * IC * 4);
    compare("matmul_backward dweight", h, dw, (size_t)OC * IC, tol_matmul, shape);
    /* dinp = NULL must skip dinp and still accumulate dweight */
    gpu->matmul_backward(NULL, gdw, gdy, gx, gw, N, IC, OC, 1);
    cpu->matmul_backward(NULL, dw, dy, x, w, N, IC, OC, 1);
    gpu->download(h, gdw, (size_t)OC * IC * 4);
    compare("matmul_backward dw twice", h, dw, (size_t)OC * IC, tol_matmul, shape);
    /* a step's first write (accumulate = 0): dweight is the product alone, whatever was there (NaN here) */
    poison(gdw, (size_t)OC * IC * 4);
    gpu->matmul_backward(NULL, gdw, gdy, gx, gw, N, IC, OC, 0);
    cpu->matmul_backward(NULL, dw, dy, x, w, N, IC, OC, 0);
    gpu->download(h, gdw, (size_t)OC * IC * 4);
    compare("matmul_backward dw first write", h, dw, (size_t)OC * IC, tol_matmul, shape);
    gpu->free(gx); gpu->free(gw); gpu->free(gdy); gpu->free(gout); gpu->free(gdx); gpu->free(gdw);
    free(x); free(w); free(dy); free(dw0); free(out); free(dx); free(dw); free(h);
}


/* The table holds block `part` of `parts` blocks of a V-row vocabulary (vocab-parallel): ids outside it give zero rows, no gradient. */
static void test_embedding(int N, int C, int V, int parts, int part) {
    char shape[64];
    int Vb = (V + parts - 1) / parts, v0 = part * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d block %d/%d", N, C, V, part, parts);
    int *ids = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) ids[n] = (int)(rng_u64(&rng) % (uint64_t)(n % 3 ? V : 3));   /* many repeats */
    float *wte = rand_act((size_t)Vb * C, 1), *dy = rand_act((size_t)N * C, 1), *dw0 = rand_act((size_t)Vb * C, 1);
    float *out = mallocCheck((size_t)N * C * 4), *dw = copy_f(dw0, (size_t)Vb * C);
    cpu->embedding_forward(out, ids, wte, N, C, v0, valid);
    cpu->embedding_backward(dw, dy, ids, N, C, v0, valid);
    int *gids = gpu->alloc(N * sizeof(int), "t");
    gpu->upload(gids, ids, N * sizeof(int));
    void *gwte = up_act(wte, (size_t)Vb * C), *gdy = up_act(dy, (size_t)N * C), *gout = gpu->alloc((size_t)N * C * dtype_size(act), "t");
    float *gdw = up_f32(dw0, (size_t)Vb * C);
    poison(gout, (size_t)N * C * dtype_size(act));
    gpu->embedding_forward(gout, gids, gwte, N, C, v0, valid);
    gpu->embedding_backward(gdw, gdy, gids, N, C, v0, valid);
    float *h = mallocCheck(((size_t)N + Vb) * C * 4);
    down_act(h, gout, (size_t)N * C);
    compare("embedding_forward", h, out, (size_t)N * C, 0, shape);
    gpu->download(h, gdw, (size_t)Vb * C * 4);
    compare("embedding_backward", h, dw, (size_t)Vb * C, act == DTYPE_FP32 ? 1e-6 : tol_act, shape);
    /* determinism: the same backward twice gives the same bits */
    float *h2 = mallocCheck((size_t)Vb * C * 4);
    gpu->upload(gdw, dw0, (size_t)Vb * C * 4);
    gpu->embedding_backward(gdw, gdy, gids, N, C, v0, valid);
    gpu->download(h2, gdw, (size_t)Vb * C * 4);
    CHECK(memcmp(h, h2, (size_t)Vb * C * 4) == 0, "embedding_backward is not deterministic (%s)", shape);
    gpu->free(gids); gpu->free(gwte); gpu->free(gdy); gpu->free(gout); gpu->free(gdw);
    free(ids); free(wte); free(dy); free(dw0); free(out); free(dw); free(h); free(h2);
}

static void test_rmsnorm(int N, int C) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    float *x = rand_act((size_t)N * C, 2), *w = rand_act(C, 1), *dy = rand_act((size_t)N * C, 1), *dx0 = rand_act((size_t)N * C, 1);
    float *dw0 = rand_act(C, 1);
    float *out = mallocCheck((size_t)N * C * 4), *rstd = mallocCheck(N * 4), *dx = copy_f(dx0, (size_t)N * C), *dw = copy_f(dw0, C);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    cpu->rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C, 1);
    void *gx = up_act(x, (size_t)N * C), *gw = up_act(w, C), *gdy = up_act(dy, (size_t)N * C), *gdx = up_act(dx0, (size_t)N * C);
    void *gout = gpu->alloc((size_t)N * C * dtype_size(act), "t");
    float *grstd = gpu->alloc(N * 4, "t"), *gdw = up_f32(dw0, C), *grstd_cpu = up_f32(rstd, N);
    poison(gout, (size_t)N * C * dtype_size(act));
    poison(grstd, N * 4);
    gpu->rmsnorm_forward(gout, grstd, gx, gw, N, C, 1e-5f);
    gpu->rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd_cpu, N, C, 1);
    float *h = mallocCheck((size_t)N * C * 4);
    down_act(h, gout, (size_t)N * C);
    compare("rmsnorm_forward", h, out, (size_t)N * C, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->download(h, grstd, N * 4);
    compare("rmsnorm_forward rstd", h, rstd, N, 1e-5, shape);
    down_act(h, gdx, (size_t)N * C);
    compare("rmsnorm_backward dinp (+=)", h, dx, (size_t)N * C, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->download(h, gdw, C * 4);
    compare("rmsnorm_backward dweight", h, dw, C, 1e-5, shape);
    /* a step's first write of dweight (accumulate = 0) over NaN; dinp still adds */
    poison(gdw, C * 4);
    gpu->rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd_cpu, N, C, 0);
    cpu->rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C, 0);
    gpu->download(h, gdw, C * 4);
    compare("rmsnorm_backward dweight first write", h, dw, C, 1e-5, shape);
    gpu->free(gx); gpu->free(gw); gpu->free(gdy); gpu->free(gdx); gpu->free(gout); gpu->free(grstd); gpu->free(gdw); gpu->free(grstd_cpu);
    free(x); free(w); free(dy); free(dx0); free(dw0); free(out); free(rstd); free(dx); free(dw); free(h);
}

static void test_rope(int B, int T, int NH, int NKV, int HD, int pos0) {
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HD=%d p0=%d", B, T, NH, NKV, HD, pos0);
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    float *x = rand_act(n, 1), *f = copy_f(x, n), *b = copy_f(x, n);
    cpu->rope_forward(f, B, T, NH, NKV, HD, 10000.0f, pos0);
    cpu->rope_backward(b, B, T, NH, NKV, HD, 10000.0f, pos0);
    void *gf = up_act(x, n), *gb = up_act(x, n);
    gpu->rope_forward(gf, B, T, NH, NKV, HD, 10000.0f, pos0);
    gpu->rope_backward(gb, B, T, NH, NKV, HD, 10000.0f, pos0);
    float *h = mallocCheck(n * 4);
    down_act(h, gf, n);
    compare("rope_forward", h, f, n, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    down_act(h, gb, n);
    compare("rope_backward", h, b, n, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->free(gf); gpu->free(gb);
    free(x); free(f); free(b); free(h);
}

/* the warp-specialized Hopper kernels (attention_fa3.cu, attention_fa3_backward.cu), forward and backward, alone:
 * out, lse and dqkv against the CPU (RoPE's backward folded in at even T), the launches counted (the proof they ran,
 * not a fallback), a second forward and backward bitwise the same, and the forward without ping-pong between its
 * consumers, with each stage's K given back with its V, or on a persistent grid (a block an SM walking the items),
 * bitwise the same too (the turns, the hand-back and the grid change when products are issued and tiles copied, not
 * what) */
static void test_attention_fa3(int B, int T, int NH, int NKV, int HD) {
    char shape[96];
    float theta = T % 2 ? 0.0f : 10000.0f;
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HD=%d%s", B, T, NH, NKV, HD, theta > 0 ? " +rope" : "");
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T;
    size_t bytes = no * dtype_size(act) + nl * 4, gbytes = nq * dtype_size(act);   /* out, then lse; dqkv */
    float *qkv = rand_act(nq, 1.5f), *dy = rand_act(no, 1), *out = mallocCheck(no * 4), *lse = mallocCheck(nl * 4);
    float *dqkv = mallocCheck(nq * 4), *h = mallocCheck((nq + no + nl) * 4);
    char *first = mallocCheck(bytes + gbytes), *other = mallocCheck(bytes + gbytes);
    cpu->attention_forward(out, lse, qkv, B, T, NH, NKV, HD);
    void *gqkv = up_act(qkv, nq), *gout = gpu->alloc(bytes, "t"), *gdy = up_act(dy, no), *gd = gpu->alloc(gbytes, "t");
    float *glse = (float *)((char *)gout + no * dtype_size(act));
    long launches = cuda_attention_fa3_launches, blaunches = cuda_attention_fa3_backward_launches, grid_runs[6];
    int was = cuda_attention_fa3, wasb = cuda_attention_fa3_backward, same = 1, bsame = 1;
    cuda_attention_fa3 = 1;
    for (int run = 0; run < 6; run++) {   /* ping-pong, again, without, K given back with V, a persistent grid, a block an item */
        cuda_attention_fa3_pingpong = run != 2;
        cuda_attention_fa3_early_k = run != 3;
        cuda_attention_fa3_persistent = run == 4 ? 1 : run == 5 ? 2 : 0;
        poison(gout, bytes);
        long persist_before = cuda_attention_fa3_persistent_launches;
        gpu->attention_forward(gout, glse, gqkv, B, T, NH, NKV, HD);
        grid_runs[run] = cuda_attention_fa3_persistent_launches - persist_before;
        gpu->download(run ? other : first, gout, bytes);
        if (run) same &= memcmp(first, other, bytes) == 0;
        if (run == 0) {
            down_act(h, gout, no);
            if (!compare("attention_fwd fa3", h, out, no, tol_act, shape))
                explain_rows(h, out, B, T, NH, HD, 1, (const char *const[]){"out"}, (const int[]){0}, tol_act);
            gpu->download(h, glse, nl * 4);
            compare("attention_fwd lse fa3", h, lse, nl, 1e-3, shape);
        }
    }
    /* the backward from the CPU's out (rounded as the model stores it) and lse, twice */
    for (size_t i = 0; i < no; i++) out[i] = round_act(out[i]);
    cpu->attention_backward(dqkv, dy, qkv, out, lse, B, T, NH, NKV, HD, theta, NULL, 0);
    void *gout_cpu = up_act(out, no);
    float *glse_cpu = up_f32(lse, nl);
    cuda_attention_fa3_backward = 1;
    long fused = cuda_attention_fa3_dq_fused_launches;
    /* dQ accumulated in key-block order twice, then by the second sweep; once more accumulated: at HD 128 with two
     * Q/dout stages and two staged dQ tiles, at HD 64 with each item's dQ product issued an item late (the same sums
     * in the same order: the same bits) */
    int runs = 4;
    for (int run = 0; run < runs; run++) {
        cuda_attention_fa3_dq = run == 2 ? 2 : 1;
        cuda_attention_fa3_dq_stages128 = run == 3 ? 2 : 1;
        cuda_attention_fa3_dq_lag = run == 3;
        poison(gd, gbytes);
        gpu->attention_backward(gd, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, NULL, 0);
        gpu->download((run ? other : first) + bytes, gd, gbytes);
        if (run == 1 || run == 3) bsame &= memcmp(first + bytes, other + bytes, gbytes) == 0;
        if (run == 0 || run == 2) {
            down_act(h, gd, nq);
            if (!compare(run ? "attention_bwd fa3 (dq sweep)" : "attention_bwd fa3", h, dqkv, nq, tol_act, shape))
                explain_rows(h, dqkv, B, T, NH + 2 * NKV, HD, 3, (const char *const[]){"dq", "dk", "dv"}, (const int[]){0, NH, NH + NKV},
                             tol_act);
        }
    }
    cuda_attention_fa3_dq = 0;
    cuda_attention_fa3_dq_stages128 = 1;
    cuda_attention_fa3_dq_lag = 0;
    int fran = cuda_attention_fa3_dq_fused_launches == fused + runs - 1;
    cuda_attention_fa3 = was;
    cuda_attention_fa3_backward = wasb;
    cuda_attention_fa3_pingpong = 1;
    cuda_attention_fa3_early_k = 1;
    cuda_attention_fa3_persistent = 0;
    int ran = cuda_attention_fa3_launches == launches + 6, bran = cuda_attention_fa3_backward_launches == blaunches + runs;
    printf("%s %-5s attention_fwd fa3 ran the warp-specialized kernel %s\n", ran ? "ok  " : "FAIL", dtype_name(act), shape);
    CHECK(ran, "%s attention_fwd fa3 %s: the fa3 kernel did not run", dtype_name(act), shape);
    int grids = grid_runs[4] == 1 && grid_runs[5] == 0;   /* the grid each forced run asked for is the one that ran */
    printf("%s %-5s attention_fwd fa3 ran on the persistent grid when asked, a block an item when asked %s\n", grids ? "ok  " : "FAIL",
           dtype_name(act), shape);
    CHECK(grids, "%s attention_fwd fa3 %s: persistent launches %ld (asked), %ld (not asked)", dtype_name(act), shape, grid_runs[4],
          grid_runs[5]);
    printf("%s %-5s attention_fwd fa3 deterministic, with and without ping-pong, K given back early or with V, persistent grid or a block an item %s\n",
           same ? "ok  " : "FAIL", dtype_name(act), shape);
    CHECK(same, "%s attention_fwd fa3 %s: a second forward (or one without ping-pong, with K given back late, on a persistent grid or a block an item) "
          "gave different bits", dtype_name(act), shape);
    printf("%s %-5s attention_bwd fa3 ran the warp-specialized kernels %s\n", bran ? "ok  " : "FAIL", dtype_name(act), shape);
    CHECK(bran, "%s attention_bwd fa3 %s: the fa3 backward did not run", dtype_name(act), shape);
    printf("%s %-5s attention_bwd fa3 accumulated dQ in the dk/dv kernel (%d times), then swept %s\n", fran ? "ok  " : "FAIL", dtype_name(act),
           runs - 1, shape);
    CHECK(fran, "%s attention_bwd fa3 %s: the dk/dv kernel's dQ accumulation did not run %d times", dtype_name(act), shape, runs - 1);
    printf("%s %-5s attention_bwd fa3 deterministic%s %s\n", bsame ? "ok  " : "FAIL", dtype_name(act),
           HD == 128 ? ", with 2 or 3 stages" : ", with dQ issued at once or an item late", shape);
    CHECK(bsame, "%s attention_bwd fa3 %s: a second backward gave different bits", dtype_name(act), shape);
    gpu->free(gqkv); gpu->free(gout); gpu->free(gdy); gpu->free(gd); gpu->free(gout_cpu); gpu->free(glse_cpu);
    free(qkv); free(dy); free(out); free(lse); free(dqkv); free(h); free(first); free(other);
}

typedef void AttF(void *, float *, const void *, int, int, int, int, int);
typedef void AttB(void *, const void *, const void *, const void *, const float *, int, int, int, int, int, float, void *, size_t);
/* theta > 0: the backward also takes its gradient back through RoPE (the CPU reference: the two ops in turn) */
static void test_attention(const char *path, AttF *fwd, AttB *bwd, int B, int T, int NH, int NKV, int HD, float theta) {
    char shape[96], name[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HD=%d%s", B, T, NH, NKV, HD, theta > 0 ? " +rope" : "");
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T;
    float *qkv = rand_act(nq, 1.5f), *dy = rand_act(no, 1);
    float *out = mallocCheck(no * 4), *lse = mallocCheck(nl * 4), *dqkv = mallocCheck(nq * 4);
    cpu->attention_forward(out, lse, qkv, B, T, NH, NKV, HD);
    for (size_t i = 0; i < no; i++) out[i] = round_act(out[i]);   /* the backward's input, as the model would store it */
    cpu->attention_backward(dqkv, dy, qkv, out, lse, B, T, NH, NKV, HD, theta, NULL, 0);
    void *gqkv = up_act(qkv, nq), *gdy = up_act(dy, no), *gout_cpu = up_act(out, no);
    void *gout = gpu->alloc(no * dtype_size(act), "t"), *gdqkv = gpu->alloc(nq * dtype_size(act), "t");
    float *glse = gpu->alloc(nl * 4, "t"), *glse_cpu = up_f32(lse, nl);
    poison(gout, no * dtype_size(act));
    poison(glse, nl * 4);
    poison(gdqkv, nq * dtype_size(act));
    /* scratch lent to the backward, enough for wgmma's dS tiles of the whole batch: they go there, not in its own */
    size_t all = attention_ds_bytes(B, T, NH, HD, (size_t)-1) + 256;
    void *work = gpu->alloc(all, "t");
    fwd(gout, glse, gqkv, B, T, NH, NKV, HD);
    bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);
    float *h = mallocCheck(nq * 4);
    double tol = act == DTYPE_FP32 ? 1e-5 : tol_act;
    snprintf(name, sizeof name, "attention_fwd %s", path);
    down_act(h, gout, no);
    compare(name, h, out, no, tol, shape);
    snprintf(name, sizeof name, "attention_fwd lse %s", path);
    gpu->download(h, glse, nl * 4);
    compare(name, h, lse, nl, act == DTYPE_FP32 ? 1e-5 : 1e-3, shape);
    snprintf(name, sizeof name, "attention_bwd %s", path);
    down_act(h, gdqkv, nq);
    compare(name, h, dqkv, nq, tol, shape);
    size_t cap = cuda_attention_ds_cap, one_seq = attention_ds_bytes(1, T, NH, HD, (size_t)-1);
    int wgmma = !strcmp(path, "wgmma") && one_seq > 0 && act != DTYPE_FP32;   /* fp32 runs the readable kernels */
    if (!strcmp(path, "wgmma") && act != DTYPE_FP32 && HD == 64 && T > ATTENTION_DS_MAX_T) {   /* the compare above ran this path */
        int stores = attention_wgmma_backward_stores(T, NH);
        printf("%s %-5s attention_bwd wgmma past T=%d takes the recompute path %s\n", stores ? "FAIL" : "ok  ", dtype_name(act),
               ATTENTION_DS_MAX_T, shape);
        CHECK(!stores, "%s attention_bwd wgmma %s: past ATTENTION_DS_MAX_T it still stores dS tiles", dtype_name(act), shape);
    }
    if (wgmma) {   /* a sequence's dS tiles over the cap: the backward computes dS again in its dq kernel, and is right */
        cuda_attention_ds_cap = one_seq - 1;
        int stores = attention_wgmma_backward_stores(T, NH);
        printf("%s %-5s attention_bwd wgmma over the dS cap takes the recompute path %s\n", stores ? "FAIL" : "ok  ", dtype_name(act), shape);
        CHECK(!stores, "%s attention_bwd wgmma %s: with the cap under one sequence's tiles it still stores them", dtype_name(act), shape);
        poison(gdqkv, nq * dtype_size(act));
        bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);
        cuda_attention_ds_cap = cap;
        down_act(h, gdqkv, nq);
        compare("attention_bwd wgmma recompute", h, dqkv, nq, tol, shape);
    }
    {   /* deterministic: a second backward gives the same bits (no atomics on any path); wgmma's runs one sequence a
         * slice of its dS tiles the second time, in its own scratch (nothing lent), and its dk/dv kernel both with key
         * tiles paired in a block and one a block (a test shape's grid is too small to pair them by itself), which must
         * not change a bit either */
        size_t bytes = nq * dtype_size(act);
        void *again = gpu->alloc(bytes, "t");
        char *a = mallocCheck(bytes), *b = mallocCheck(bytes);
        poison(again, bytes);
        int hopper = !strcmp(path, "wgmma") && act != DTYPE_FP32 && HD == 64 && T > 64;   /* two key tiles or more */
        long paired = cuda_attention_paired_launches;
        if (wgmma) {
            cuda_attention_pairing = 0;
            bwd(gdqkv, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, work, all);   /* the default cap's result again */
            cuda_attention_ds_cap = one_seq;
        }
        if (hopper) cuda_attention_pairing = 1;
        bwd(again, gdy, gqkv, gout_cpu, glse_cpu, B, T, NH, NKV, HD, theta, NULL, 0);
        cuda_attention_ds_cap = cap;
        cuda_attention_pairing = -1;
        if (hopper) {
            int ran = cuda_attention_paired_launches > paired;
            printf("%s %-5s attention_bwd wgmma ran its dk/dv kernel with key tiles paired %s\n", ran ? "ok  " : "FAIL", dtype_name(act), shape);
            CHECK(ran, "%s attention_bwd wgmma %s: the paired dk/dv launch never ran", dtype_name(act), shape);
        }
        gpu->download(a, gdqkv, bytes);
        gpu->download(b, again, bytes);
        int same = memcmp(a, b, bytes) == 0;
        printf("%s %-5s attention_bwd %-12s deterministic %s\n", same ? "ok  " : "FAIL", dtype_name(act), path, shape);
        CHECK(same, "%s attention_bwd %s %s: a second backward gave different bits", dtype_name(act), path, shape);
        gpu->free(again);
        free(a); free(b);
    }
    gpu->free(gqkv); gpu->free(gdy); gpu->free(gout_cpu); gpu->free(gout); gpu->free(gdqkv); gpu->free(glse); gpu->free(glse_cpu);
    gpu->free(work);
    free(qkv); free(dy); free(out); free(lse); free(dqkv); free(h);
}

static void test_swiglu(int N, int F) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d F=%d", N, F);
    float *h13 = rand_act((size_t)N * 2 * F, 2), *dy = rand_act((size_t)N * F, 1);
    float *out = mallocCheck((size_t)N * F * 4), *d = mallocCheck((size_t)N * 2 * F * 4);
    cpu->swiglu_forward(out, h13, N, F);
    cpu->swiglu_backward(d, dy, h13, N, F);
    void *gh = up_act(h13, (size_t)N * 2 * F), *gdy = up_act(dy, (size_t)N * F);
    void *gout = gpu->alloc((size_t)N * F * dtype_size(act), "t"), *gd = gpu->alloc((size_t)N * 2 * F * dtype_size(act), "t");
    poison(gout, (size_t)N * F * dtype_size(act));
    poison(gd, (size_t)N * 2 * F * dtype_size(act));
    gpu->swiglu_forward(gout, gh, N, F);
    gpu->swiglu_backward(gd, gdy, gh, N, F);
    float *h = mallocCheck((size_t)N * 2 * F * 4);
    down_act(h, gout, (size_t)N * F);
    compare("swiglu_forward", h, out, (size_t)N * F, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    down_act(h, gd, (size_t)N * 2 * F);
    compare("swiglu_backward", h, d, (size_t)N * 2 * F, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->free(gh); gpu->free(gdy); gpu->free(gout); gpu->free(gd);
    free(h13); free(dy); free(out); free(d); free(h);
}

/* The vocabulary of V split into `parts` blocks of Vb = ceil(V/parts) columns
 * (the last padded; its padding holds large logits that must count for
 * nothing). Pass 1 on every block on both backends; the CPU's statistics
 * gathered (parts,3,N) feed pass 2 of every block on both. */
static void test_cross_entropy(int N, int V, int parts) {
    char shape[64];
    int Vb = (V + parts - 1) / parts;
    snprintf(shape, sizeof shape, "N=%d V=%d in %d blocks", N, V, parts);
    size_t nb = (size_t)N * Vb, ns = 3 * (size_t)N;
    float *z = mallocCheck(parts * nb * 4 + 4), *stats = mallocCheck(parts * ns * 4), *loss = mallocCheck(N * 4);
    float *h = mallocCheck(nb * 4 + ns * 4 + 4), *gs = mallocCheck(ns * 4);
    int *y = mallocCheck(N * sizeof(int));
    for (int n = 0; n < N; n++) y[n] = n % 5 == 4 ? -100 : (int)(rng_u64(&rng) % (uint64_t)V);
    y[0] = V - 1;
    for (int p = 0; p < parts; p++)
        for (size_t i = 0; i < nb; i++) z[p * nb + i] = p * Vb + (int)(i % Vb) < V ? round_act(rng_normal(&rng) * 3) : 50.0f;
    float dloss = 1.0f / N;
    int *gy = gpu->alloc(N * sizeof(int), "t");
    gpu->upload(gy, y, N * sizeof(int));
    float *gstats = gpu->alloc(parts * ns * 4, "t"), *gl = gpu->alloc(N * 4, "t");
    for (int p = 0; p < parts; p++) {   /* pass 1 */
        int v0 = p * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
        cpu->cross_entropy_stats(stats + p * ns, z + p * nb, y, N, Vb, v0, valid);
        void *gz = up_act(z + p * nb, nb);
        poison(gstats, ns * 4);
        gpu->cross_entropy_stats(gstats, gz, gy, N, Vb, v0, valid);
        gpu->download(gs, gstats, ns * 4);
        int same_inf = 1;   /* a block of padding only has max -inf on both; compared as 0 */
        for (int n = 0; n < N; n++) {
            if (isinf(stats[p * ns + n]) || isinf(gs[n])) { same_inf &= stats[p * ns + n] == gs[n]; gs[n] = 0; }
        }
        float *ref = copy_f(stats + p * ns, ns);
        for (int n = 0; n < N; n++) if (isinf(ref[n])) ref[n] = 0;
        CHECK(same_inf, "cross_entropy_stats: -inf maxima differ (%s)", shape);
        compare("cross_entropy_stats", gs, ref, ns, 1e-5, shape);
        free(ref);
        gpu->free(gz);
    }
    gpu->upload(gstats, stats, parts * ns * 4);
    for (int p = 0; p < parts; p++) {   /* pass 2, with and without the gradient */
        int v0 = p * Vb, valid = V - v0 < 0 ? 0 : V - v0 < Vb ? V - v0 : Vb;
        float *zc = copy_f(z + p * nb, nb);
        cpu->cross_entropy_loss(loss, zc, stats, parts, y, N, Vb, v0, valid, dloss, -100);
        void *gz = up_act(z + p * nb, nb), *gz2 = up_act(z + p * nb, nb);
        poison(gl, N * 4);
        gpu->cross_entropy_loss(gl, gz, gstats, parts, gy, N, Vb, v0, valid, dloss, -100);
        gpu->download(h, gl, N * 4);
        compare("cross_entropy_loss loss", h, loss, N, 1e-5, shape);
        poison(gl, N * 4);
        gpu->cross_entropy_loss(gl, gz2, gstats, parts, gy, N, Vb, v0, valid, 0.0f, -100);   /* dloss 0: losses only */
        gpu->download(h, gl, N * 4);
        compare("cross_entropy_loss (dloss=0)", h, loss, N, 1e-5, shape);
        down_act(h, gz, nb);
        compare("cross_entropy_loss dlogits", h, zc, nb, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
        down_act(h, gz2, nb);
        compare("cross_entropy_loss logits kept", h, z + p * nb, nb, 0, shape);
        if (parts == 1) {   /* one part without statistics: the kernel sums up each row itself */
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            poison(gl, N * 4);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, dloss, -100);
            gpu->download(h, gl, N * 4);
            compare("cross_entropy_loss, no stats: loss", h, loss, N, 1e-5, shape);
            down_act(h, gz2, nb);
            compare("cross_entropy_loss, no stats: dlogits", h, zc, nb, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
            /* the row staged in shared memory (the default where it fits and packs) and read from global memory
             * twice must give the same bits; where it fits, the staged launch must have run */
            long staged = cuda_cross_entropy_staged_launches;
            size_t bytes = nb * dtype_size(act);
            char *a = mallocCheck(bytes + N * 4), *b = mallocCheck(bytes + N * 4);
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, dloss, -100);
            gpu->download(a, gz2, bytes);
            gpu->download(a + bytes, gl, N * 4);
            int fits = V * dtype_size(act) <= CUDA_CROSS_ENTROPY_STAGED_MAX && V % (16 / dtype_size(act)) == 0, ran = cuda_cross_entropy_staged_launches > staged;
            CHECK(ran == fits, "cross_entropy_loss %s %s: the staged kernel %s", dtype_name(act), shape, fits ? "never ran" : "ran on a row it does not fit");
            cuda_cross_entropy_staged = 0;
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, dloss, -100);
            cuda_cross_entropy_staged = 1;
            gpu->download(b, gz2, bytes);
            gpu->download(b + bytes, gl, N * 4);
            int same = memcmp(a, b, bytes + N * 4) == 0;
            printf("%s %-5s cross_entropy_loss staged (%s) and unstaged: %s %s\n", same ? "ok  " : "FAIL", dtype_name(act),
                   ran ? "ran" : "row too long or unpacked", same ? "same bits" : "bits differ", shape);
            CHECK(same, "cross_entropy_loss %s %s: staged and unstaged rows give different bits", dtype_name(act), shape);
            free(a);
            free(b);
            gpu->free(gz2);
            gz2 = up_act(z, nb);
            poison(gl, N * 4);
            gpu->cross_entropy_loss(gl, gz2, NULL, 1, gy, N, Vb, 0, V, 0.0f, -100);   /* losses only: logits kept */
            gpu->download(h, gl, N * 4);
            compare("cross_entropy_loss, no stats (dloss=0): loss", h, loss, N, 1e-5, shape);
            down_act(h, gz2, nb);
            compare("cross_entropy_loss, no stats (dloss=0): logits kept", h, z, nb, 0, shape);
        }
        gpu->free(gz); gpu->free(gz2);
        free(zc);
    }
    gpu->free(gy); gpu->free(gstats); gpu->free(gl);
    free(z); free(stats); free(loss); free(h); free(gs); free(y);
}

static void test_adamw(void) {
    /* slices with a gap between them (the gap must stay untouched) and different decays */
    AdamWSlice sl[4] = {{0, 1000, 0.1f}, {1000, 7, 0.0f}, {1100, 50000, 0.1f}, {51100, 3, 0.0f}};
    size_t P = 51103;
    float *p = rand_act(P, 1), *g = rand_act(P, 0.01f), *m = rand_act(P, 0.001f), *v = mallocCheck(P * 4);
    for (size_t i = 0; i < P; i++) v[i] = fabsf(rng_normal(&rng)) * 1e-5f;
    float *pc = copy_f(p, P), *mc = copy_f(m, P), *vc = copy_f(v, P), *pcomp = copy_f(p, P);
    AdamWHyper hy = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = 3};
    cpu->adamw_update(pc, pcomp, g, mc, vc, sl, 4, hy);
    float *gp = up_f32(p, P), *gg = up_f32(g, P), *gm = up_f32(m, P), *gv = up_f32(v, P);
    void *gpc = gpu->alloc(P * dtype_size(act), "t");
    poison(gpc, P * dtype_size(act));
    gpu->adamw_update(gp, gpc, gg, gm, gv, sl, 4, hy);
    float *h = mallocCheck(P * 4);
    gpu->download(h, gp, P * 4);
    compare("adamw params", h, pc, P, 1e-5, "P=51103 4 slices");
    gpu->download(h, gm, P * 4);
    compare("adamw m", h, mc, P, 1e-5, "P=51103 4 slices");
    gpu->download(h, gv, P * 4);
    compare("adamw v", h, vc, P, 1e-5, "P=51103 4 slices");
    down_act(h, gpc, P);
    for (size_t i = 1007; i < 1100; i++) { h[i] = 0; pcomp[i] = 0; }   /* the gap: never written (poison stays) */
    for (size_t i = 0; i < P; i++) pcomp[i] = round_act(pcomp[i]);
    compare("adamw params_compute", h, pcomp, P, act == DTYPE_FP32 ? 1e-5 : 4e-3, "P=51103 4 slices");
    /* NULL params_compute, second step with the cached slice list */
    hy.step = 4;
    cpu->adamw_update(pc, NULL, g, mc, vc, sl, 4, hy);
    gpu->adamw_update(gp, NULL, gg, gm, gv, sl, 4, hy);
    gpu->download(h, gp, P * 4);
    compare("adamw params step 2", h, pc, P, 1e-5, "P=51103 4 slices");
    gpu->free(gp); gpu->free(gg); gpu->free(gm); gpu->free(gv); gpu->free(gpc);
    free(p); free(g); free(m); free(v); free(pc); free(mc); free(vc); free(pcomp); free(h);
}

static void test_elementwise(size_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *a = rand_act(n, 1), *b = rand_act(n, 1), *o = mallocCheck(n * 4), *h = mallocCheck(n * 4);
    cpu->add(o, a, b, n);
    void *ga = up_act(a, n), *gb = up_act(b, n), *go = gpu->alloc(n * dtype_size(act), "t");
    poison(go, n * dtype_size(act));
    gpu->add(go, ga, gb, n);
    down_act(h, go, n);
    for (size_t i = 0; i < n; i++) o[i] = round_act(o[i]);
    compare("add", h, o, n, act == DTYPE_FP32 ? 1e-6 : 1e-6, shape);
    /* cast: fp32 -> act, exactly the host's rounding */
    float *x = mallocCheck(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng);
    float *gx = up_f32(x, n);
    poison(go, n * dtype_size(act));
    gpu->cast_from_fp32(go, gx, n);
    down_act(h, go, n);
    for (size_t i = 0; i < n; i++) x[i] = round_act(x[i]);
    compare("cast_from_fp32", h, x, n, 0, shape);
    /* sum of squares: fp64 both sides; NaN and inf propagate */
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&rng) * 3;
    gpu->upload(gx, x, n * 4);
    double s_gpu = gpu->sum_squares(gx, n), s_cpu = cpu->sum_squares(x, n), s_again = gpu->sum_squares(gx, n);
    int ok = fabs(s_gpu - s_cpu) <= 1e-9 * fabs(s_cpu) && s_gpu == s_again;
    printf("%s %-5s %-26s %-28s rel %.2e (tol 1e-09, deterministic)\n", ok ? "ok  " : "FAIL", dtype_name(act), "sum_squares", shape,
           fabs(s_gpu - s_cpu) / fabs(s_cpu));
    CHECK(ok, "sum_squares %s: gpu %.17g cpu %.17g again %.17g", shape, s_gpu, s_cpu, s_again);
    x[n / 2] = NAN;
    gpu->upload(gx, x, n * 4);
    CHECK(isnan(gpu->sum_squares(gx, n)), "sum_squares must propagate NaN (%s)", shape);
    x[n / 2] = INFINITY;
    gpu->upload(gx, x, n * 4);
    CHECK(isinf(gpu->sum_squares(gx, n)), "sum_squares must propagate inf (%s)", shape);
    gpu->free(ga); gpu->free(gb); gpu->free(go); gpu->free(gx);
    free(a); free(b); free(o); free(h); free(x);
}

/* the attention shapes every path is checked at */
static const int attention_shapes[][5] = {{2, 64, 4, 2, 64}, {1, 37, 3, 1, 16}, {2, 100, 6, 3, 32}, {1, 130, 2, 2, 128}, {1, 1, 2, 1, 8},
                                          {1, 257, 12, 4, 64}, {1, 1, 2, 1, 64}, {3, 100, 6, 2, 64}, {1, 700, 4, 1, 64},
                                          {1, 1024, 4, 2, 64}, {2, 300, 8, 2, 64}, {2, 1100, 4, 2, 64},
                                          {1, 3600, 12, 4, 64}};   /* the last two past ATTENTION_DS_MAX_T: wgmma's default is the recompute path */
#define N_ATTENTION_SHAPES ((int)(sizeof attention_shapes / sizeof attention_shapes[0]))

/* the fa3 forward at each shape class: the main attention shapes it takes, then more head dims, GQA ratios, odd T and
 * slices */
static void test_fa3_shapes(const int (*shapes)[5], int n) {
    const int more[][5] = {{1, 2100, 8, 2, 128}, {2, 777, 6, 6, 128}, {3, 129, 4, 1, 64}, {1, 3000, 8, 1, 64},
                           {2, 128, 2, 1, 128}, {1, 4133, 4, 2, 64}, {4, 250, 12, 4, 128}};
    for (int s = 0; s < n; s++)
        if (shapes[s][4] == 64 || shapes[s][4] == 128) test_attention_fa3(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
    for (int s = 0; s < (int)(sizeof more / sizeof more[0]); s++) test_attention_fa3(more[s][0], more[s][1], more[s][2], more[s][3], more[s][4]);
}

/* OPS_FA3_ONLY=1: only the fa3 kernels' checks (a short device call) */
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    int fa3_only = getenv("OPS_FA3_ONLY") && strcmp(getenv("OPS_FA3_ONLY"), "0");
    cpu = backend_cpu();
    rng_seed(&rng, 1234);
    const DType dtypes[3] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int di = 0; di < 3; di++) {
        act = dtypes[di];
        gpu = backend_cuda(act);
        tol_act = 1e-2;
        tol_matmul = act == DTYPE_FP32 ? (cuda_tf32 ? 2e-3 : 1e-5) : tol_act;
        if (di == 0) printf("cuda backend: peak %.0f TFLOP/s (fp32%s), attention path: %s\n", gpu->peak_flops / 1e12,
                            cuda_tf32 ? ", TF32" : "", cuda_attention_simple ? "simple" : cuda_attention_wgmma ? "wgmma" : "mma");
        if (fa3_only) {
            if (cuda_attention_wgmma && act != DTYPE_FP32) test_fa3_shapes(attention_shapes, N_ATTENTION_SHAPES);
            continue;
        }
        test_matmul(64, 48, 80);
        test_matmul(37, 29, 53);
        test_matmul(1, 7, 3);
        test_matmul(515, 768, 2304);
        test_embedding(300, 64, 50, 1, 0);
        test_embedding(77, 33, 1000, 1, 0);
        test_embedding(300, 64, 61, 2, 1);   /* vocab-parallel: the second of two blocks, padded */
        test_embedding(77, 33, 1000, 4, 2);
        test_rmsnorm(300, 768);
        test_rmsnorm(17, 37);
        test_rmsnorm(1000, 8);
        test_rmsnorm(2000, 1024);   /* the one-pass backward: 32 blocks of rows, the widest it holds */
        test_rmsnorm(130, 512);
        test_rmsnorm(70, 4096);     /* wider: the two-pass backward */
        test_rmsnorm(301, 640);     /* an odd last row of a pair, the third pack of a row partly past C */
        test_rope(2, 37, 4, 2, 64, 0);
        test_rope(1, 9, 3, 1, 6, 1000);
        test_rope(2, 1024, 2, 1, 128, 0);
        test_rope(3, 50, 5, 2, 64, 7);   /* 7 rotated heads: a group of 4 and one of 3 */
        for (int s = 0; s < N_ATTENTION_SHAPES; s++) {
            const int *q = attention_shapes[s];
            float theta = s % 2 ? 0.0f : 10000.0f;   /* every other shape with RoPE's backward folded in */
            test_attention("simple", attention_forward_cuda_simple, attention_backward_cuda_simple, q[0], q[1], q[2], q[3], q[4], theta);
            if (cuda_attention_simple) continue;
            int hopper = cuda_attention_wgmma, fa3 = cuda_attention_fa3;   /* both tensor-core paths where the GPU has both */
            cuda_attention_wgmma = 0;
            cuda_attention_fa3 = 0;   /* (the fa3 kernels have their own test below) */
            test_attention("mma", gpu->attention_forward, gpu->attention_backward, q[0], q[1], q[2], q[3], q[4], theta);
            if (hopper) {
                cuda_attention_wgmma = 1;
                test_attention("wgmma", gpu->attention_forward, gpu->attention_backward, q[0], q[1], q[2], q[3], q[4], theta);
            }
            cuda_attention_wgmma = hopper;
            cuda_attention_fa3 = fa3;
        }
        if (cuda_attention_wgmma && act != DTYPE_FP32) test_fa3_shapes(attention_shapes, N_ATTENTION_SHAPES);
        test_swiglu(64, 256);
        test_swiglu(13, 37);
        test_cross_entropy(40, 1000, 1);
        test_cross_entropy(7, 32001, 1);
        test_cross_entropy(3, 5, 1);
        test_cross_entropy(9, 32000, 1);   /* l124m's vocabulary */
        test_cross_entropy(7, 32001, 2);   /* vocab-parallel: tp = 2, the last block padded */
        test_cross_entropy(13, 61, 4);
        test_cross_entropy(3, 5, 4);       /* a block of padding only */
        test_adamw();
        test_elementwise(100000);
        test_elementwise(13);
    }
    return test_summary();
}
