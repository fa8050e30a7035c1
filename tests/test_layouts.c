/* tests/test_layouts.c — llm3d's promise, end to end: with the same seed and
 * the same total batch, every dp x tp x pp layout trains on the same sequences
 * and gives the same losses and weights as one rank, to rounding.
 *
 * It runs the real program: one rank for the reference, then each layout
 * under `mpirun --oversubscribe` (CPU ranks, a tiny model), and compares the
 * loss of every step and the validation loss (from --log_jsonl) and every
 * tensor of the final checkpoint — weights and both AdamW moments, stored
 * whole by name whatever the layout — within 1e-5 relative (fp32; emulated
 * bf16 within its rounding). Then resume across layouts: a checkpoint written
 * at step 2 by one layout, continued by another, must end where the reference
 * ends. LLM3D_TEST_ARGS adds settings to every run: tests/gpu/parallel.sh runs
 * the same equalities on one GPU shared by the ranks ("--device=cuda"). */
#include "test.h"
#include "../common/util.h"
#include "../data/shard.h"
#include "../checkpoint/format.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[128], out[1 << 16];
static const char *mpirun = "mpirun --allow-run-as-root --oversubscribe";

#define BASE "--dim=32 --n_layers=4 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=2 " \
             "--total_batch_tokens=256 --max_steps=3 --warmup_steps=1 --lr=3e-3 --eval_every=3 --eval_batches=4 " \
             "--log_every=1 --sample_tokens=0 --checkpoint_every=0 --keep_checkpoints=0"

typedef struct { double loss[8], val; int steps; } Curve;

/* Runs build/train (under mpirun with ranks > 1) into run_dir <dir>/<name>; returns the exit code. */
static int train(const char *name, int ranks, const char *args) {
    char cmd[4096], a[4096];
    const char *extra = getenv("LLM3D_TEST_ARGS");   /* e.g. "--device=cuda --comm_backend=mpi" on a GPU machine */
    snprintf(a, sizeof a, "%s --train_data=%s/train.bin --val_data=%s/val.bin --run_dir=%s/%s --log_jsonl=%s/%s.jsonl %s %s",
             BASE, dir, dir, dir, name, dir, name, args, extra ? extra : "");
    if (ranks > 1) snprintf(cmd, sizeof cmd, "timeout 120 %s -np %d build/train", mpirun, ranks);
    else snprintf(cmd, sizeof cmd, "timeout 120 build/train");
    int rc = test_run(cmd, a, out, sizeof out);
    if (rc != 0) printf("--- %s (rc %d):\n%s\n", name, rc, out);
    return rc;
}

static Curve read_curve(const char *name) {
    Curve c = {.val = NAN};
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return c;
    while (fgets(line, sizeof line, f)) {
        char *p;
        if ((p = strstr(line, "\"val_loss\": "))) c.val = atof(p + 12);
        else if ((p = strstr(line, "\"loss\": ")) && c.steps < 8) c.loss[c.steps++] = atof(p + 8);
    }
    fclose(f);
    return c;
}

/* The largest relative L2 difference over every tensor of two checkpoints (name by name). */
static double compare_checkpoints(const char *a_name, int a_step, const char *b_name, int b_step, char *worst, size_t worst_size) {
    char pa[512], pb[512], err[1024];
    snprintf(pa, sizeof pa, "%s/%s/ckpt_%08d/state.bin", dir, a_name, a_step);
    snprintf(pb, sizeof pb, "%s/%s/ckpt_%08d/state.bin", dir, b_name, b_step);
    CkptReader ra, rb;
    if (ckpt_open(&ra, pa, err, sizeof err) != 0) { snprintf(worst, worst_size, "%s", err); return INFINITY; }
    if (ckpt_open(&rb, pb, err, sizeof err) != 0) { ckpt_close(&ra); snprintf(worst, worst_size, "%s", err); return INFINITY; }
    double most = ra.n == rb.n ? 0 : INFINITY;
    snprintf(worst, worst_size, ra.n == rb.n ? "-" : "different tensor counts");
    for (int i = 0; i < ra.n && isfinite(most); i++) {
        const CkptEntry *ea = &ra.entries[i], *eb = ckpt_find(&rb, ea->name);
        if (!eb) { snprintf(worst, worst_size, "%s missing", ea->name); most = INFINITY; break; }
        int64_t rows, cols;
        ckpt_entry_dims(ea, &rows, &cols);
        float *x = mallocCheck((size_t)(rows * cols) * 4), *y = mallocCheck((size_t)(rows * cols) * 4);
        if (ckpt_read_f32(&ra, ea, 0, rows, 0, cols, x, err, sizeof err) || ckpt_read_f32(&rb, eb, 0, rows, 0, cols, y, err, sizeof err)) {
            snprintf(worst, worst_size, "%s", err);
            most = INFINITY;
        } else {
            double num = 0, den = 0;
            for (int64_t k = 0; k < rows * cols; k++) { num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]); den += (double)x[k] * x[k]; }
            double rel = sqrt(num / (den > 0 ? den : 1));
            if (!(rel <= most)) { most = rel; snprintf(worst, worst_size, "%s", ea->name); }
        }
        free(x); free(y);
    }
    ckpt_close(&ra); ckpt_close(&rb);
    return most;
}

/* The layout's losses and final tensors against the reference's. */
static void check_same(const char *ref, const char *name, double tol, double tensor_tol, const char *what) {
    Curve r = read_curve(ref), c = read_curve(name);
    double worst_loss = r.steps == c.steps && r.steps > 0 ? 0 : INFINITY;
    for (int s = 0; s < r.steps && s < c.steps; s++) worst_loss = fmax(worst_loss, fabs(c.loss[s] - r.loss[s]) / fabs(r.loss[s]));
    double val = fabs(c.val - r.val) / fabs(r.val);
    char worst[1200];
    double w = compare_checkpoints(ref, 3, name, 3, worst, sizeof worst);
    CHECK(worst_loss <= tol, "%s: step losses differ from one rank's by %.3g (tolerance %g; %d vs %d steps)", what, worst_loss, tol, c.steps, r.steps);
    CHECK(val <= tol, "%s: val loss %.6f vs one rank's %.6f", what, c.val, r.val);
    CHECK(w <= tensor_tol, "%s: final tensors differ from one rank's by %.3g (worst: %s)", what, w, worst);
    printf("%-44s losses %.1e  val %.1e  tensors %.1e (%s)\n", what, worst_loss, val, w, worst);
}

static void layout_tol(const char *ref, const char *name, int ranks, const char *args, double tol, double tensor_tol) {
    if (train(name, ranks, args) != 0) { CHECK(0, "%s (%d ranks) failed to run", args, ranks); return; }
    char what[256];
    snprintf(what, sizeof what, "%s", args);
    check_same(ref, name, tol, tensor_tol, what);
}
static void layout(const char *ref, const char *name, int ranks, const char *args, double tol) { layout_tol(ref, name, ranks, args, tol, tol); }

/* Save at step 2 with one layout, continue to step 3 with another: the end must be the reference's. */
static void resume(const char *ref, const char *name, int r1, const char *a1, int r2, const char *a2) {
    const double tol = 1e-5;
    char args[1024], path[1024], what[512];
    snprintf(args, sizeof args, "%s --checkpoint_every=2", a1);
    if (train(name, r1, args) != 0) { CHECK(0, "resume: %s failed to run", a1); return; }
    snprintf(path, sizeof path, "rm -rf %s/%s/ckpt_00000003 %s/%s.jsonl", dir, name, dir, name);
    if (system(path) != 0) die("test: cannot clean up");
    snprintf(args, sizeof args, "%s --resume=1", a2);
    if (train(name, r2, args) != 0) { CHECK(0, "resume: %s after %s failed to run", a2, a1); return; }
    CHECK(strstr(out, "resume | step 2 from"), "resume: '%s' after '%s' did not resume from step 2:\n%s", a2, a1, out);
    /* the continued run logged step 3 only: compare it with the reference's step 3, and the final tensors */
    Curve r = read_curve(ref), c = read_curve(name);
    double dl = c.steps == 1 ? fabs(c.loss[0] - r.loss[2]) / r.loss[2] : INFINITY;
    char worst[1200];
    double w = compare_checkpoints(ref, 3, name, 3, worst, sizeof worst);
    snprintf(what, sizeof what, "resume [%s] -> [%s]", a1, a2);
    CHECK(dl <= tol, "%s: step 3 loss differs by %.3g", what, dl);
    CHECK(w <= tol, "%s: final tensors differ by %.3g (worst: %s)", what, w, worst);
    printf("%-60s step-3 loss %.1e  tensors %.1e\n", what, dl, w);
}

/* A bad launch: non-zero exit, every rank ends (timeout), the message said once. */
static void refused(int ranks, const char *args, const char *words) {
    char cmd[1024], a[4096];
    if (ranks > 1) snprintf(cmd, sizeof cmd, "timeout 60 %s -np %d build/train", mpirun, ranks);
    else snprintf(cmd, sizeof cmd, "timeout 60 build/train");
    snprintf(a, sizeof a, "%s --train_data=%s/train.bin --val_data=%s/val.bin --run_dir=%s/bad %s", BASE, dir, dir, dir, args);
    int rc = test_run(cmd, a, out, sizeof out);
    const char *at = strstr(out, words);
    CHECK(rc != 0 && rc != 124 && at, "'%s' on %d ranks: want a non-zero exit (not a timeout) saying '%s', got rc %d:\n%s", args, ranks, words, rc, out);
    CHECK(!at || !strstr(at + 1, words), "'%s': the message is printed once, not by every rank:\n%s", args, out);
}

static void make_data(void) {
    snprintf(dir, sizeof dir, "/tmp/llm3d_test_layouts_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd) != 0) die("test: cannot make %s", dir);
    const int vocab = 61;   /* odd: a vocabulary no tp divides */
    Rng r;
    rng_seed(&r, 5);
    for (int split = 0; split < 2; split++) {
        int64_t n = split ? 2000 : 20000;
        uint32_t *tok = mallocCheck(n * sizeof(uint32_t));
        for (int64_t i = 0; i < n; i++) tok[i] = (uint32_t)(rng_u64(&r) % vocab);
        char path[512];
        snprintf(path, sizeof path, "%s/%s.bin", dir, split ? "val" : "train");
        shard_write(path, tok, n, vocab);
        free(tok);
    }
}

int main(void) {
#ifndef LLM3D_MPI
    printf("skipped: this build has no Open MPI, so only the one-rank grid exists\n");
    return test_summary();
#endif
    make_data();
    const double fp32 = 1e-5, bf16 = 1e-3;
    /* references: one rank */
    if (train("ref", 1, "") || train("ref8", 1, "--optimizer=adamw8bit") || train("refbf", 1, "--precision=bf16") ||
        train("ref16", 1, "--precision=fp16 --recompute=selective"))
        die("test: the one-rank reference run failed:\n%s", out);
    /* data parallel */
    layout("ref", "dp2", 2, "--dp=2", fp32);
    layout("ref", "dp4", 4, "--dp=4", fp32);
    layout("ref", "dp2z", 2, "--dp=2 --zero=1", fp32);
    layout("ref", "dp4z", 4, "--dp=4 --zero=1", fp32);
    layout("ref", "dp2rf", 2, "--dp=2 --recompute=full", fp32);
    layout("ref", "dp2b", 2, "--dp=2 --bucket_mb=0.004", fp32);
    layout("ref8", "dp2q", 2, "--dp=2 --optimizer=adamw8bit", fp32);
    layout("ref8", "dp4zq", 4, "--dp=4 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", fp32);
    layout("refbf", "dp2bf", 2, "--dp=2 --precision=bf16", bf16);
    layout("refbf", "dp2zbf", 2, "--dp=2 --zero=1 --precision=bf16", bf16);
    /* gradients sent in bf16 lose precision on purpose: the losses stay within bf16 rounding, AdamW's moments within a few % */
    layout_tol("refbf", "dp2w", 2, "--dp=2 --zero=1 --precision=bf16 --grad_reduce_dtype=bf16", bf16, 5e-2);
    /* pipeline and tensor parallel, and all three */
    layout("ref", "pp2", 2, "--pp=2", fp32);
    layout("ref", "pp4", 4, "--pp=4", fp32);
    layout("ref", "pp2g", 2, "--pp=2 --pp_schedule=gpipe", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "pp2u", 2, "--pp=2 --pp_layers=3,1", fp32);
    layout("ref", "tp2", 2, "--tp=2", fp32);
    layout("ref", "dp2pp2", 4, "--dp=2 --pp=2 --zero=1", fp32);
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("refbf", "pp2bf", 2, "--pp=2 --precision=bf16 --recompute=full", bf16);
    layout("ref16", "pp2f16", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective", bf16);
    layout("ref8", "dp2pp2q", 4, "--dp=2 --pp=2 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", fp32);
    /* resume across layouts */
    resume("ref", "r21", 2, "--dp=2", 1, "");
    resume("ref", "r14", 1, "", 4, "--dp=4");
    resume("ref", "rz", 2, "--dp=2 --zero=1", 2, "--dp=2");
    resume("ref", "rp", 2, "--pp=2", 4, "--pp=4");
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
    resume("ref8", "r8", 4, "--dp=4 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", 1, "--optimizer=adamw8bit");
    /* bad launches: one clear line, every rank out */
    refused(2, "--dp=4", "dp*pp*tp = 4*1*1 = 4, but 2 ranks were launched");
    refused(2, "--dp=3", "not a multiple of batch_size*seq_len*dp = 2*16*3");
    refused(1, "--dp=2", "runs alone");
    refused(2, "--dp=2 --device=cuda --comm_backend=nccl", "comm_backend=nccl");
    refused(4, "--pp=4 --total_batch_tokens=64", "needs at least 4 micro-batches");
    refused(2, "--tp=2 --n_kv_heads=1", "tp=2 must divide");
    refused(2, "--dp=2 --bucket_mb=0", "bucket_mb");
    refused(2, "--pp=2 --pp_layers=3,3", "adds up to 6 layers");
    refused(2, "--dp=2 --grad_reduce_dtype=bf16", "grad_reduce_dtype=bf16 sends the gradients in the compute dtype");
    /* ranks launched with different configs (MPMD: one command line per rank) */
    {
        char a[4096], cmd[4096];
        snprintf(cmd, sizeof cmd, "timeout 60 %s -np 1 build/train --dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=1e-3 : -np 1 build/train",
                 mpirun, dir, dir);
        snprintf(a, sizeof a, "--dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=2e-3", dir, dir);
        int rc = test_run(cmd, a, out, sizeof out);
        CHECK(rc != 0 && rc != 124 && strstr(out, "different config") && strstr(out, "lr="),
              "ranks with different configs: want the key named, got rc %d:\n%s", rc, out);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_summary();
}
