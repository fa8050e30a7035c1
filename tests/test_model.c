/* tests/test_model.c — the whole model against PyTorch.
 *
 * tests/fixtures/llama_small.bin (written by tests/make_fixture.py in float64)
 * holds a small LLaMA with GQA, an untied head and T = 13: its weights, inputs,
 * logits, loss, every parameter gradient, and the losses of 10 AdamW steps.
 * llm3d's fp32 CPU model must match each within 1e-5 relative (L2 norm). */
#include "test.h"
#include "fixture.h"
#include "../common/util.h"
#include "../model/llama.h"
#include "../train/optimizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    Fixture f;
    fixture_load(&f);
    ModelConfig mc = f.mc;
    int B = f.B, T = f.T, steps = f.steps;
    Comm comm;
    comm_init_one(&comm);
    Model m;
    fixture_model(&f, &m, backend_cpu(), &comm, RECOMPUTE_NONE);
    CHECK(m.n_params == model_count_params(&mc), "n_params %zu vs count %zu", m.n_params, model_count_params(&mc));

    /* forward: the logits of every position */
    int valid = f.valid;
    float *logits = mallocCheck((size_t)B * T * mc.vocab_size * 4);
    model_logits(&m, f.ids, B, T, logits);
    const FixTensor *lg = fixture_tensor(&f, "logits");
    double e = fixture_rel_err(logits, lg->data, (size_t)B * T * mc.vocab_size);
    CHECK(e < 1e-5, "logits rel err %.3g", e);
    printf("logits   rel err %.2e\n", e);
    model_zero_grads(&m);
    double loss = model_forward(&m, f.ids, f.targets, B, T, 1.0f / valid) / valid;
    float ref_loss = fixture_tensor(&f, "loss")->data[0];
    e = fabs(loss - ref_loss) / fabs(ref_loss);
    CHECK(e < 1e-5, "loss %.7f vs %.7f (rel %.3g)", loss, ref_loss, e);
    printf("loss     %.6f vs PyTorch %.6f, rel err %.2e\n", loss, ref_loss, e);

    /* backward: every parameter gradient */
    model_backward(&m);
    float *grads = mallocCheck(m.n_params * 4);
    model_get_grads(&m, grads);
    double worst = fixture_check_grads(&f, &m, grads, 1e-5, "fp32");
    printf("grads    worst rel err %.2e over %d tensors\n", worst, m.n_tensors);

    /* 10 AdamW steps on the same batch, clipping on, decay on matrices only */
    Config c;
    config_defaults(&c);
    c.lr = fixture_float(&f, 18); c.beta1 = fixture_float(&f, 19); c.beta2 = fixture_float(&f, 20); c.adam_eps = fixture_float(&f, 21);
    c.weight_decay = fixture_float(&f, 22); c.grad_clip = fixture_float(&f, 23);
    Optimizer opt;
    optimizer_init(&opt, &m, &c, NULL);
    const float *ref_losses = fixture_tensor(&f, "step_losses")->data;
    double worst_step = 0;
    for (int s = 0; s < steps; s++) {
        model_zero_grads(&m);
        double l = model_forward(&m, f.ids, f.targets, B, T, 1.0f / valid) / valid;
        model_backward(&m);
        optimizer_step(&opt, &m, c.lr, 1.0f);
        double se = fabs(l - ref_losses[s]) / fabs(ref_losses[s]);
        CHECK(se < 1e-5, "AdamW step %d: loss %.7f vs %.7f (rel %.3g)", s, l, ref_losses[s], se);
        if (se > worst_step) worst_step = se;
    }
    printf("adamw    %d steps, worst loss rel err %.2e (%.4f -> %.4f)\n", steps, worst_step, ref_losses[0], ref_losses[steps - 1]);

    /* generation through the KV cache gives the same logits as the full forward:
     * a 5-token prefill, then one token at a time */
    float *full = logits;
    model_logits(&m, f.ids, 1, T, full);
    double worst_kv = 0;
    for (int t = 4; t < T; t++) {
        const float *lg = t == 4 ? model_decode(&m, f.ids, 5, 0) : model_decode(&m, f.ids + t, 1, t);
        double num = 0, den = 0;
        for (int v = 0; v < mc.vocab_size; v++) {
            double d = lg[v] - full[(size_t)t * mc.vocab_size + v];
            num += d * d;
            den += (double)full[(size_t)t * mc.vocab_size + v] * full[(size_t)t * mc.vocab_size + v];
        }
        worst_kv = fmax(worst_kv, sqrt(num / den));
    }
    CHECK(worst_kv < 1e-5, "KV-cache decode vs full forward logits: rel err %.3g", worst_kv);
    printf("kv cache decode vs full forward: worst rel err %.2e\n", worst_kv);
    free(full);
    optimizer_free(&opt, m.be);
    model_free(&m);

    /* A step's first write of each gradient overwrites it: model_zero_grads zeroes only the embedding's. With the rest
     * filled with NaN first (the test knob LLM3D_POISON_GRADS=1), the backward must write every element, and give
     * the gradients of the first backward above (which the fixture checked against PyTorch), equal as numbers. */
    setenv("LLM3D_POISON_GRADS", "1", 1);
    Model mp;
    fixture_model(&f, &mp, backend_cpu(), &comm, RECOMPUTE_NONE);
    unsetenv("LLM3D_POISON_GRADS");
    model_zero_grads(&mp);
    float *pg = mallocCheck(mp.n_params * 4);
    model_get_grads(&mp, pg);
    size_t poisoned = 0, emb = (size_t)mp.V * mp.C, unequal = 0;
    for (size_t i = 0; i < mp.n_params; i++) poisoned += isnan(pg[i]);
    CHECK(mp.poison_grads && poisoned == mp.n_params - emb, "model_zero_grads poisoned %zu of the %zu gradients past the embedding's",
          poisoned, mp.n_params - emb);
    model_forward(&mp, f.ids, f.targets, B, T, 1.0f / valid);
    model_backward(&mp);
    model_get_grads(&mp, pg);
    for (size_t i = 0; i < mp.n_params; i++) unequal += !(pg[i] == grads[i]);
    CHECK(unequal == 0, "first writes: %zu of %zu gradients differ from the first backward's above (or stayed NaN)", unequal, mp.n_params);
    printf("first writes: %zu of %zu gradients poisoned before the backward, all written, equal to the first backward's above\n", poisoned,
           mp.n_params);
    model_free(&mp);
    free(pg);
    free(grads);
    fixture_free(&f);
    return test_summary();
}
