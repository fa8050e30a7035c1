/* tests/layouts.h — the harness of the layout-equality tests (test_layouts, test_layouts_q8,
 * test_layouts_zero): it runs the real program, one rank for a reference and each layout under
 * `mpirun --oversubscribe` (CPU ranks, a tiny model), reads the loss curves from --log_jsonl and
 * compares every tensor of the final checkpoints (stored whole by name, whatever the layout).
 * LLM3D_TEST_ARGS adds settings to every run (tests/gpu/parallel.sh: "--device=cuda --comm_backend=mpi",
 * one GPU shared by the ranks); LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 with "--device=cuda --comm_backend=nccl" puts
 * the ranks on the one GPU through NCCL, each a test host (tests/gpu/nccl_layouts.sh), and asserts that each
 * multi-rank run went through NCCL. The program is $BUILD/train (default build/train): in the sanitizer pass
 * (tests/test_asan.sh, BUILD=build-asan) the ranks run under ASan + UBSan, without LeakSanitizer (Open MPI's
 * allocations outlive it, as tests/tally.sh says). Functions are static inline: each test uses a part of them. */
#pragma once
#include "test.h"
#include "../common/util.h"
#include "../data/shard.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../train/optimizer.h"
#include "../checkpoint/checkpoint.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static char dir[128], out[1 << 16], trainer[256];   /* trainer: $BUILD/train, set by layouts_begin */
static const char *mpirun = "mpirun --allow-run-as-root --oversubscribe";
static int on_gpu;   /* --device=cuda: every run on the GPU, several ranks sharing it through MPI */
static int nccl_hosts;   /* LLM3D_NCCL_HOSTS_ON_ONE_GPU=1: the ranks share the GPU through NCCL, each a test host (tests/gpu/nccl_layouts.sh) */

/* adam_eps=1e-5 rather than 1e-8: a layout changes the order of fp32 sums (tp splits matmuls, dp and tp
 * sum partial results), so gradients differ from one rank's at ~1e-7 of their size; AdamW's first update,
 * g/(|g|+eps), turns that into weight differences of up to ~5e-5 (relative, per tensor) through the few
 * elements whose gradient is near eps (measured: tp=4, eps 1e-8: 5e-5, 1e-6: 9e-6, 1e-5: 1.5e-6), and the
 * comparison would measure that amplifier instead of the layout. The typical gradient here is ~3e-5. */
#define BASE "--dim=32 --n_layers=4 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=2 " \
             "--total_batch_tokens=256 --max_steps=3 --warmup_steps=1 --lr=3e-3 --adam_eps=1e-5 --eval_every=3 --eval_batches=4 " \
             "--log_every=1 --sample_tokens=0 --checkpoint_every=0 --keep_checkpoints=0"

typedef struct { double loss[8], val; int steps; } Curve;

/* A run of test hosts on one GPU went through NCCL: its banner says so, the test setup was said once,
 * and (with NCCL_DEBUG=INFO) NCCL's own log shows its network transport on sockets. */
static inline void nccl_proof(const char *name, int ranks) {
    const char *said = strstr(out, "comm  | LLM3D_NCCL_HOSTS_ON_ONE_GPU=1, a test setup");
    CHECK(strstr(out, "through nccl") && said && !strstr(said + 1, "comm  | LLM3D_NCCL"),
          "%s (%d ranks): want 'through nccl' in the banner and the test setup said once:\n%.2000s", name, ranks, out);
    const char *debug = getenv("NCCL_DEBUG");
    if (!debug || strcasecmp(debug, "INFO")) return;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cat %s/%s.nccl.*.log 2>/dev/null | grep -c 'NET/Socket'", dir, name);
    FILE *p = popen(cmd, "r");
    int lines = 0;
    if (p) { if (fscanf(p, "%d", &lines) != 1) lines = 0; pclose(p); }
    CHECK(lines > 0, "%s (%d ranks): NCCL's log (%s/%s.nccl.*.log) never names its socket transport (NET/Socket)", name, ranks, dir, name);
}

/* Runs $BUILD/train (under mpirun with ranks > 1) into run_dir <dir>/<name>; returns the exit code. */
static int train(const char *name, int ranks, const char *args) {
    char cmd[4096], a[4096];
    const char *extra = getenv("LLM3D_TEST_ARGS");   /* e.g. "--device=cuda --comm_backend=mpi" on a GPU machine */
    snprintf(a, sizeof a, "%s --train_data=%s/train.bin --val_data=%s/val.bin --run_dir=%s/%s --log_jsonl=%s/%s.jsonl %s %s",
             BASE, dir, dir, dir, name, dir, name, args, extra ? extra : "");
    if (ranks > 1) snprintf(cmd, sizeof cmd, "timeout 120 %s -np %d %s", mpirun, ranks, trainer);
    else snprintf(cmd, sizeof cmd, "timeout 120 %s", trainer);
    char log[600];   /* NCCL_DEBUG=INFO (the caller's) goes to files of this run, not into out */
    snprintf(log, sizeof log, "%s/%s.nccl.%%h.%%p.log", dir, name);
    if (nccl_hosts) setenv("NCCL_DEBUG_FILE", log, 1);
    int rc = test_run(cmd, a, out, sizeof out);
    if (rc != 0) printf("--- %s (rc %d):\n%s\n", name, rc, out);
    if (rc != 0 && nccl_hosts) {   /* NCCL's own warnings went to its log files: show them */
        snprintf(cmd, sizeof cmd, "grep -h 'NCCL WARN' %s/%s.nccl.*.log 2>/dev/null | head -20", dir, name);
        fflush(stdout);
        if (system(cmd) != 0) printf("(no NCCL WARN in its log)\n");
    }
    if (rc == 0 && nccl_hosts && ranks > 1) nccl_proof(name, ranks);
    return rc;
}

static inline Curve read_curve(const char *name) {
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
static inline void check_same(const char *ref, const char *name, double tol, double tensor_tol, const char *what) {
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

static inline void layout_tol(const char *ref, const char *name, int ranks, const char *args, double tol, double tensor_tol) {
    if (train(name, ranks, args) != 0) { CHECK(0, "%s (%d ranks) failed to run", args, ranks); return; }
    if (!strstr(args, "--zero=2") && !strstr(args, "--zero=3"))   /* ZeRO-2/3 keep no gradient buffer: ddp opens each place with zeros */
        CHECK(strstr(out, "LLM3D_POISON_GRADS=1") != NULL, "%s: the run never said its unwritten gradients were poisoned", args);
    char what[256];
    snprintf(what, sizeof what, "%s", args);
    check_same(ref, name, tol, tensor_tol, what);
}
static inline void layout(const char *ref, const char *name, int ranks, const char *args, double tol) { layout_tol(ref, name, ranks, args, tol, tol); }

/* Save at step 2 with one layout, continue to step 3 with another: the end must be the reference's. */
static inline void resume(const char *ref, const char *name, int r1, const char *a1, int r2, const char *a2) {
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
static inline void export_same(const char *ref, const char *name, const char *model_args, int tied) {
    char cmd[1024], a[1024], hr[512], hn[512], err[1024];
    snprintf(hr, sizeof hr, "%s/hf_%s", dir, ref);
    snprintf(hn, sizeof hn, "%s/hf_%s", dir, name);
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "--checkpoint=%s/%s/ckpt_00000003 --out=%s", dir, k ? name : ref, k ? hn : hr);
        snprintf(cmd, sizeof cmd, "%s export", trainer);
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
static inline size_t memory_same(int ranks, const char *args) {
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
static inline void refused(int ranks, const char *args, const char *words) {
    char cmd[1024], a[4096];
    if (ranks > 1) snprintf(cmd, sizeof cmd, "timeout 60 %s -np %d %s", mpirun, ranks, trainer);
    else snprintf(cmd, sizeof cmd, "timeout 60 %s", trainer);
    snprintf(a, sizeof a, "%s --train_data=%s/train.bin --val_data=%s/val.bin --run_dir=%s/bad %s", BASE, dir, dir, dir, args);
    int rc = test_run(cmd, a, out, sizeof out);
    const char *at = strstr(out, words);
    CHECK(rc != 0 && rc != 124 && at, "'%s' on %d ranks: want a non-zero exit (not a timeout) saying '%s', got rc %d:\n%s", args, ranks, words, rc, out);
    CHECK(!at || !strstr(at + 1, words), "'%s': the message is printed once, not by every rank:\n%s", args, out);
}

/* ------------------------------------------------------------ 8-bit AdamW */
/* The threshold lowered so that this model's matrices of 1024+ elements are 8-bit (22 tensors: per layer
 * q, o, gate, up, down; the embedding and the head; k and v of 512 and the norms stay fp32). */
static inline void make_data(void) {
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

/* GQA shapes for tensor parallelism: n_kv_heads = tp and = 2*tp at tp=4 */
#define H84 "--n_heads=8 --n_kv_heads=4"
#define H88 "--n_heads=8 --n_kv_heads=8"

/* Reads the environment (BUILD, LLM3D_TEST_ARGS, LLM3D_NCCL_HOSTS_ON_ONE_GPU, LLM3D_SANITIZER_PASS), then writes the test data. */
static inline void layouts_begin(void) {
    const char *extra = getenv("LLM3D_TEST_ARGS"), *sw = getenv("LLM3D_NCCL_HOSTS_ON_ONE_GPU"), *build = getenv("BUILD");
    snprintf(trainer, sizeof trainer, "%s/train", build && *build ? build : "build");
    /* the sanitizer pass: the programs this test starts keep ASan and UBSan but not LeakSanitizer (Open MPI's
     * allocations outlive it); this process read its options at start and keeps it */
    if (getenv("LLM3D_SANITIZER_PASS")) {
        char opts[1024];
        snprintf(opts, sizeof opts, "%s:detect_leaks=0", getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
    on_gpu = extra && strstr(extra, "--device=cuda");
    nccl_hosts = sw && !strcmp(sw, "1");
    if (nccl_hosts && !(on_gpu && strstr(extra, "--comm_backend=nccl")))
        die("test: LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 runs the NCCL table, and wants LLM3D_TEST_ARGS=\"--device=cuda --comm_backend=nccl\"");
    /* the ranks of a run share the host's cores (comm/launch.c) instead of each taking
     * OMP_NUM_THREADS of them: 4 ranks x 2 spinning threads on 2 cores run ~10x slower */
    unsetenv("OMP_NUM_THREADS");
    /* every run checks that its backward writes each gradient whole: model_zero_grads leaves them to the step's first
     * write and, with this test knob, fills them with NaN, which a forgotten one carries into the norm (and the run stops) */
    setenv("LLM3D_POISON_GRADS", "1", 1);
    make_data();
}

/* The one-rank references most layouts compare with: fp32, bf16, fp16 with selective recompute. */
static inline void layouts_references(void) {
    if (train("ref", 1, "") || train("refbf", 1, "--precision=bf16") || train("ref16", 1, "--precision=fp16 --recompute=selective"))
        die("test: the one-rank reference run failed:\n%s", out);
}

/* Removes the test data; prints the closing line. */
static inline int layouts_end(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_summary();
}
