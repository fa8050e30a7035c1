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
 * ends. Tensor parallelism is checked on the odd vocabulary of the test data
 * (61: no tp divides it, so every tp run pads it), with GQA at n_kv_heads = tp
 * and 2*tp, tied and untied, with and without sequence parallelism; its Hugging
 * Face export equals the one-rank run's, and the memory plan of every rank
 * equals what that rank allocated. compute_weights=per_layer (each layer cast
 * from the fp32 master just before it runs) gives the very bits of keep under
 * data, tensor and pipeline parallelism. ZeRO-2 and ZeRO-3 (zero_stages; `test_layouts --zero` runs that part
 * alone) give one rank's losses and tensors too. LLM3D_TEST_ARGS adds settings to every run
 * (tests/gpu/parallel.sh: "--device=cuda --comm_backend=mpi", one GPU shared by the ranks). */
#include "test.h"
#include "../common/util.h"
#include "../data/shard.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[128], out[1 << 16];
static const char *mpirun = "mpirun --allow-run-as-root --oversubscribe";
static int on_gpu;   /* --device=cuda: every run on the GPU, several ranks sharing it through MPI */

/* adam_eps=1e-5 rather than 1e-8: a layout changes the order of fp32 sums (tp splits matmuls, dp and tp
 * sum partial results), so gradients differ from one rank's at ~1e-7 of their size; AdamW's first update,
 * g/(|g|+eps), turns that into weight differences of up to ~5e-5 (relative, per tensor) through the few
 * elements whose gradient is near eps (measured: tp=4, eps 1e-8: 5e-5, 1e-6: 9e-6, 1e-5: 1.5e-6), and the
 * comparison would measure that amplifier instead of the layout. The typical gradient here is ~3e-5. */
#define BASE "--dim=32 --n_layers=4 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=2 " \
             "--total_batch_tokens=256 --max_steps=3 --warmup_steps=1 --lr=3e-3 --adam_eps=1e-5 --eval_every=3 --eval_batches=4 " \
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

/* The Hugging Face export of a tp run's final checkpoint equals the one-rank run's (every tensor within 1e-5). */
static void export_same(const char *ref, const char *name, const char *model_args, int tied) {
    char cmd[1024], a[1024], hr[512], hn[512], err[1024];
    snprintf(hr, sizeof hr, "%s/hf_%s", dir, ref);
    snprintf(hn, sizeof hn, "%s/hf_%s", dir, name);
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "--checkpoint=%s/%s/ckpt_00000003 --out=%s", dir, k ? name : ref, k ? hn : hr);
        snprintf(cmd, sizeof cmd, "build/train export");
        rc |= test_run(cmd, a, out, sizeof out);
    }
    CHECK(rc == 0, "export of %s and %s failed:\n%s", ref, name, out);
    if (rc) return;
    ModelConfig mc;
    CHECK(hf_read_config(hn, &mc, err, sizeof err) == 0 && mc.tie_embeddings == tied, "%s: config.json: %s", hn, err);
    Model whole;
    model_plan(&whole, &mc, backend_cpu(), NULL, NULL, 1, 1, RECOMPUTE_NONE);
    float *x = mallocCheck(whole.n_params * 4), *y = mallocCheck(whole.n_params * 4);
    int ok = hf_read_weights(hr, &whole, x, err, sizeof err) == 0 && hf_read_weights(hn, &whole, y, err, sizeof err) == 0;
    CHECK(ok, "reading the exports: %s", err);
    double worst = 0;
    const char *at = "-";
    for (int i = 0; ok && i < whole.n_tensors; i++) {
        const ParamTensor *t = &whole.tensors[i];
        double num = 0, den = 0;
        for (size_t k = t->offset; k < t->offset + (size_t)t->rows * t->cols; k++) {
            num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            den += (double)x[k] * x[k];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        if (!(rel <= worst)) { worst = rel; at = t->name; }
    }
    CHECK(worst <= 1e-5, "HF export of [%s] differs from the one-rank run's by %.3g (%s)", model_args, worst, at);
    printf("%-44s HF export vs one rank's: %.1e (%s)\n", model_args, worst, at);
    model_plan_free(&whole);
    free(x); free(y);
}

/* --memory_report=1: rank 0 lists every rank's predicted and measured bytes. On the CPU they agree to glibc's
 * rounding of each block (malloc_usable_size: 16-byte granules and a word of header; at most 0.7% for these tiny tensors). Returns rank 0's. */
static size_t memory_same(int ranks, const char *args) {
    char a[1024];
    snprintf(a, sizeof a, "%s --memory_report=1", args);
    if (train("mem", ranks, a) != 0) { CHECK(0, "%s --memory_report=1 failed to run", args); return 0; }
    int lines = 0, equal = 0;
    size_t first = 0;
    double worst = 0;
    for (const char *p = strstr(out, "memory | rank "); p; p = strstr(p + 1, "memory | rank ")) {
        const char *q = strstr(p, "predicted "), *r = strstr(p, "measured peak ");
        if (!q || !r) break;
        size_t pred = strtoull(q + 10, NULL, 10), got = strtoull(r + 14, NULL, 10);
        double rel = got ? fabs((double)pred - (double)got) / (double)got : INFINITY;
        if (!lines) first = got;
        lines++;
        worst = fmax(worst, rel);
        equal += pred > 0 && rel <= (on_gpu ? 0.10 : 0.01);   /* the GPU's workspaces are estimated */
    }
    CHECK(lines == ranks && equal == ranks, "%s: want %d ranks whose predicted bytes %s the allocated peak, got %d of %d lines:\n%s",
          args, ranks, on_gpu ? "are within 10% of" : "are within 1% of", equal, lines, out);
    printf("%-44s memory plan vs allocated on %d of %d ranks: worst %.2f%% (rank 0 allocated %zu bytes)\n", args, equal, ranks,
           100 * worst, first);
    return first;
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

static const double fp32 = 1e-5, bf16 = 1e-3;

static void data_parallel_and_pipeline(void) {
    layout("ref", "dp2", 2, "--dp=2", fp32);
    layout("ref", "dp4", 4, "--dp=4", fp32);
    layout("ref", "dp2z", 2, "--dp=2 --zero=1", fp32);
    layout("ref", "dp4z", 4, "--dp=4 --zero=1", fp32);
    layout("ref", "dp2rf", 2, "--dp=2 --recompute=full", fp32);
    layout("ref", "dp2b", 2, "--dp=2 --bucket_mb=0.004", fp32);
    layout("ref8", "dp2q", 2, "--dp=2 --optimizer=adamw8bit", fp32);
    layout("ref8", "dp4zq", 4, "--dp=4 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", fp32);
    /* bf16: one rank adds micro-batch 2's weight gradient into micro-batch 1's inside sgemm, dp ranks add whole
     * gradients, so step 1's fp32 gradients differ at ~1e-7; AdamW and the bf16 roundings of the next forwards
     * (one per residual add) turn that into a few flipped bf16 values: measured losses 1e-5, tensors 4.8e-3 (the
     * worst, a norm weight's first moment; about one bf16 ulp, 3.9e-3) */
    layout_tol("refbf", "dp2bf", 2, "--dp=2 --precision=bf16", bf16, 1e-2);
    layout_tol("refbf", "dp2zbf", 2, "--dp=2 --zero=1 --precision=bf16", bf16, 1e-2);
    /* gradients sent in bf16 lose precision on purpose: the losses stay within bf16 rounding, AdamW's moments within a few % */
    layout_tol("refbf", "dp2w", 2, "--dp=2 --zero=1 --precision=bf16 --grad_reduce_dtype=bf16", bf16, 5e-2);
    layout("ref", "pp2", 2, "--pp=2", fp32);
    layout("ref", "pp4", 4, "--pp=4", fp32);
    layout("ref", "pp2g", 2, "--pp=2 --pp_schedule=gpipe", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "pp2u", 2, "--pp=2 --pp_layers=3,1", fp32);
    layout("ref", "dp2pp2", 4, "--dp=2 --pp=2 --zero=1", fp32);
    layout("refbf", "pp2bf", 2, "--pp=2 --precision=bf16 --recompute=full", bf16);
    layout("ref16", "pp2f16", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective", bf16);
    layout("ref8", "dp2pp2q", 4, "--dp=2 --pp=2 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", fp32);
    /* per-layer compute weights: the same bits as the compute copy the run above kept */
    layout_tol("dp2bf", "dp2bfw", 2, "--dp=2 --precision=bf16 --compute_weights=per_layer", 0, 0);
    layout_tol("pp2bf", "pp2bfw", 2, "--pp=2 --precision=bf16 --recompute=full --compute_weights=per_layer", 0, 0);
    layout_tol("pp2f16", "pp2f16w", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective --compute_weights=per_layer", 0, 0);
    /* resume across layouts */
    resume("ref", "r21", 2, "--dp=2", 1, "");
    resume("ref", "r14", 1, "", 4, "--dp=4");
    resume("ref", "rz", 2, "--dp=2 --zero=1", 2, "--dp=2");
    resume("ref", "rp", 2, "--pp=2", 4, "--pp=4");
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
    resume("ref8", "r8", 4, "--dp=4 --zero=1 --optimizer=adamw8bit --bucket_mb=0.01", 1, "--optimizer=adamw8bit");
    resume("refbf", "rbw", 1, "--precision=bf16", 1, "--precision=bf16 --compute_weights=per_layer");
}

/* Tensor parallel on the odd vocabulary (61 rows: padded at every tp), with and without sequence
 * parallelism, tied and untied; GQA with n_kv_heads = tp and = 2*tp; then with everything else. */
#define H84 "--n_heads=8 --n_kv_heads=4"
#define H88 "--n_heads=8 --n_kv_heads=8"
static void tensor_parallel(void) {
    if (train("reft", 1, "--tie_embeddings=1") || train("ref84", 1, H84) || train("ref84t", 1, H84 " --tie_embeddings=1") ||
        train("ref88", 1, H88) || train("ref88t", 1, H88 " --tie_embeddings=1"))
        die("test: a one-rank reference run failed:\n%s", out);
    layout("ref", "tp2", 2, "--tp=2", fp32);
    layout("ref", "tp2s", 2, "--tp=2 --sequence_parallel=1 --recompute=full", fp32);
    layout("reft", "tp2t", 2, "--tp=2 --tie_embeddings=1", fp32);
    layout("ref84", "tp4", 4, "--tp=4 " H84, fp32);
    layout("ref84t", "tp4st", 4, "--tp=4 --sequence_parallel=1 --tie_embeddings=1 " H84, fp32);
    layout("ref88t", "tp4kt", 4, "--tp=4 --tie_embeddings=1 " H88, fp32);
    layout("ref88", "tp4ks", 4, "--tp=4 --sequence_parallel=1 " H88, fp32);
    layout("ref", "dp2tp2", 4, "--dp=2 --tp=2", fp32);
    layout("reft", "dp2tp2st", 4, "--dp=2 --tp=2 --sequence_parallel=1 --tie_embeddings=1 --zero=1", fp32);
    /* with pipeline boundaries of N/tp tokens, recompute (full above), 8-bit AdamW, ZeRO-1, bf16 */
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("ref", "tp2pp2s", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective", fp32);
    layout("ref8", "dp2tp2sq", 4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=1 --optimizer=adamw8bit", fp32);
    /* bf16: each rank's partial sums are rounded to bf16 before they are summed over tp (as in Megatron), so the
     * losses stay within bf16 rounding and AdamW's moments of small gradients within a few % */
    layout_tol("refbf", "tp2sbf", 2, "--tp=2 --sequence_parallel=1 --precision=bf16", bf16, 5e-2);
    /* per-layer compute weights, bit for bit: with sequence parallelism; tied, with full recompute */
    layout_tol("tp2sbf", "tp2sbfw", 2, "--tp=2 --sequence_parallel=1 --precision=bf16 --compute_weights=per_layer", 0, 0);
    if (train("tp2tbf", 2, "--tp=2 --tie_embeddings=1 --precision=bf16 --recompute=full") != 0) CHECK(0, "tp=2 tied bf16 failed to run");
    layout_tol("tp2tbf", "tp2tbfw", 2, "--tp=2 --tie_embeddings=1 --precision=bf16 --recompute=full --compute_weights=per_layer", 0, 0);
    export_same("ref", "tp2s", "--tp=2 --sequence_parallel=1 --recompute=full", 0);
    export_same("ref88t", "tp4kt", "--tp=4 --tie_embeddings=1 " H88, 1);
    resume("ref", "rt21", 2, "--tp=2 --sequence_parallel=1", 1, "");
    resume("ref84", "rt24", 2, "--tp=2 " H84, 4, "--tp=4 --sequence_parallel=1 " H84);
    /* the memory plan of every rank is what it allocates; sequence parallelism's saving */
    size_t plain = memory_same(2, "--tp=2"), sp = memory_same(2, "--tp=2 --sequence_parallel=1");
    memory_same(4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=1 --precision=bf16");
    CHECK(sp < plain, "sequence parallelism saves memory: %zu bytes vs %zu without", sp, plain);
    /* per-layer compute weights: the places of a layer and of the vocabulary units, on stages with and without them */
    size_t keep = memory_same(4, "--tp=2 --pp=2 --precision=bf16 --recompute=full");
    size_t layer = memory_same(4, "--tp=2 --pp=2 --precision=bf16 --recompute=full --compute_weights=per_layer");
    memory_same(2, "--pp=2 --precision=bf16 --compute_weights=per_layer");
    CHECK(layer < keep, "per-layer compute weights save memory: %zu bytes vs %zu with the copy", layer, keep);
}

/* ZeRO-2 and ZeRO-3 (docs/zero.md): gradients, then weights too, sharded over dp. Every run here accumulates
 * (256 tokens a step over dp ranks of 2x16-token micro-batches: 4 micro-batches a rank at dp=2, 2 at dp=4), so the
 * gradient shards add up micro-batches and zero=3 gathers every unit again for each of them. */
static void zero_stages(void) {
    layout("ref", "dp2z2", 2, "--dp=2 --zero=2", fp32);
    layout("ref", "dp4z2", 4, "--dp=4 --zero=2", fp32);
    layout("ref", "dp2z3", 2, "--dp=2 --zero=3", fp32);
    CHECK(strstr(out, "| ZeRO-3"), "zero=3 with dp=2 says it runs ZeRO-3:\n%s", out);
    layout("ref", "dp4z3", 4, "--dp=4 --zero=3", fp32);
    layout("ref", "dp2z3rf", 2, "--dp=2 --zero=3 --recompute=full", fp32);
    layout("ref8", "dp2z2q", 2, "--dp=2 --zero=2 --optimizer=adamw8bit", fp32);
    layout("ref8", "dp4z3q", 4, "--dp=4 --zero=3 --optimizer=adamw8bit", fp32);
    layout("ref", "dp2tp2z3", 4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=3", fp32);
    layout("ref", "dp2pp2z3", 4, "--dp=2 --pp=2 --zero=3", fp32);
    layout("ref", "dp2pp2z2", 4, "--dp=2 --pp=2 --pp_schedule=interleaved --zero=2", fp32);
    /* bf16 and fp16: within their rounding, as ZeRO-1's (above) */
    layout_tol("refbf", "dp2z3bf", 2, "--dp=2 --zero=3 --precision=bf16", bf16, 1e-2);
    layout_tol("ref16", "dp2z3f16", 2, "--dp=2 --zero=3 --precision=fp16 --recompute=selective", bf16, 1e-2);
    /* checkpoints stay whole tensors: zero=3 saved, tp=2 resumed, and back */
    resume("ref", "rz3t", 2, "--dp=2 --zero=3", 2, "--tp=2");
    resume("ref", "rtz3", 2, "--tp=2", 2, "--dp=2 --zero=3");
    /* the memory plan counts the shards and places: each rank's prediction is what it allocates; each stage saves */
    size_t z2 = memory_same(2, "--dp=2 --zero=2 --precision=bf16"), z3 = memory_same(2, "--dp=2 --zero=3 --precision=bf16");
    memory_same(4, "--dp=2 --pp=2 --zero=3 --recompute=full");
    CHECK(z3 < z2, "zero=3 holds less than zero=2: %zu bytes vs %zu", z3, z2);
    refused(1, "--zero=2", "zero=2 shards gradients over the data-parallel ranks, and dp=1");
    refused(2, "--dp=2 --zero=3 --compute_weights=per_layer --precision=bf16", "zero=3 gathers each unit's compute weights");
    refused(2, "--dp=2 --zero=3 --tie_embeddings=1", "tie_embeddings=1 makes the LM head write the embedding's gradient");
    refused(2, "--dp=2 --zero=2 --precision=bf16 --grad_reduce_dtype=bf16", "zero=2 reduce-scatters each unit's fp32 gradient");
}

/* Bad launches: one clear line, every rank out. */
static void launches_refused(void) {
    refused(2, "--dp=4", "dp*pp*tp = 4*1*1 = 4, but 2 ranks were launched");
    refused(2, "--dp=3", "not a multiple of batch_size*seq_len*dp = 2*16*3");
    refused(1, "--dp=2", "runs alone");
    refused(2, "--dp=2 --device=cuda --comm_backend=nccl", "comm_backend=nccl");
    refused(4, "--pp=4 --total_batch_tokens=64", "needs at least 4 micro-batches");
    refused(2, "--tp=2 --n_kv_heads=1", "tp=2 must divide n_kv_heads=1");
    refused(4, "--tp=4", "the tp values this model takes are 1, 2 (");
    refused(2, "--tp=2 --ffn_dim=63", "tp=2 must divide ffn_dim=63");
    refused(2, "--tp=2 --sequence_parallel=1 --batch_size=1 --seq_len=15 --total_batch_tokens=0", "15 tokens of a micro-batch over tp=2");
    refused(2, "--tp=2 --device=cuda --comm_backend=nccl", "warning: tp=2, but this host has");   /* the warning, once, before the refusal */
    refused(2, "--dp=2 --bucket_mb=0", "bucket_mb");
    refused(2, "--pp=2 --pp_layers=3,3", "adds up to 6 layers");
    refused(2, "--dp=2 --grad_reduce_dtype=bf16", "grad_reduce_dtype=bf16 sends the gradients in the compute dtype");
    refused(2, "--dp=2 --zero=1 --precision=bf16 --compute_weights=per_layer", "compute_weights=per_layer casts each layer's weights");
    /* ranks launched with different configs (MPMD: one command line per rank) */
    char a[4096], cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 %s -np 1 build/train --dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=1e-3 : -np 1 build/train",
             mpirun, dir, dir);
    snprintf(a, sizeof a, "--dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=2e-3", dir, dir);
    int rc = test_run(cmd, a, out, sizeof out);
    CHECK(rc != 0 && rc != 124 && strstr(out, "different config") && strstr(out, "lr="),
          "ranks with different configs: want the key named, got rc %d:\n%s", rc, out);
}

/* `test_layouts`: every layout on CPU ranks (make test). `test_layouts --device=cuda`: the tensor-parallel
 * part on the GPU, the ranks sharing it through MPI (tests/gpu/tp.sh); LLM3D_TEST_ARGS="--device=cuda
 * --comm_backend=mpi": every layout there (tests/gpu/parallel.sh). On the GPU the memory plan is within 10%. */
int main(int argc, char **argv) {
#ifndef LLM3D_MPI
    printf("skipped: this build has no Open MPI, so only the one-rank grid exists\n");
    return test_summary();
#endif
    int tp_only = argc > 1 && !strcmp(argv[1], "--device=cuda"), zero_only = argc > 1 && !strcmp(argv[1], "--zero");
    if (tp_only) setenv("LLM3D_TEST_ARGS", "--device=cuda --comm_backend=mpi", 1);
    const char *extra = getenv("LLM3D_TEST_ARGS");
    on_gpu = extra && strstr(extra, "--device=cuda");
    /* the ranks of a run share the host's cores (parallel/launch.c) instead of each taking
     * OMP_NUM_THREADS of them: 4 ranks x 2 spinning threads on 2 cores run ~10x slower */
    unsetenv("OMP_NUM_THREADS");
    make_data();
    /* references: one rank */
    if (train("ref", 1, "") || train("ref8", 1, "--optimizer=adamw8bit") || train("refbf", 1, "--precision=bf16") ||
        train("ref16", 1, "--precision=fp16 --recompute=selective"))
        die("test: the one-rank reference run failed:\n%s", out);
    if (!tp_only) zero_stages();   /* `test_layouts --zero`: this part alone */
    if (!tp_only && !zero_only) data_parallel_and_pipeline();
    if (!zero_only) tensor_parallel();
    if (!on_gpu && !zero_only) launches_refused();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_summary();
}
