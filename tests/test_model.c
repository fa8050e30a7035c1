/* tests/test_model.c — the whole model against PyTorch.
 *
 * tests/fixtures/llama_small.bin (written by tests/make_fixture.py in float64)
 * holds a small LLaMA with GQA, an untied head and T = 13: its weights, inputs,
 * logits, loss, every parameter gradient, and the losses of 10 AdamW steps.
 * llm3d's fp32 CPU model must match each within 1e-5 relative (L2 norm). */
#include "test.h"
#include "../common/util.h"
#include "../model/llama.h"
#include "../train/optimizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char name[96]; int rows, cols; float *data; } FixTensor;
typedef struct {
    int h[256];
    int *ids, *targets;
    FixTensor *t;
    int n;
} Fixture;

static float hfloat(const Fixture *f, int i) { float x; memcpy(&x, &f->h[i], 4); return x; }

static void load_fixture(Fixture *f, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    freadCheck(f->h, 4, 256, fp, path);
    if (f->h[0] != 0x58495446 || f->h[1] != 1) die("'%s' is not a version-1 llm3d test fixture; regenerate with tests/make_fixture.py", path);
    int BT = f->h[8] * f->h[9];
    f->ids = mallocCheck(BT * 4); f->targets = mallocCheck(BT * 4);
    freadCheck(f->ids, 4, BT, fp, path);
    freadCheck(f->targets, 4, BT, fp, path);
    f->n = f->h[13];
    f->t = callocCheck(f->n, sizeof(FixTensor));
    for (int i = 0; i < f->n; i++) {
        FixTensor *t = &f->t[i];
        freadCheck(t->name, 1, 96, fp, path);
        freadCheck(&t->rows, 4, 1, fp, path);
        freadCheck(&t->cols, 4, 1, fp, path);
        t->data = mallocCheck((size_t)t->rows * t->cols * 4);
        freadCheck(t->data, 4, (size_t)t->rows * t->cols, fp, path);
    }
    fclose(fp);
}

static const FixTensor *fix(const Fixture *f, const char *name) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->t[i].name, name)) return &f->t[i];
    die("fixture has no tensor '%s'", name);
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

int main(void) {
    Fixture f;
    load_fixture(&f, "tests/fixtures/llama_small.bin");
    ModelConfig mc = {.vocab_size = f.h[2], .dim = f.h[3], .n_layers = f.h[4], .n_heads = f.h[5], .n_kv_heads = f.h[6],
                      .ffn_dim = f.h[7], .seq_len = f.h[9], .tie_embeddings = f.h[10], .rope_theta = hfloat(&f, 16),
                      .norm_eps = hfloat(&f, 17)};
    int B = f.h[8], T = f.h[9], steps = f.h[11];
    Comm comm;
    comm_init(&comm, 1, 1, 1);
    Model m;
    model_create(&m, &mc, backend_cpu(), &comm, B, T, RECOMPUTE_NONE);
    CHECK(m.n_params == model_count_params(&mc), "n_params %zu vs count %zu", m.n_params, model_count_params(&mc));

    /* weights in by name */
    float *host = callocCheck(m.n_params, 4);
    for (int i = 0; i < m.n_tensors; i++) {
        const ParamTensor *t = &m.tensors[i];
        const FixTensor *ft = fix(&f, t->name);
        CHECK(ft->rows * ft->cols == t->rows * t->cols, "%s: %dx%d vs %dx%d", t->name, ft->rows, ft->cols, t->rows, t->cols);
        memcpy(host + t->offset, ft->data, (size_t)t->rows * t->cols * 4);
    }
    model_set_params(&m, host);

    /* forward: logits before the loss overwrites them with their gradient */
    int valid = 0;
    for (int i = 0; i < B * T; i++) valid += f.targets[i] != IGNORE_INDEX;
    model_forward(&m, f.ids, NULL, B, T, 0);
    const FixTensor *lg = fix(&f, "logits");
    double e = rel_err(m.logits, lg->data, (size_t)B * T * mc.vocab_size);
    CHECK(e < 1e-5, "logits rel err %.3g", e);
    printf("logits   rel err %.2e\n", e);
    double loss = model_forward(&m, f.ids, f.targets, B, T, 1.0f / valid) / valid;
    float ref_loss = fix(&f, "loss")->data[0];
    e = fabs(loss - ref_loss) / fabs(ref_loss);
    CHECK(e < 1e-5, "loss %.7f vs %.7f (rel %.3g)", loss, ref_loss, e);
    printf("loss     %.6f vs PyTorch %.6f, rel err %.2e\n", loss, ref_loss, e);

    /* backward: every parameter gradient */
    model_zero_grads(&m);
    model_backward(&m);
    float *grads = mallocCheck(m.n_params * 4);
    model_get_grads(&m, grads);
    double worst = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const ParamTensor *t = &m.tensors[i];
        char gname[128];
        snprintf(gname, sizeof gname, "grad:%s", t->name);
        double ge = rel_err(grads + t->offset, fix(&f, gname)->data, (size_t)t->rows * t->cols);
        CHECK(ge < 1e-5, "gradient of %s rel err %.3g", t->name, ge);
        if (ge > worst) worst = ge;
    }
    printf("grads    worst rel err %.2e over %d tensors\n", worst, m.n_tensors);

    /* 10 AdamW steps on the same batch, clipping on, decay on matrices only */
    Config c;
    config_defaults(&c);
    c.lr = hfloat(&f, 18); c.beta1 = hfloat(&f, 19); c.beta2 = hfloat(&f, 20); c.adam_eps = hfloat(&f, 21);
    c.weight_decay = hfloat(&f, 22); c.grad_clip = hfloat(&f, 23);
    Optimizer opt;
    optimizer_init(&opt, &m, &c);
    const float *ref_losses = fix(&f, "step_losses")->data;
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
    model_forward(&m, f.ids, NULL, 1, T, 0);
    float *full = mallocCheck((size_t)T * mc.vocab_size * 4);
    memcpy(full, m.logits, (size_t)T * mc.vocab_size * 4);
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
    free(host); free(grads);
    return test_summary();
}
