/* tests/gpu/test_cuda_attention_at.c — the offset form of attention (kernels/attention.h, context parallelism) on the
 * GPU against the CPU reference, in fp32, bf16 and fp16: a sequence cut into chunks, each chunk's queries at their
 * offset against the packed k|v of the whole sequence, forward (out, lse) and backward (dq; dk|dv ADDED into fp32 dkv
 * that starts from random values on both sides). Head dims 8 and 40 run the readable kernels of attention_at.cu; 64
 * in bf16/fp16 the tensor-core kernels of attention_mma.cu, which are also compared with the readable ones
 * (LLM3D_ATTENTION=simple's switch) so the path that ran is the one named; on Hopper at head dims 64 and 128 ("fa3")
 * the forward is attention_fa3.cu's kernel and the backward attention_fa3_backward.cu's sweep (launches counted, the
 * mma.sync kernels' not), whose query tiles then straddle key tiles. Keys after a chunk's end are NaN: a kernel that
 * reads one fails. Run on a GPU machine: tests/gpu/run.sh. */
#include "ops_check.h"
#include "../../kernels/cuda/cuda_extras.h"

/* one chunk j of n of (B, n*C) sequences; path: "simple" forces the readable kernels, "mma" the tensor-core ones, "fa3"
 * the Hopper forward and backward */
static void test_chunk(const char *path, int B, int n, int C, int j, int NH, int NKV, int HD) {
    char shape[128];
    int T = n * C, q0 = j * C, QKV = (NH + 2 * NKV) * HD, KVW = 2 * NKV * HD;
    snprintf(shape, sizeof shape, "B=%d chunk %d/%d of %d NH=%d NKV=%d HD=%d", B, j, n, C, NH, NKV, HD);
    size_t nq = (size_t)B * C * QKV, nkv = (size_t)B * T * KVW, no = (size_t)B * C * NH * HD, nl = (size_t)B * NH * C;
    float *qkv = rand_act(nq, 1.5f), *kv = rand_act(nkv, 1.5f), *dy = rand_act(no, 1), *dkv0 = rand_act(nkv, 0.1f);
    for (int b = 0; b < B; b++)   /* keys after the chunk's end: never read */
        for (size_t i = (size_t)(q0 + C) * KVW; i < (size_t)T * KVW; i++) kv[(size_t)b * T * KVW + i] = NAN;
    float *out = mallocCheck(no * 4), *lse = mallocCheck(nl * 4), *dq = mallocCheck(nq * 4), *dkv = copy_f(dkv0, nkv);
    cpu->attention_forward_at(out, lse, qkv, kv, B, C, q0, T, NH, NKV, HD);
    for (size_t i = 0; i < no; i++) out[i] = round_act(out[i]);   /* the backward's input, as the model stores it */
    cpu->attention_backward_at(dq, dkv, dy, qkv, kv, out, lse, B, C, q0, T, NH, NKV, HD);
    void *gqkv = up_act(qkv, nq), *gkv = up_act(kv, nkv), *gdy = up_act(dy, no), *gout_cpu = up_act(out, no);
    void *gout = gpu->alloc(no * dtype_size(act), "t"), *gdq = gpu->alloc(nq * dtype_size(act), "t");
    float *glse = gpu->alloc(nl * 4, "t"), *glse_cpu = up_f32(lse, nl), *gdkv = up_f32(dkv0, nkv);
    poison(gout, no * dtype_size(act));
    poison(glse, nl * 4);
    poison(gdq, nq * dtype_size(act));
    int was = cuda_attention_simple, was_fa3 = cuda_attention_fa3, was_fa3b = cuda_attention_fa3_backward, was_at = cuda_attention_fa3_at, fa3 = !strcmp(path, "fa3");
    long launches = cuda_attention_at_mma_launches, fa3_launches = cuda_attention_fa3_launches, fa3b_launches = cuda_attention_fa3_backward_launches;
    cuda_attention_simple = !strcmp(path, "simple");
    cuda_attention_fa3 = fa3;
    cuda_attention_fa3_backward = fa3;   /* (Hopper's default is on: "mma" must turn it off) */
    cuda_attention_fa3_at = fa3;         /* (on by default on Hopper: each path forced here) */
    gpu->attention_forward_at(gout, glse, gqkv, gkv, B, C, q0, T, NH, NKV, HD);
    gpu->attention_backward_at(gdq, gdkv, gdy, gqkv, gkv, gout_cpu, glse_cpu, B, C, q0, T, NH, NKV, HD);
    cuda_attention_simple = was;
    cuda_attention_fa3 = was_fa3;
    cuda_attention_fa3_backward = was_fa3b;
    cuda_attention_fa3_at = was_at;
    int took = (int)(cuda_attention_at_mma_launches - launches), wanted = !strcmp(path, "mma") ? 2 : 0;
    CHECK(took == wanted, "%s attention_at %s %s: the tensor-core kernels ran %d of 2 calls (want %d)", dtype_name(act), path, shape, took, wanted);
    took = (int)(cuda_attention_fa3_launches - fa3_launches);
    CHECK(took == fa3, "%s attention_at %s %s: the fa3 forward ran %d times (want %d)", dtype_name(act), path, shape, took, fa3);
    took = (int)(cuda_attention_fa3_backward_launches - fa3b_launches);
    CHECK(took == fa3, "%s attention_at %s %s: the fa3 backward ran %d times (want %d)", dtype_name(act), path, shape, took, fa3);
    float *h = mallocCheck((nq > nkv ? nq : nkv) * 4), *want = mallocCheck(nq * 4);
    double tol = act == DTYPE_FP32 ? 1e-5 : tol_act;
    char name[64];
    snprintf(name, sizeof name, "attention_fwd_at %s", path);
    down_act(h, gout, no);
    compare(name, h, out, no, tol, shape);
    snprintf(name, sizeof name, "attention_fwd_at lse %s", path);
    gpu->download(h, glse, nl * 4);
    compare(name, h, lse, nl, act == DTYPE_FP32 ? 1e-5 : 1e-3, shape);
    down_act(h, gdq, nq);   /* only the q part is the kernel's: compare those columns */
    size_t m = 0;
    for (size_t r = 0; r < (size_t)B * C; r++)
        for (int i = 0; i < NH * HD; i++, m++) { h[m] = h[r * QKV + i]; want[m] = dq[r * QKV + i]; }
    snprintf(name, sizeof name, "attention_bwd_at dq %s", path);
    compare(name, h, want, m, tol, shape);
    gpu->download(h, gdkv, nkv * 4);
    snprintf(name, sizeof name, "attention_bwd_at dkv += %s", path);
    compare(name, h, dkv, nkv, act == DTYPE_FP32 ? 1e-5 : tol_act, shape);
    gpu->free(gqkv); gpu->free(gkv); gpu->free(gdy); gpu->free(gout_cpu); gpu->free(gout); gpu->free(gdq); gpu->free(glse);
    gpu->free(glse_cpu); gpu->free(gdkv);
    free(qkv); free(kv); free(dy); free(dkv0); free(out); free(lse); free(dq); free(dkv); free(h); free(want);
}

static void test_shape(int B, int n, int C, int NH, int NKV, int HD) {
    for (int j = 0; j < n; j++) {
        test_chunk("simple", B, n, C, j, NH, NKV, HD);
        if (act != DTYPE_FP32 && HD == 64) test_chunk("mma", B, n, C, j, NH, NKV, HD);   /* the tensor-core form */
        if (act != DTYPE_FP32 && (HD == 64 || HD == 128) && attention_wgmma_available()) test_chunk("fa3", B, n, C, j, NH, NKV, HD);
    }
}

int main(void) {
    cpu = backend_cpu();
    rng_seed(&rng, 53);
    DType dtypes[3] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (int di = 0; di < 3; di++) {
        act = dtypes[di];
        gpu = backend_cuda(act);
        tol_act = tol_matmul = 1e-2;
        test_shape(2, 4, 4, 4, 2, 8);      /* the layout tests' tiny model: cp = 2, 2 chunks a rank */
        test_shape(1, 2, 37, 6, 3, 40);    /* odd chunk length */
        test_shape(2, 4, 64, 4, 2, 64);    /* whole tiles */
        test_shape(1, 8, 100, 12, 4, 64);  /* tiles cut at chunk edges, GQA 3:1 (l124m's heads) */
        test_shape(1, 2, 300, 2, 1, 64);   /* long chunks: several key tiles a block */
        test_shape(1, 4, 200, 4, 1, 128);  /* head dim 128, GQA 4:1, chunks straddling key tiles */
    }
    return test_summary();
}
