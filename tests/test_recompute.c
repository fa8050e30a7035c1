/* tests/test_recompute.c — activation recomputation changes memory, not math:
 * gradients and losses under recompute=selective and recompute=full are
 * bit-identical to recompute=none on the CPU (the recomputation runs the very
 * same deterministic kernels on the very same inputs), over two training steps
 * with gradient accumulation; and the activation memory shrinks in order, in
 * the model and in the memory plan of l124m, as does 8-bit AdamW's state. */
#include "test.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include "../train/memory.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

    Trainer tr[3];
    const char *names[3] = {"none", "selective", "full"};
    for (int k = 0; k < 3; k++) {
        Config c;
        config_defaults(&c);
        c.dim = 48; c.n_layers = 3; c.n_heads = 6; c.n_kv_heads = 2; c.ffn_dim = 80; c.seq_len = 13; c.batch_size = 3;
        c.total_batch_tokens = 2 * 3 * 13; c.warmup_steps = 0; c.max_steps = 2; c.recompute = k;
        snprintf(c.train_data, sizeof c.train_data, "%s", shard);
        c.val_data[0] = 0;
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
            CHECK(s[k].loss == s[0].loss, "step %d recompute=%s: loss %.9g vs %.9g", step, names[k], s[k].loss, s[0].loss);
            CHECK(!memcmp(g, g0, P * 4), "step %d recompute=%s: gradients are not bit-identical to recompute=none", step, names[k]);
        }
    }
    model_get_params(&tr[0].model, p0);
    for (int k = 1; k < 3; k++) {
        model_get_params(&tr[k].model, p);
        CHECK(!memcmp(p, p0, P * 4), "recompute=%s: weights after two steps are not bit-identical", names[k]);
    }
    size_t a0 = tr[0].model.act_bytes, a1 = tr[1].model.act_bytes, a2 = tr[2].model.act_bytes;
    CHECK(a2 < a1 && a1 < a0, "activation bytes none %zu > selective %zu > full %zu", a0, a1, a2);
    printf("activation bytes: none %zu, selective %zu (%.0f%%), full %zu (%.0f%%)\n", a0, a1, 100.0 * a1 / a0, a2, 100.0 * a2 / a0);
    for (int k = 0; k < 3; k++) trainer_free(&tr[k]);

    /* the memory plan of l124m (nothing allocated): recompute and 8-bit AdamW shrink what they claim to */
    Config c;
    config_defaults(&c);
    char err[256];
    config_set(&c, "preset", "l124m", err, sizeof err);
    ModelConfig mc;
    model_config_from(&mc, &c, 32000);
    Comm comm;
    comm_init_one(&comm);
    const Backend *be = backend_cpu_emulated(DTYPE_BF16);
    MemoryPlan none = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW, 16);
    MemoryPlan sel = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_SELECTIVE, OPTIMIZER_ADAMW, 16);
    MemoryPlan full = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_FULL, OPTIMIZER_ADAMW, 16);
    MemoryPlan q8 = memory_plan(&c, &mc, be, &comm, NULL, RECOMPUTE_NONE, OPTIMIZER_ADAMW8BIT, 16);
    size_t P124 = none.master / 4;
    CHECK(P124 == model_count_params(&mc), "plan counts %zu parameters, the model %zu", P124, model_count_params(&mc));
    CHECK(full.activations < sel.activations && sel.activations < none.activations, "l124m activations shrink with recompute");
    CHECK(q8.optimizer <= 2.1 * P124, "adamw8bit state is %.3f bytes/param (<= 2.1)", (double)q8.optimizer / P124);
    CHECK(none.optimizer == 8 * P124, "adamw state is 8 bytes/param");
    printf("l124m plan (B=16, the CPU layout: fp32 storage): activations none %.2f GiB, selective %.2f GiB, full %.2f GiB; adamw8bit %.3f bytes/param\n",
           none.activations / 1073741824.0, sel.activations / 1073741824.0, full.activations / 1073741824.0, (double)q8.optimizer / P124);
    free(g0); free(g); free(p0); free(p);
    unlink(shard);
    return test_summary();
}
