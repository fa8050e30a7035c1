/* tests/test_recompute.c — the memory switches change memory, not math.
 * Activation recomputation: gradients and losses under recompute=selective and
 * recompute=full are bit-identical to recompute=none on the CPU (the
 * recomputation runs the very same deterministic kernels on the very same
 * inputs), over two training steps with gradient accumulation. Per-layer
 * compute weights: compute_weights=per_layer casts each layer from the fp32
 * master just before it runs, with the rounding the optimizer's refresh of the
 * whole copy uses, so in emulated bf16 and fp16 every loss, gradient and final
 * weight, and the logits of generation, are bit-identical to keep under every
 * recompute mode, tied or not. And the memory shrinks in order, in the model
 * and in the memory plans of l124m and l350m, as does 8-bit AdamW's state. */
#include "test.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include "../train/memory.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *rname[3] = {"none", "selective", "full"};

/* A small model on the test shard, two steps of two micro-batches each. */
static void small_config(Config *c, const char *shard, int recompute) {
    config_defaults(c);
    c->dim = 48; c->n_layers = 3; c->n_heads = 6; c->n_kv_heads = 2; c->ffn_dim = 80; c->seq_len = 13; c->batch_size = 3;
    c->total_batch_tokens = 2 * 3 * 13; c->warmup_steps = 0; c->max_steps = 2; c->recompute = recompute;
    snprintf(c->train_data, sizeof c->train_data, "%s", shard);
    c->val_data[0] = 0;
}

static void recompute_same(const char *shard) {
    Trainer tr[3];
    for (int k = 0; k < 3; k++) {
        Config c;
        small_config(&c, shard, k);
        trainer_init(&tr[k], &c);
    }
    size_t P = tr[0].model.n_params;
    float *g0 = mallocCheck(P * 4), *g = mallocCheck(P * 4), *p0 = mallocCheck(P * 4), *p = mallocCheck(P * 4);
    for (int step = 0; step < 2; step++) {
        StepStats s[3];
        for (int k = 0; k < 3; k++) s[k] = trainer_step(&tr[k]);
        model_get_grads(&tr[0].model, g0);
        for (int k = 1; k < 3; k++) {
            model_get_grads(&tr[k].model, g);
            CHECK(s[k].loss == s[0].loss, "step %d recompute=%s: loss %.9g vs %.9g", step, rname[k], s[k].loss, s[0].loss);
            CHECK(!memcmp(g, g0, P * 4), "step %d recompute=%s: gradients are not bit-identical to recompute=none", step, rname[k]);
        }
    }
    model_get_params(&tr[0].model, p0);
    for (int k = 1; k < 3; k++) {
        model_get_params(&tr[k].model, p);
        CHECK(!memcmp(p, p0, P * 4), "recompute=%s: weights after two steps are not bit-identical", rname[k]);
    }
    size_t a0 = tr[0].model.act_bytes, a1 = tr[1].model.act_bytes, a2 = tr[2].model.act_bytes;
    CHECK(a2 < a1 && a1 < a0, "activation bytes none %zu > selective %zu > full %zu", a0, a1, a2);
    printf("activation bytes: none %zu, selective %zu (%.0f%%), full %zu (%.0f%%)\n", a0, a1, 100.0 * a1 / a0, a2, 100.0 * a2 / a0);
    for (int k = 0; k < 3; k++) trainer_free(&tr[k]);
    free(g0); free(g); free(p0); free(p);
}

/* compute_weights=per_layer against keep: the same bits everywhere, a smaller compute line. */
static void per_layer_same(const char *shard, int precision, int recompute, int tie) {
    Trainer tr[2];
    char what[128];
    snprintf(what, sizeof what, "%s recompute=%s tie_embeddings=%d", precision == PRECISION_BF16 ? "bf16" : "fp16", rname[recompute], tie);
    for (int k = 0; k < 2; k++) {
        Config c;
        small_config(&c, shard, recompute);
        c.precision = precision; c.tie_embeddings = tie; c.compute_weights = k;
        trainer_init(&tr[k], &c);
    }
    Model *keep = &tr[0].model, *layer = &tr[1].model;
    size_t P = keep->n_params;
    CHECK(keep->params_compute && !layer->params_compute && layer->weight_buffer, "%s: per_layer keeps no compute copy", what);
    CHECK(layer->weight_bytes < keep->weight_bytes / 2, "%s: per_layer's weights take %zu bytes, keep's copy %zu", what,
          layer->weight_bytes, keep->weight_bytes);
    float *a = mallocCheck(P * 4), *b = mallocCheck(P * 4);
    for (int step = 0; step < 2; step++) {
        StepStats s0 = trainer_step(&tr[0]), s1 = trainer_step(&tr[1]);
        model_get_grads(keep, a);
        model_get_grads(layer, b);
        CHECK(s1.loss == s0.loss, "%s step %d: loss %.9g vs keep's %.9g", what, step, s1.loss, s0.loss);
        CHECK(!memcmp(a, b, P * 4), "%s step %d: gradients are not bit-identical to keep's", what, step);
    }
    model_get_params(keep, a);
    model_get_params(layer, b);
    CHECK(!memcmp(a, b, P * 4), "%s: weights after two steps are not bit-identical to keep's", what);
    /* generation through the KV cache (a prompt, then one token), and the evaluation forward */
    int ids[4] = {5, 17, 3, 42};
    int V = keep->V;
    float *la = mallocCheck(V * 4);
    memcpy(la, model_decode(keep, ids, 3, 0), V * 4);
    const float *lb = model_decode(layer, ids, 3, 0);
    CHECK(!memcmp(la, lb, V * 4), "%s: the prompt's next-token logits differ from keep's", what);
    memcpy(la, model_decode(keep, ids + 3, 1, 3), V * 4);
    lb = model_decode(layer, ids + 3, 1, 3);
    CHECK(!memcmp(la, lb, V * 4), "%s: a decode step's logits differ from keep's", what);
    double e0 = model_forward(keep, tr[0].ids, tr[0].targets, 3, 13, 0), e1 = model_forward(layer, tr[1].ids, tr[1].targets, 3, 13, 0);
    CHECK(e0 == e1, "%s: a forward without backward gives %.9g, keep's %.9g", what, e1, e0);
    printf("%-40s per_layer = keep bit for bit; compute weights %zu bytes vs %zu\n", what, layer->weight_bytes, keep->weight_bytes);
    free(la); free(a); free(b);
    for (int k = 0; k < 2; k++) trainer_free(&tr[k]);
}

static double gib(size_t bytes) { return bytes / 1073741824.0; }

/* The plans of l124m and l350m (nothing allocated): each switch shrinks what it claims to. */
static void plans(void) {
    Config c;
    config_defaults(&c);
    char err[256];
    config_set(&c, "preset", "l124m", err, sizeof err);
    ModelConfig mc;
    model_config_from(&mc, &c, 32000);
    Comm comm;
    comm_init_one(&comm);
    const Backend *be = backend_cpu_emulated(DTYPE_BF16);
    MemoryPlan none = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
    MemoryPlan sel = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_SELECTIVE, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
    MemoryPlan full = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_FULL, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
    MemoryPlan q8 = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW8BIT, COMPUTE_WEIGHTS_KEEP, 16);
    size_t P124 = none.master / 4;
    CHECK(P124 == model_count_params(&mc), "plan counts %zu parameters, the model %zu", P124, model_count_params(&mc));
    CHECK(full.activations < sel.activations && sel.activations < none.activations, "l124m activations shrink with recompute");
    CHECK(q8.optimizer <= 2.1 * P124, "adamw8bit state is %.3f bytes/param (<= 2.1)", (double)q8.optimizer / P124);
    CHECK(none.optimizer == 8 * P124, "adamw state is 8 bytes/param");
    printf("l124m plan (B=16, the CPU layout: fp32 storage): activations none %.2f GiB, selective %.2f GiB, full %.2f GiB; adamw8bit %.3f bytes/param\n",
           gib(none.activations), gib(sel.activations), gib(full.activations), (double)q8.optimizer / P124);

    /* on the GPU in bf16, full recompute: per_layer's compute line is one layer's place (l350m: 11.3 M parameters,
     * 21.5 MiB), the embedding's and head's lying over the recompute buffers; the target is 6.40 GiB (the
     * Hopper attention backward's dS tiles lie in h13, lent: nothing is added for them) */
    const char *presets[2] = {"l124m", "l350m"};
    for (int k = 0; k < 2; k++) {
        config_defaults(&c);
        config_set(&c, "preset", presets[k], err, sizeof err);
        c.device = DEVICE_CUDA; c.precision = PRECISION_BF16;
        model_config_from(&mc, &c, 32000);
        Backend gpu = memory_plan_backend(&c);
        MemoryPlan keep = memory_plan(&c, &mc, &gpu, &comm, NULL, RECOMPUTE_FULL, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
        MemoryPlan layer = memory_plan(&c, &mc, &gpu, &comm, NULL, RECOMPUTE_FULL, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_PER_LAYER, 16);
        MemoryPlan layer_none = memory_plan(&c, &mc, &gpu, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_PER_LAYER, 16);
        MemoryPlan keep_none = memory_plan(&c, &mc, &gpu, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
        size_t P = model_count_params(&mc), C = c.dim, F = c.ffn_dim, HD = C / c.n_heads;
        size_t layer_params = 2 * C + (c.n_heads + 2 * c.n_kv_heads) * HD * C + c.n_heads * HD * C + 3 * F * C;
        CHECK(keep.compute == 2 * P, "%s keep: the compute copy is 2 bytes/param", presets[k]);
        CHECK(layer.compute >= 2 * layer_params && layer.compute <= 2 * layer_params + 512,
              "%s per_layer, full recompute: the compute line is one layer's place (%zu bytes for %zu parameters)", presets[k],
              layer.compute, layer_params);
        CHECK(layer.activations == keep.activations, "%s full recompute: the embedding's and head's places lie in the recompute buffers",
              presets[k]);
        CHECK(layer_none.compute < keep_none.compute / 4 && layer_none.total < keep_none.total,
              "%s per_layer without recompute: the places of a layer and of the vocabulary units", presets[k]);
        if (k == 1) CHECK(layer.total <= 6.40 * 1073741824.0, "l350m full recompute per_layer: %.3f GiB, over 6.40", gib(layer.total));
        /* the LM head's chunk (model/layout.c plan_head_chunk): 4,096 tokens without recompute; with recompute
         * 4,096 only where the head's buffers still fit in the recompute buffers (l124m keep, l350m both), else 2,048
         * (l124m per_layer, whose vocabulary weights' place also lies there) */
        const int modes[3][2] = {{RECOMPUTE_NONE, 0}, {RECOMPUTE_FULL, 0}, {RECOMPUTE_FULL, 1}};
        int chunk[3];
        for (int i = 0; i < 3; i++) {
            Model hm;
            ModelPart q = model_part_whole(&mc);
            q.weights_per_layer = modes[i][1];
            model_plan(&hm, &mc, &gpu, &comm, &q, 16, c.seq_len, modes[i][0]);
            chunk[i] = hm.head_chunk;
            model_plan_free(&hm);
        }
        CHECK(chunk[0] == 4096, "%s without recompute: head chunk %d tokens, want 4096", presets[k], chunk[0]);
        CHECK(chunk[1] == 4096, "%s full recompute, keep: head chunk %d tokens, want 4096 (fits the recompute buffers)",
              presets[k], chunk[1]);
        CHECK(chunk[2] == (k == 0 ? 2048 : 4096), "%s full recompute, per_layer: head chunk %d tokens, want %d", presets[k],
              chunk[2], k == 0 ? 2048 : 4096);
        printf("%s bf16 full recompute on cuda: keep %.3f GiB (compute %.1f MiB, activations %.1f MiB), per_layer %.3f GiB "
               "(compute %.1f MiB); no recompute: keep %.3f GiB, per_layer %.3f GiB\n", presets[k], gib(keep.total),
               keep.compute / 1048576.0, keep.activations / 1048576.0, gib(layer.total), layer.compute / 1048576.0,
               gib(keep_none.total), gib(layer_none.total));
    }
}

int main(void) {
    char shard[256];
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_recompute_%d.bin", (int)getpid());
    enum { N = 20000 };
    uint32_t *tok = mallocCheck(N * 4);
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_u64(&r) % 97);
    shard_write(shard, tok, N, 97);
    free(tok);

    recompute_same(shard);
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++) per_layer_same(shard, PRECISION_BF16, rc, 0);
    per_layer_same(shard, PRECISION_BF16, RECOMPUTE_FULL, 1);
    per_layer_same(shard, PRECISION_FP16, RECOMPUTE_NONE, 1);
    plans();
    unlink(shard);
    return test_summary();
}
