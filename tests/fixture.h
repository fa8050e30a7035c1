/* tests/fixture.h — reads tests/fixtures/llama_small.bin, the PyTorch reference
 * written by tests/make_fixture.py, and builds the model it describes on any
 * backend with its weights. Shared by the CPU and GPU whole-model tests. */
#pragma once
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../common/util.h"
#include "../model/llama.h"

#define FIXTURE_PATH "tests/fixtures/llama_small.bin"

typedef struct { char name[96]; int rows, cols; float *data; } FixTensor;
typedef struct {
    int h[256];             /* header: magic, version, V, C, L, NH, NKV, F, B, T, tied, steps, ignore, n_tensors; floats at 16.. */
    int *ids, *targets;     /* (B,T) each */
    FixTensor *t;
    int n;
    ModelConfig mc;
    int B, T, steps, valid;
} Fixture;

static inline float fixture_float(const Fixture *f, int i) { float x; memcpy(&x, &f->h[i], 4); return x; }

static inline void fixture_load(Fixture *f) {
    const char *path = FIXTURE_PATH;
    FILE *fp = fopenCheck(path, "rb");
    freadCheck(f->h, 4, 256, fp, path);
    if (f->h[0] != 0x58495446 || f->h[1] != 1) die("'%s' is not a version-1 llm3d test fixture; regenerate with tests/make_fixture.py", path);
    f->B = f->h[8]; f->T = f->h[9]; f->steps = f->h[11];
    int BT = f->B * f->T;
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
    ModelConfig mc = {.vocab_size = f->h[2], .dim = f->h[3], .n_layers = f->h[4], .n_heads = f->h[5], .n_kv_heads = f->h[6],
                      .ffn_dim = f->h[7], .seq_len = f->T, .tie_embeddings = f->h[10],
                      .rope_theta = fixture_float(f, 16), .norm_eps = fixture_float(f, 17)};
    f->mc = mc;
    f->valid = 0;
    for (int i = 0; i < BT; i++) f->valid += f->targets[i] != IGNORE_INDEX;
}

static inline void fixture_free(Fixture *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].data);
    free(f->t), free(f->ids), free(f->targets);
}

static inline const FixTensor *fixture_tensor(const Fixture *f, const char *name) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->t[i].name, name)) return &f->t[i];
    die("fixture has no tensor '%s'", name);
}

/* The fixture's model on backend be, weights set by name. */
static inline void fixture_model(const Fixture *f, Model *m, const Backend *be, const Comm *comm, int recompute) {
    model_create(m, &f->mc, be, comm, NULL, f->B, f->T, recompute);
    float *host = callocCheck(m->n_params, 4);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        const FixTensor *ft = fixture_tensor(f, t->name);
        if (ft->rows * ft->cols != t->rows * t->cols) die("fixture %s is %dx%d, the model's %dx%d", t->name, ft->rows, ft->cols, t->rows, t->cols);
        memcpy(host + t->offset, ft->data, (size_t)t->rows * t->cols * 4);
    }
    model_set_params(m, host);
    free(host);
}

/* ||a - ref|| / ||ref||; inf when a holds a NaN or inf. */
static inline double fixture_rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Each parameter gradient (host copy, n_params) against the fixture's: one
 * CHECK per tensor at tolerance tol (tests/test.h must come first). Returns the worst error. */
static inline double fixture_check_grads(const Fixture *f, const Model *m, const float *grads, double tol, const char *label) {
    double worst = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad:%s", t->name);
        double e = fixture_rel_err(grads + t->offset, fixture_tensor(f, name)->data, (size_t)t->rows * t->cols);
        CHECK(e < tol, "%s gradient of %s rel err %.3g", label, t->name, e);
        if (e > worst) worst = e;
    }
    return worst;
}
