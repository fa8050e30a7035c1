/* checkpoint/consistency.c — a checkpoint must describe itself: its config text
 * read as a model, compared key by key with a run's, and its tensor table held
 * to exactly the tensors that model has (no more, no fewer, no overlaps), so a
 * file that contradicts itself is refused in words instead of half-read.
 * checkpoint_open_model is the one door every loader, export and inspect use. */
#define _XOPEN_SOURCE 700
#include "checkpoint.h"
#include "../common/util.h"
#include "../common/options.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int checkpoint_config_value(const char *text, const char *key, char *out, size_t size) {
    size_t k = strlen(key);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > k && !strncmp(p, key, k) && p[k] == '=') {
            snprintf(out, size, "%.*s", (int)(len - k - 1), p + k + 1);
            return 0;
        }
        p = nl ? nl + 1 : NULL;
    }
    return -1;
}

/* Two values of a config text alike: the same text, or the same float (a checkpoint written
 * before floats were printed shortest says 9.99999975e-06 where today's text says 1e-5). */
int checkpoint_same_value(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    char *ea, *eb;
    float x = strtof(a, &ea), y = strtof(b, &eb);
    return *a && *b && !*ea && !*eb && x == y;
}

int checkpoint_check_config(const char *saved, const char *current, const char *const *keys, int n_keys, const char *file,
                            char *err, size_t err_size) {
    for (int i = 0; i < n_keys && keys[i]; i++) {
        char a[256], b[256];
        if (checkpoint_config_value(saved, keys[i], a, sizeof a) != 0) {
            snprintf(err, err_size, "checkpoint '%s' records no '%s'; it cannot be checked against this run", file, keys[i]);
            return -1;
        }
        if (checkpoint_config_value(current, keys[i], b, sizeof b) != 0) b[0] = 0;
        if (!checkpoint_same_value(a, b)) {
            snprintf(err, err_size, "checkpoint '%s' was made with %s=%s but this run has %s=%s\n  hint: %s must stay the same to "
                     "continue from it; pass --%s=%s, or use a new run_dir (or drop --resume) to start over",
                     file, keys[i], a, keys[i], b, keys[i], keys[i], a);
            return -1;
        }
    }
    return 0;
}

int checkpoint_model_config(const char *text, ModelConfig *mc, char *err, size_t err_size) {
    const char *keys[] = {"vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "seq_len", "tie_embeddings", "rope_theta", "norm_eps"};
    double v[10];
    for (int i = 0; i < 10; i++) {
        char buf[64], *end;
        if (checkpoint_config_value(text, keys[i], buf, sizeof buf) != 0) {
            snprintf(err, err_size, "the checkpoint's config has no '%s'", keys[i]);
            return -1;
        }
        v[i] = strtod(buf, &end);
        if (end == buf || *end || !isfinite(v[i]) || (i < 8 && (v[i] != floor(v[i]) || fabs(v[i]) > 2147483647.0))) {
            snprintf(err, err_size, "the checkpoint's config has %s=%s, not a%s number", keys[i], buf, i < 8 ? " whole" : " finite");
            return -1;
        }
    }
    memset(mc, 0, sizeof *mc);
    mc->vocab_size = (int)v[0]; mc->dim = (int)v[1]; mc->n_layers = (int)v[2]; mc->n_heads = (int)v[3];
    mc->n_kv_heads = (int)v[4]; mc->ffn_dim = (int)v[5]; mc->seq_len = (int)v[6]; mc->tie_embeddings = (int)v[7];
    mc->rope_theta = (float)v[8]; mc->norm_eps = (float)v[9];
    char why[256];
    if (model_config_check(mc, why, sizeof why) != 0) {
        snprintf(err, err_size, "the checkpoint's config is not a model llm3d can build: %s", why);
        return -1;
    }
    return 0;
}

/* The model tensor a table entry stands for: its own name for a weight, the part after "<prefix>/" for run
 * state (optimizer moments); NULL for a name the model has no place for. */
static const ParamTensor *entry_tensor(const Model *m, const CkptEntry *e) {
    const char *slash = strrchr(e->name, '/');
    return model_find_tensor(m, slash ? slash + 1 : e->name);
}

int checkpoint_check_tensors(const CkptReader *r, const ModelConfig *mc, char *err, size_t err_size) {
    Comm comm;
    comm_init_one(&comm);
    Model m;
    model_plan(&m, mc, backend_cpu(), &comm, NULL, 1, 1, RECOMPUTE_NONE);   /* the tensor table alone, nothing allocated */
    int rc = 0;
    char prefixes[8][CKPT_NAME_BYTES];
    int counts[8] = {0}, n_prefixes = 0;
    for (int i = 0; i < r->n && !rc; i++) {
        const CkptEntry *e = &r->entries[i];
        if (!strcmp(e->name, FP8_CHECKPOINT_NAME)) continue;   /* precision=fp8's run state: its shape is checked on resume */
        const ParamTensor *t = entry_tensor(&m, e);
        if (!t) {
            snprintf(err, err_size, "'%s' holds the tensor '%s', which its config (n_layers=%d, tie_embeddings=%d) has no place for: the "
                     "config text and the tensor table disagree\n  hint: the file was altered or damaged; use an earlier checkpoint",
                     r->path, e->name, mc->n_layers, mc->tie_embeddings);
            rc = -1;
            break;
        }
        int64_t rows, cols;
        ckpt_entry_dims(e, &rows, &cols);
        if (e->ndim != (t->global_rows == 1 ? 1 : 2) || rows != t->global_rows || cols != t->global_cols) {
            char shape[CKPT_MAX_DIMS * 21];
            snprintf(err, err_size, "'%s': its config needs '%s' of %d x %d and the tensor table holds %s: the config text and the "
                     "tensor table disagree\n  hint: the file was altered or damaged; use an earlier checkpoint", r->path, e->name,
                     t->global_rows, t->global_cols, ckpt_shape_text(e->shape, e->ndim, shape, sizeof shape));
            rc = -1;
            break;
        }
        const char *slash = strrchr(e->name, '/');
        if (!slash) continue;
        int k = 0, len = (int)(slash - e->name);
        while (k < n_prefixes && (strncmp(prefixes[k], e->name, (size_t)len) || prefixes[k][len])) k++;
        if (k == n_prefixes) {
            if (n_prefixes == 8) { snprintf(err, err_size, "'%s' holds run state under more than 8 prefixes: the file is damaged", r->path); rc = -1; break; }
            snprintf(prefixes[n_prefixes++], CKPT_NAME_BYTES, "%.*s", len, e->name);
        }
        counts[k]++;
    }
    /* every weight is there (names are unique, so each prefix's count says whether its set is whole) */
    for (int i = 0; i < m.n_tensors && !rc; i++) {
        const ParamTensor *t = &m.tensors[i];
        if (!ckpt_find(r, t->name)) {
            snprintf(err, err_size, "'%s': its config (vocab_size=%d dim=%d n_layers=%d tie_embeddings=%d) needs the weight '%s', and the "
                     "tensor table has none: the config text and the tensor table disagree\n  hint: the file was altered or damaged; use "
                     "an earlier checkpoint", r->path, mc->vocab_size, mc->dim, mc->n_layers, mc->tie_embeddings, t->name);
            rc = -1;
        }
    }
    for (int k = 0; k < n_prefixes && !rc; k++)
        for (int i = 0; i < m.n_tensors && !rc && counts[k] != m.n_tensors; i++) {
            char name[2 * CKPT_NAME_BYTES + 1100];
            snprintf(name, sizeof name, "%s/%s", prefixes[k], m.tensors[i].name);
            if (!ckpt_find(r, name)) {
                snprintf(err, err_size, "'%s': it holds run state under '%s/' but not '%s', which its config (n_layers=%d) needs: the config "
                         "text and the tensor table disagree\n  hint: the file was altered or damaged; use an earlier checkpoint", r->path,
                         prefixes[k], name, mc->n_layers);
                rc = -1;
            }
        }
    model_plan_free(&m);
    return rc;
}

int checkpoint_open_model(CkptReader *r, const char *path, ModelConfig *mc, char *err, size_t err_size) {
    if (ckpt_open(r, path, err, err_size) != 0) return -1;
    char why[256];
    int rc = checkpoint_model_config(r->config_text, mc, why, sizeof why);
    if (rc != 0) snprintf(err, err_size, "'%.1000s': %s", path, why);
    else rc = checkpoint_check_tensors(r, mc, err, err_size);
    if (rc != 0) ckpt_close(r);
    return rc;
}
