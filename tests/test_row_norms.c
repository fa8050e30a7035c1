/* tests/test_row_norms.c — `build/train inspect --row_norms=NAME PATH` (checkpoint/row_norms.c) against a
 * CPU reference: a small model's checkpoint (scratch_save_checkpoint: seeded weights), one row of its
 * embedding set far above the rest and one to zero, then the line inspect prints for the embedding and
 * for a 1-D tensor against the norms computed here in double from the weights themselves (the same
 * model_init_weights, not read back through the checkpoint reader). Asserted: largest, mean and smallest
 * to the printed digits, the rows named, that the row-norm path ran (its line, and not inspect's table),
 * and a run_dir resolving to its checkpoint. Bad input, each one line naming the key and a non-zero exit:
 * a tensor the checkpoint lacks, an empty --row_norms, --row_norms with --allow_nonfinite=1, a Hugging Face
 * export. bench/gpu/q8_quality.sh prints the largest embedding-row norm of an AdamW and an 8-bit run so. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../common/util.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static char dir[] = "/tmp/llm3d_test_row_norms_XXXXXX", err[4096], out[1 << 16];

#include "scratch.h"

static char train[512];
static const char *CONFIG = "vocab_size=40\ndim=16\nn_layers=1\nn_heads=2\nn_kv_heads=1\nffn_dim=32\nseq_len=4\ntie_embeddings=0\n"
                            "rope_theta=10000\nnorm_eps=1e-05\nseed=7\n";
#define BIG_ROW 13    /* every element 0.5: norm 0.5 * sqrt(16) = 2 */
#define ZERO_ROW 29   /* every element 0 */

#define run(...) test_runf(train, out, sizeof out, __VA_ARGS__)

/* The checkpoint: scratch_save_checkpoint's model, with the two rows set, saved as step 1 into run/. */
static void save(const char *run_dir, Model *m, char *ckpt, size_t size) {
    ModelConfig mc;
    CHECK(checkpoint_model_config(CONFIG, &mc, err, sizeof err) == 0, "fixture config: %s", err);
    Comm comm;
    comm_init_one(&comm);
    model_create(m, &mc, backend_cpu(), &comm, NULL, 1, 4, RECOMPUTE_NONE);
    model_init_weights(m, 7, 0.02f);
    const ParamTensor *e = model_find_tensor(m, "model.embed_tokens.weight");
    for (int k = 0; k < e->cols; k++) {
        m->params[e->offset + (size_t)BIG_ROW * e->cols + k] = 0.5f;
        m->params[e->offset + (size_t)ZERO_ROW * e->cols + k] = 0.0f;
    }
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = 1, .loss_scale = 1, .optimizer = CKPT_OPT_NONE};
    checkpoint_save(run_dir, 0, m, NULL, 0, &s, CONFIG, ckpt, size);
}

/* Largest, mean, smallest row norm of tensor t of m (rows x cols as the checkpoint stores it), in double. */
typedef struct { double largest, mean, smallest; long long at_largest, at_smallest, rows, cols; } Norms;
static Norms reference(const Model *m, const ParamTensor *t) {
    Norms n = {-1, 0, INFINITY, 0, 0, t->rows, t->cols};
    for (int i = 0; i < t->rows; i++) {
        double ss = 0;
        for (int k = 0; k < t->cols; k++) { double w = m->params[t->offset + (size_t)i * t->cols + k]; ss += w * w; }
        double r = sqrt(ss);
        n.mean += r / t->rows;
        if (r > n.largest) { n.largest = r; n.at_largest = i; }
        if (r < n.smallest) { n.smallest = r; n.at_smallest = i; }
    }
    return n;
}

/* inspect's line for tensor name against the reference, to the 6 decimals it prints */
static void check_line(const char *path, const char *name, Norms want, const char *what) {
    int rc = run("inspect --row_norms=%s %s", name, path);
    char head[300];
    snprintf(head, sizeof head, "row norms of %s (%lld x %lld) in ", name, want.rows, want.cols);
    const char *p = strstr(out, head), *q = p ? strstr(p, ": largest ") : NULL;
    Norms got = {0};
    int fields = q ? sscanf(q, ": largest %lf (row %lld), mean %lf, smallest %lf (row %lld)", &got.largest, &got.at_largest, &got.mean,
                            &got.smallest, &got.at_smallest) : 0;
    CHECK(rc == 0 && fields == 5 && !strstr(out, "tensors\n"), "%s: inspect --row_norms printed its one line, not the table (rc %d): %s", what, rc,
          out);
    CHECK(fabs(got.largest - want.largest) <= 1e-6 && fabs(got.mean - want.mean) <= 1e-6 && fabs(got.smallest - want.smallest) <= 1e-6 &&
              got.at_largest == want.at_largest && got.at_smallest == want.at_smallest,
          "%s: largest %.6f (row %lld), mean %.6f, smallest %.6f (row %lld); the reference %.6f (row %lld), %.6f, %.6f (row %lld)", what,
          got.largest, got.at_largest, got.mean, got.smallest, got.at_smallest, want.largest, want.at_largest, want.mean, want.smallest,
          want.at_smallest);
    printf("%s: %s", what, p ? p : out);
}

static void refused(int rc, const char *needle, const char *what) {
    CHECK(rc != 0 && strstr(out, needle), "%s: want a non-zero exit and '%s', got rc %d: %s", what, needle, rc, out);
}

int main(void) {
    if (!mkdtemp(dir)) die("cannot make a temporary folder");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train, sizeof train, "timeout 60 %s/train", build);
    char ckpt[1200], run_dir[600];
    snprintf(run_dir, sizeof run_dir, "%s", path_of("run"));
    Model m;
    save(run_dir, &m, ckpt, sizeof ckpt);
    Norms e = reference(&m, model_find_tensor(&m, "model.embed_tokens.weight"));
    CHECK(e.at_largest == BIG_ROW && fabs(e.largest - 2.0) < 1e-12 && e.at_smallest == ZERO_ROW && e.smallest == 0,
          "the fixture: row %d is the largest (2) and row %d the smallest (0)", BIG_ROW, ZERO_ROW);
    check_line(ckpt, "model.embed_tokens.weight", e, "embedding, checkpoint folder");
    check_line(run_dir, "model.embed_tokens.weight", e, "embedding, run_dir (its newest checkpoint)");
    check_line(ckpt, "model.norm.weight", reference(&m, model_find_tensor(&m, "model.norm.weight")), "1-D tensor (one row)");
    check_line(ckpt, "lm_head.weight", reference(&m, model_find_tensor(&m, "lm_head.weight")), "the LM head");

    refused(run("inspect --row_norms=model.embed_tokens.weights %s", ckpt), "--row_norms=model.embed_tokens.weights: ", "a tensor it lacks");
    CHECK(strstr(out, "holds no tensor of that name") && strstr(out, "lists its tensors"), "the lacking tensor's message says how to list "
          "them: %s", out);
    refused(run("inspect --row_norms= %s", ckpt), "--row_norms is empty", "an empty --row_norms");
    refused(run("inspect --row_norms=model.norm.weight --allow_nonfinite=1 %s", ckpt), "--row_norms and --allow_nonfinite=1 do not go together",
            "--row_norms with --allow_nonfinite=1");
    hf_export(ckpt, path_of("hf"), CKPT_F32);
    refused(run("inspect --row_norms=model.embed_tokens.weight %s", path_of("hf")), "--row_norms reads llm3d checkpoints", "a Hugging Face folder");
    refused(run("inspect --row_norms=model.embed_tokens.weight %s/model.safetensors", path_of("hf")), "is a Hugging Face export",
            "a .safetensors file");
    model_free(&m);
    scratch_remove(dir);
    return test_summary();
}
