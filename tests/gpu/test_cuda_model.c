/* tests/gpu/test_cuda_model.c — the whole model and the step loop on the GPU.
 *   1. the PyTorch fixture on device=cuda in fp32 (1e-5), bf16 and fp16 (1e-2
 *      on logits and loss, 3e-2 on gradients): logits, loss, every gradient,
 *      and in fp32 the 10 AdamW steps;
 *   2. KV-cache decoding on the GPU gives the full forward's logits;
 *   3. recompute=selective|full gives recompute=none's gradients on the GPU;
 *   4. 20 training steps on the GPU track the CPU's loss curve (fp32 1e-4,
 *      bf16 2e-2 per step);
 *   5. fp16 with a forced overflow (starting scale 2^40) skips steps, halves the
 *      scale and recovers; no NaN reaches the weights;
 *   6. compute_weights=per_layer gives keep's losses, weights and decode logits
 *      bit for bit (bf16 and fp16, full recompute, tied and untied);
 *   7. the copies that do not wait (tests/async_check.h): 40 uploads queued
 *      through the 16-slot staging ring all arrive, and the loss a step reads
 *      back once is the one each forward read back at once, bit for bit;
 *   8. a long sequence (T = 2300: past ATTENTION_DS_MAX_T, so Hopper's backward
 *      computes dS again, and a partial last tile) trains like the CPU in bf16
 *      for 5 steps, on the path it says it took.
 * Built by `make gpu`, run by tests/gpu/run.sh; ends with "N passed, N failed".
 * LLM3D_TEST_QUICK=1 runs part 1 only (for compute-sanitizer). */
#include "../test.h"
#include "../fixture.h"
#include "../async_check.h"
#include "../../train/trainer.h"
#include "../../train/optimizer.h"
#include "../../kernels/attention.h"
#include "../../kernels/cuda/cuda_extras.h"
#include <unistd.h>

static const DType dtypes[3] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};

static void test_fixture(DType act) {
    Fixture f;
    fixture_load(&f);
    Comm comm;
    comm_init_one(&comm);
    Model m;
    fixture_model(&f, &m, backend_cuda(act), &comm, RECOMPUTE_NONE);
    int V = f.mc.vocab_size, BT = f.B * f.T;
    double tol = act == DTYPE_FP32 ? 1e-5 : 1e-2, gtol = act == DTYPE_FP32 ? 1e-5 : 3e-2;
    const char *dn = dtype_name(act);
    /* logits */
    float *logits = mallocCheck((size_t)BT * V * 4), *full = mallocCheck((size_t)BT * V * 4);
    model_logits(&m, f.ids, f.B, f.T, logits);
    double e = fixture_rel_err(logits, fixture_tensor(&f, "logits")->data, (size_t)BT * V);
    CHECK(e < tol, "%s logits rel err %.3g", dn, e);
    /* loss and gradients */
    model_zero_grads(&m);
    double loss = model_forward(&m, f.ids, f.targets, f.B, f.T, 1.0f / f.valid) / f.valid;
    model_backward(&m);
    float ref = fixture_tensor(&f, "loss")->data[0];
    double le = fabs(loss - ref) / ref;
    CHECK(le < tol, "%s loss %.6f vs PyTorch %.6f (rel %.3g)", dn, loss, ref, le);
    float *g = mallocCheck(m.n_params * 4);
    model_get_grads(&m, g);
    double worst = fixture_check_grads(&f, &m, g, gtol, dn);
    printf("fixture %s: logits %.2e, loss %.2e, worst gradient %.2e\n", dn, e, le, worst);
    /* KV-cache decoding vs the full forward (batch row 0) */
    model_logits(&m, f.ids, 1, f.T, full);
    double worst_kv = 0;
    for (int t = 4; t < f.T; t++) {
        const float *lg = t == 4 ? model_decode(&m, f.ids, 5, 0) : model_decode(&m, f.ids + t, 1, t);
        const float *ref = full + (size_t)t * V;
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) { num += (lg[v] - ref[v]) * (double)(lg[v] - ref[v]); den += (double)ref[v] * ref[v]; }
        worst_kv = fmax(worst_kv, sqrt(num / den));
    }
    CHECK(worst_kv < tol, "%s KV-cache decode vs full forward: rel err %.3g", dn, worst_kv);
    /* AdamW steps in fp32 */
    if (act == DTYPE_FP32) {
        Config c;
        config_defaults(&c);
        c.lr = fixture_float(&f, 18); c.beta1 = fixture_float(&f, 19); c.beta2 = fixture_float(&f, 20);
        c.adam_eps = fixture_float(&f, 21); c.weight_decay = fixture_float(&f, 22); c.grad_clip = fixture_float(&f, 23);
        Optimizer opt;
        optimizer_init(&opt, &m, &c, NULL);
        const float *rl = fixture_tensor(&f, "step_losses")->data;
        double ws = 0;
        for (int s = 0; s < f.steps; s++) {
            model_zero_grads(&m);
            double l = model_forward(&m, f.ids, f.targets, f.B, f.T, 1.0f / f.valid) / f.valid;
            model_backward(&m);
            optimizer_step(&opt, &m, c.lr, 1.0f);
            ws = fmax(ws, fabs(l - rl[s]) / rl[s]);
        }
        CHECK(ws < 1e-5, "fp32 AdamW steps: worst loss rel err %.3g", ws);
        printf("fixture fp32: %d AdamW steps, worst loss rel err %.2e\n", f.steps, ws);
        optimizer_free(&opt, m.be);
    }
    model_free(&m);
    free(full); free(logits); free(g);
}

static void test_recompute(DType act) {
    Fixture f;
    fixture_load(&f);
    Comm comm;
    comm_init_one(&comm);
    float *g[3];
    for (int r = 0; r < 3; r++) {
        Model m;
        fixture_model(&f, &m, backend_cuda(act), &comm, r);
        model_zero_grads(&m);
        model_forward(&m, f.ids, f.targets, f.B, f.T, 1.0f / f.valid);
        model_backward(&m);
        g[r] = mallocCheck(m.n_params * 4);
        model_get_grads(&m, g[r]);
        if (r) {
            double e = fixture_rel_err(g[r], g[0], m.n_params);
            CHECK(e < 1e-6, "%s recompute=%s: gradients differ from none by %.3g", dtype_name(act), r == 1 ? "selective" : "full", e);
            printf("recompute %s %s: gradient rel diff %.2e%s\n", dtype_name(act), r == 1 ? "selective" : "full", e,
                   memcmp(g[r], g[0], m.n_params * 4) ? "" : " (bit-identical)");
        }
        model_free(&m);
    }
    for (int r = 0; r < 3; r++) free(g[r]);
}

static char shard[256];

static void make_shard(void) {
    snprintf(shard, sizeof shard, "/tmp/llm3d_gpu_model_%d.bin", (int)getpid());
    enum { N = 200000 };
    uint32_t *tok = mallocCheck(N * 4);
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < N; i++) tok[i] = (i % 11 == 0) ? (uint32_t)(rng_u64(&r) % 300) : (uint32_t)((i * 37 + i / 11) % 300);
    shard_write(shard, tok, N, 300);
    free(tok);
}

static void small_config(Config *c, int device, int precision) {
    config_defaults(c);
    c->dim = 128; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->ffn_dim = 256; c->seq_len = 64; c->batch_size = 8;
    c->warmup_steps = 5; c->max_steps = 20; c->lr = 3e-3f; c->device = device; c->precision = precision;
    snprintf(c->train_data, sizeof c->train_data, "%s", shard);
    c->val_data[0] = 0;
}

/* cc (CPU, fp32) and cg (GPU) trained side by side for cc's max_steps: the worst relative loss difference of a
 * step, and the GPU's first and last loss */
typedef struct { double worst, first, last; } Curve;
static Curve beside_cpu(const Config *cc, const Config *cg) {
    Trainer tc, tg;
    trainer_init(&tc, cc);
    trainer_init(&tg, cg);
    Curve k = {0, 0, 0};
    for (int s = 0; s < cc->max_steps; s++) {
        StepStats a = trainer_step(&tc), b = trainer_step(&tg);
        k.worst = fmax(k.worst, isfinite(b.loss) ? fabs(a.loss - b.loss) / a.loss : INFINITY);
        if (!s) k.first = b.loss;
        k.last = b.loss;
    }
    trainer_free(&tc);
    trainer_free(&tg);
    return k;
}

static void test_curve(int precision) {
    Config cc, cg;
    small_config(&cc, DEVICE_CPU, PRECISION_FP32);
    small_config(&cg, DEVICE_CUDA, precision);
    Curve k = beside_cpu(&cc, &cg);
    double tol = precision == PRECISION_FP32 ? 1e-4 : 2e-2;
    const char *pn = precision == PRECISION_FP32 ? "fp32" : precision == PRECISION_BF16 ? "bf16" : "fp16";
    CHECK(k.worst < tol, "20 steps %s on GPU vs fp32 CPU: worst loss rel diff %.3g", pn, k.worst);
    CHECK(k.last < k.first, "%s loss falls: %.4f -> %.4f", pn, k.first, k.last);
    printf("loss curve %s GPU vs CPU over 20 steps: worst rel diff %.2e (%.3f -> %.3f)\n", pn, k.worst, k.first, k.last);
}

/* precision=fp8 on the GPU (cuBLASLt's FP8 matmuls, the cast kernels) against its CPU emulation step for step; beside
 * the GPU's bf16: step 1 equal (no scales yet: bf16 matmuls), every later step different (FP8 ran), every tensor scaled */
static void test_fp8(void) {
    Config cc, cg, cb;
    small_config(&cc, DEVICE_CPU, PRECISION_FP8);
    small_config(&cg, DEVICE_CUDA, PRECISION_FP8);
    small_config(&cb, DEVICE_CUDA, PRECISION_BF16);
    Trainer tc, tg, tb, tu;
    trainer_init(&tc, &cc);
    trainer_init(&tg, &cg);
    trainer_init(&tb, &cb);
    setenv("LLM3D_FP8_FUSED", "off", 1);   /* tu: SwiGLU's output and gradient cast by the matmuls, not by SwiGLU */
    trainer_init(&tu, &cg);
    unsetenv("LLM3D_FP8_FUSED");
    double worst = 0, first = 0, last = 0;
    int apart = 0, same_first = 0, unfused_apart = 0;
    for (int s = 0; s < cc.max_steps; s++) {
        StepStats a = trainer_step(&tc), b = trainer_step(&tg), c = trainer_step(&tb), u = trainer_step(&tu);
        worst = fmax(worst, isfinite(b.loss) ? fabs(a.loss - b.loss) / a.loss : INFINITY);
        if (!s) { first = b.loss; same_first = b.loss == c.loss; }
        else apart += b.loss != c.loss;
        unfused_apart += b.loss != u.loss;
        last = b.loss;
    }
    /* the producers write the very copies the casts wrote: the same run bit for bit, and they ran */
    CHECK(unfused_apart == 0 && tg.model.fp8.producer_casts > 0 && tu.model.fp8.producer_casts == 0,
          "fp8 with SwiGLU's producers vs LLM3D_FP8_FUSED=off on GPU: %d of %d losses differ; %ld producer calls (off: %ld)",
          unfused_apart, cc.max_steps, tg.model.fp8.producer_casts, tu.model.fp8.producer_casts);
    printf("fp8 GPU, SwiGLU producers (%ld calls) vs the matmuls' casts: %d of %d losses differ\n", tg.model.fp8.producer_casts,
           unfused_apart, cc.max_steps);
    int want = model_fp8_tensors(&tg.model);
    CHECK(worst < 1e-2 && last < first, "20 steps fp8 on GPU vs its CPU emulation: worst loss rel diff %.3g, loss %.4f -> %.4f", worst,
          first, last);
    CHECK(same_first && apart == cc.max_steps - 1, "fp8 beside bf16 on GPU: step 1 equal %d, later steps different %d of %d", same_first,
          apart, cc.max_steps - 1);
    CHECK(model_fp8_scaled(&tg.model) == want && tg.fp8_saturated_total == 0, "fp8 on GPU: %d of %d tensors scaled, %d saturated",
          model_fp8_scaled(&tg.model), want, tg.fp8_saturated_total);
    /* the GPU sums in another order than the CPU, so a max one bf16 ulp apart can fall on the other side of a scale's
     * boundary (as under tp: tests/test_layouts_fp8.c); such a scale is one power of two off, and few are */
    int differ = 0, far = 0;
    for (int e = 0; e < want; e++) {
        float a = tg.model.fp8.scale[e], b = tc.model.fp8.scale[e];
        differ += a != b;
        far += a != b && a != 2 * b && b != 2 * a;
    }
    CHECK(far == 0 && differ <= want / 8, "GPU and CPU end with the same scales but %d of %d (each one power of two off; %d further)",
          differ, want, far);
    printf("fp8 GPU vs CPU emulation over 20 steps: worst rel diff %.2e (%.3f -> %.3f); %d tensors in FP8\n", worst, first, last,
           model_fp8_scaled(&tg.model));
    trainer_free(&tc); trainer_free(&tg); trainer_free(&tb); trainer_free(&tu);
}

static void long_shape(Config *c) {
    c->n_heads = 2; c->n_kv_heads = 1; c->seq_len = 2300; c->batch_size = 1; c->max_steps = 5; c->warmup_steps = 2;
}

/* 5 steps at T = 2300 x B = 1, head dim 64: the attention backward's long-sequence path (on Hopper: dS computed
 * again, nothing quadratic kept) inside the whole model and its RoPE, against the fp32 CPU step for step */
static void test_long_sequence(void) {
    Config cc, cg;
    small_config(&cc, DEVICE_CPU, PRECISION_FP32);
    small_config(&cg, DEVICE_CUDA, PRECISION_BF16);
    long_shape(&cc);
    long_shape(&cg);
    Curve k = beside_cpu(&cc, &cg);
    const char *path = cuda_attention_simple ? "the readable kernels"
                       : !cuda_attention_wgmma ? "the mma.sync kernels"
                       : attention_wgmma_backward_stores(cg.seq_len, cg.n_heads) ? "wgmma, dS stored" : "wgmma, dS computed again";
    CHECK(!cuda_attention_wgmma || !attention_wgmma_backward_stores(cg.seq_len, cg.n_heads),
          "T=%d is past ATTENTION_DS_MAX_T=%d, yet the Hopper backward stores dS", cg.seq_len, ATTENTION_DS_MAX_T);
    CHECK(k.worst < 2e-2 && k.last < k.first, "T=%d bf16 on GPU vs fp32 CPU over 5 steps: worst loss rel diff %.3g, loss %.4f -> %.4f",
          cg.seq_len, k.worst, k.first, k.last);
    printf("long sequence T=%d bf16 GPU (%s) vs CPU over 5 steps: worst rel diff %.2e (%.3f -> %.3f)\n", cg.seq_len, path, k.worst,
           k.first, k.last);
}

static void test_fp16_overflow(void) {
    Config c;
    small_config(&c, DEVICE_CUDA, PRECISION_FP16);
    c.loss_scale_init = 1099511627776.0f;   /* 2^40: overflows fp16 */
    c.max_steps = 40;
    Trainer tr;
    trainer_init(&tr, &c);
    double first = 0, last = 0;
    for (int s = 0; s < c.max_steps; s++) {
        StepStats st = trainer_step(&tr);
        if (!s) first = st.loss;
        last = st.loss;
    }
    float *p = mallocCheck(tr.model.n_params * 4);
    model_get_params(&tr.model, p);
    int finite = 1;
    for (size_t i = 0; i < tr.model.n_params; i++) finite &= isfinite(p[i]) != 0;
    CHECK(tr.skipped_steps > 0 && tr.loss_scale < 1099511627776.0f, "forced overflow skipped %d steps, scale %g", tr.skipped_steps, tr.loss_scale);
    CHECK(finite && isfinite(last) && last < first, "fp16 recovers: loss %.3f -> %.3f, weights finite %d", first, last, finite);
    printf("fp16 forced overflow on GPU: %d steps skipped, scale 2^40 -> %g, loss %.3f -> %.3f\n", tr.skipped_steps,
           tr.loss_scale, first, last);
    free(p);
    trainer_free(&tr);
}

static void test_per_layer(int precision, int tie) {
    Trainer tr[2];
    for (int k = 0; k < 2; k++) {
        Config c;
        small_config(&c, DEVICE_CUDA, precision);
        c.recompute = RECOMPUTE_FULL; c.tie_embeddings = tie; c.compute_weights = k; c.max_steps = 5;
        trainer_init(&tr[k], &c);
    }
    const char *pn = precision == PRECISION_BF16 ? "bf16" : "fp16";
    int same_loss = 1;
    for (int s = 0; s < 5; s++) {
        StepStats a = trainer_step(&tr[0]), b = trainer_step(&tr[1]);
        same_loss &= a.loss == b.loss;
    }
    size_t P = tr[0].model.n_params;
    float *a = mallocCheck(P * 4), *b = mallocCheck(P * 4);
    model_get_params(&tr[0].model, a);
    model_get_params(&tr[1].model, b);
    int ids[3] = {1, 2, 3}, V = tr[0].model.V;
    float *la = mallocCheck(V * 4);
    memcpy(la, model_decode(&tr[0].model, ids, 3, 0), V * 4);
    int same_decode = !memcmp(la, model_decode(&tr[1].model, ids, 3, 0), V * 4);
    CHECK(same_loss && !memcmp(a, b, P * 4) && same_decode, "%s tie=%d per_layer vs keep: losses %d, weights %d, decode %d bit-identical",
          pn, tie, same_loss, !memcmp(a, b, P * 4), same_decode);
    printf("compute_weights=per_layer %s tie=%d: 5 steps and a decode bit-identical to keep: %s; weights %zu bytes vs %zu\n", pn, tie,
           same_loss && !memcmp(a, b, P * 4) && same_decode ? "yes" : "NO", tr[1].model.weight_bytes, tr[0].model.weight_bytes);
    free(a); free(b); free(la);
    for (int k = 0; k < 2; k++) trainer_free(&tr[k]);
}

int main(void) {
    for (int i = 0; i < 3; i++) test_fixture(dtypes[i]);
    if (getenv("LLM3D_TEST_QUICK")) return test_summary();   /* the memcheck run: the fixture part only */
    test_recompute(DTYPE_FP32);
    test_recompute(DTYPE_BF16);
    make_shard();
    test_curve(PRECISION_FP32);
    test_curve(PRECISION_BF16);
    test_fp8();
    test_long_sequence();
    test_fp16_overflow();
    test_per_layer(PRECISION_BF16, 0);
    test_per_layer(PRECISION_BF16, 1);
    test_per_layer(PRECISION_FP16, 0);
    for (int i = 0; i < 3; i++) check_async(backend_cuda(dtypes[i]));
    unlink(shard);
    return test_summary();
}
