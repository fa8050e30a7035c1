/* kernels/cuda/matmul.cu — the bias-free linear layer through cuBLASLt.
 *
 * The idea: row-major (N,IC) @ (OC,IC)^T is, read column-major, the product
 * W^T-op times X, so every product here is one cublasLtMatmul with no copies.
 * Inputs are in the act dtype with fp32 accumulation; out and dinp are written
 * in the act dtype, while dweight is fp32 (C = D): beta = 1 adds a micro-batch's
 * gradient to the earlier ones in fp32, beta = 0 is a step's first write
 * (nothing zeroes the gradients first, and the old values are never read).
 * The forward can add a residual stream in the epilogue (C = the stream,
 * D = out, beta = 1): no separate add kernel reading and writing the stream
 * again. fp32 mode runs exact fp32 GEMMs unless LLM3D_TF32=1 asks for TF32
 * tensor cores (about 10 mantissa bits: ~1e-3 relative error instead of
 * ~1e-6). The algorithm cuBLASLt's heuristic picks for each shape is cached,
 * and the one workspace is shared by all. lt_matmul, the one call to
 * cuBLASLt, also serves matmul_fp8.cu: A and B may be of different types
 * (E4M3 x E5M2) and alpha undoes FP8 scales. */
#include "common.cuh"
#include <string.h>
extern "C" {
#include "../matmul.h"
#include "../../common/util.h"
#include "cuda_extras.h"
}

static cudaDataType_t act_cuda_type(void) {
    return cuda_act == DTYPE_FP32 ? CUDA_R_32F : cuda_act == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}
static const char *type_name(cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return "fp32";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_16F: return "fp16";
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_8F_E5M2: return "e5m2";
    default: return "?";
    }
}
static int alignment(const void *p) {   /* largest power of two dividing p, at most 256 */
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

/* one cached plan: the shape, types and alignments it was chosen for, and cuBLASLt's pick (alpha is no input of the
 * heuristic, so it is not part of the key: one plan serves every FP8 scale) */
typedef struct {
    int m, n, k, lda, ldb, ldd, ta, tb, a, b, d, align, compute;
    float beta;
    cublasLtMatmulAlgo_t algo;
} Plan;
#define MAX_PLANS 128
static Plan plans[MAX_PLANS];
static int n_plans = 0;

/* column-major D (m,n) ldd  =  alpha * op(A) (m,k) @ op(B) (k,n)  +  beta * C, C of D's shape and type (NULL: D itself) */
void lt_matmul(void *D, const void *A, const void *B, const void *C, int m, int n, int k, int lda, int ldb, int ldd,
               int ta, int tb, cudaDataType_t a_type, cudaDataType_t b_type, cudaDataType_t d_type, float alpha, float beta) {
    if (!C) C = D;
    cublasComputeType_t compute = a_type == CUDA_R_32F ? (cuda_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F)
                                                       : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* FP8's forward (both operands E4M3) adds in the tensor cores' own accumulator between fp32 promotions (fast
     * accumulation), as Transformer Engine's recipe does; the backward products (an E5M2 operand) keep cuBLASLt's
     * precise one. Measured 2026-12-04 on the H200, fp8 steps in turns: forward only +2.8% (l124m) / +1.5% (l350m);
     * all three products +3.8%, but wgrad's error against the exact product grew 2.6x (9.4e-5 -> 2.5e-4 at K = 512) */
    int8_t fast = 1;
    if (a_type == CUDA_R_8F_E4M3 && b_type == CUDA_R_8F_E4M3)
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    /* stored shapes: A is (m,k) or, transposed, (k,m); likewise B */
    cublasCheck(cublasLtMatrixLayoutCreate(&la, a_type, ta ? k : m, ta ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, b_type, tb ? n : k, tb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, d_type, m, n, ldd));

    int al = alignment(A);
    if (alignment(B) < al) al = alignment(B);
    if (alignment(D) < al) al = alignment(D);
    if (alignment(C) < al) al = alignment(C);
    Plan key;
    memset(&key, 0, sizeof key);
    key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.ta = ta; key.tb = tb;
    key.a = a_type; key.b = b_type; key.d = d_type; key.align = al; key.compute = compute; key.beta = beta;
    Plan *plan = NULL;
    for (int i = 0; i < n_plans && !plan; i++)
        if (memcmp(&plans[i], &key, offsetof(Plan, algo)) == 0) plan = &plans[i];
    if (!plan) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &cuda_cublaslt_workspace_size, sizeof(size_t)));
        uint32_t a32 = (uint32_t)al;
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof a32));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a32, sizeof a32));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a32, sizeof a32));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a32, sizeof a32));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        cublasCheck(cublasLtMatmulAlgoGetHeuristic(cuda_cublaslt, op, la, lb, ld, ld, pref, 1, &res, &found));
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (found == 0)
            die("cuBLASLt has no algorithm for a %s x %s -> %s matmul m=%d n=%d k=%d (alignment %d bytes)\n"
                "  hint: use sizes that are multiples of 8 (16 for fp8) and aligned tensors, or dtype=fp32",
                type_name(a_type), type_name(b_type), type_name(d_type), m, n, k, al);
        if (n_plans < MAX_PLANS) { plan = &plans[n_plans++]; } else { plan = &plans[0]; }   /* full: recycle */
        *plan = key;
        plan->algo = res.algo;
    }
    cublasCheck(cublasLtMatmul(cuda_cublaslt, op, &alpha, A, la, B, lb, &beta, C, ld, D, ld, &plan->algo,
                               cuda_cublaslt_workspace, cuda_cublaslt_workspace_size, cuda_stream));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(op));
}

/* out (N,OC) = inp (N,IC) @ weight (OC,IC)^T (+ add (N,OC), cuBLASLt's C with beta = 1: the sum is rounded once);
 * column-major: out^T (OC,N) = W^T-op (OC,IC) @ inp^T (IC,N) */
extern "C" void matmul_forward_cuda(void *out, const void *inp, const void *weight, int N, int IC, int OC, const void *add) {
    if (N == 0 || OC == 0) return;
    cudaDataType_t t = act_cuda_type();
    lt_matmul(out, weight, inp, add, OC, N, IC, IC, IC, OC, 1, 0, t, t, t, 1.0f, add ? 1.0f : 0.0f);
}

/* dinp (N,IC) = dout (N,OC) @ weight (OC,IC);  column-major: dinp^T (IC,N) = W_c (IC,OC) @ dout^T (OC,N)
 * dweight (OC,IC) (+)= dout^T @ inp;  column-major: dW^T (IC,OC) (+)= inp^T (IC,N) @ dout (N,OC), beta = accumulate
 * (0: cuBLASLt never reads the old dweight) */
extern "C" void matmul_backward_cuda(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight,
                                     int N, int IC, int OC, int accumulate) {
    if (N == 0 || OC == 0 || IC == 0) return;
    cudaDataType_t t = act_cuda_type();
    if (dinp) lt_matmul(dinp, weight, dout, NULL, IC, N, OC, IC, OC, IC, 0, 0, t, t, t, 1.0f, 0.0f);
    if (dweight) lt_matmul(dweight, inp, dout, NULL, IC, OC, N, IC, OC, IC, 0, 1, t, t, CUDA_R_32F, 1.0f, accumulate ? 1.0f : 0.0f);
}
