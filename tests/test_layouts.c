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
 * data, tensor and pipeline parallelism. 8-bit AdamW (with its threshold lowered so that this model's
 * tensors of 1024+ elements are quantized) quantizes the same blocks on every layout: losses within 1e-6,
 * weights within 1e-4 and every moment code equal to one rank's or one step away; an 8-bit checkpoint
 * resumes across layouts, and one of the old block rule is converted with a message.
 * LLM3D_TEST_ARGS adds settings to every run
 * (tests/gpu/parallel.sh: "--device=cuda --comm_backend=mpi", one GPU shared by the ranks). */
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

static char dir[128], out[1 << 16];
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
static void nccl_proof(const char *name, int ranks) {
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

/* Runs build/train (under mpirun with ranks > 1) into run_dir <dir>/<name>; returns the exit code. */
static int train(const char *name, int ranks, const char *args) {
    char cmd[4096], a[4096];
    const char *extra = getenv("LLM3D_TEST_ARGS");   /* e.g. "--device=cuda --comm_backend=mpi" on a GPU machine */
    snprintf(a, sizeof a, "%s --train_data=%s/train.bin --val_data=%s/val.bin --run_dir=%s/%s --log_jsonl=%s/%s.jsonl %s %s",
             BASE, dir, dir, dir, name, dir, name, args, extra ? extra : "");
    if (ranks > 1) snprintf(cmd, sizeof cmd, "timeout 120 %s -np %d build/train", mpirun, ranks);
    else snprintf(cmd, sizeof cmd, "timeout 120 build/train");
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

/* ------------------------------------------------------------ 8-bit AdamW */
/* The threshold lowered so that this model's matrices of 1024+ elements are 8-bit (22 tensors: per layer
 * q, o, gate, up, down; the embedding and the head; k and v of 512 and the norms stay fp32). */
#define Q8 "--optimizer=adamw8bit --adamw8bit_min_numel=1024"
#define Q8_TENSORS 22

/* "optim | adamw8bit on rank 0: N tensors 8-bit, E elements ..." of the last run: the optimizer's own accounting. */
static void q8_accounting(const char *what, int want_tensors) {
    const char *p = strstr(out, "optim | adamw8bit on rank 0: ");
    int tensors = p ? atoi(p + 29) : 0;
    const char *e = p ? strstr(p, "8-bit, ") : NULL;
    long long elements = e ? atoll(e + 7) : 0;
    CHECK(tensors > 0 && elements > 0 && (!want_tensors || tensors == want_tensors),
          "%s: the optimizer quantizes (%d tensors, %lld elements 8-bit on rank 0; want %d tensors):\n%s", what, tensors, elements,
          want_tensors, p ? "" : out);
}

/* Moment codes of two 8-bit runs' checkpoints, block by block under the optimizer's rule: a checkpoint's
 * moments are its dequantized state, so each block's absmax is its largest |value| and quantizing it again
 * gives the saver's codes. Counts codes one step apart, codes further apart whose values are within 1e-3
 * of the block's absmax of each other (the map's low decades are dense: 1e-4 of absmax spans several
 * codes there), and codes further than that; absmax: the largest relative difference of a block's scale. */
typedef struct { size_t blocks, codes, off_by_one, near_zero, worse; double absmax; } CodeDiff;
static CodeDiff compare_codes(const char *a_name, const char *b_name, int step) {
    CodeDiff d = {0};
    char pa[512], pb[512], err[1024], name[160];
    snprintf(pa, sizeof pa, "%s/%s/ckpt_%08d/state.bin", dir, a_name, step);
    snprintf(pb, sizeof pb, "%s/%s/ckpt_%08d/state.bin", dir, b_name, step);
    CkptReader ra, rb;
    if (ckpt_open(&ra, pa, err, sizeof err) != 0 || ckpt_open(&rb, pb, err, sizeof err) != 0) { d.worse = 1; printf("%s\n", err); return d; }
    Config c;
    config_defaults(&c);
    char e2[256];
    for (const char *p = ra.config_text; *p;) {   /* the run's own config: its model and threshold */
        char key[64], value[1100];
        if (sscanf(p, "%63[^=]=%1099[^\n]", key, value) == 2) config_set(&c, key, value, e2, sizeof e2);
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    ModelConfig mc;
    char e3[512];
    CHECK(checkpoint_model_config(ra.config_text, &mc, e3, sizeof e3) == 0, "model config of %s: %s", pa, e3);
    Model whole;
    model_plan(&whole, &mc, backend_cpu(), NULL, NULL, 1, 1, RECOMPUTE_NONE);
    const float *ms, *mu;
    adamw8bit_maps(&ms, &mu);
    for (int i = 0; i < whole.n_tensors; i++) {
        const ParamTensor *t = &whole.tensors[i];
        size_t row = optimizer_q8_row(&whole, &c, t), n = (size_t)t->rows * t->cols;
        if (!row) continue;
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "optimizer.adamw.%s/%s", k ? "v" : "m", t->name);
            const CkptEntry *ea = ckpt_find(&ra, name), *eb = ckpt_find(&rb, name);
            float *x = mallocCheck(n * 4), *y = mallocCheck(n * 4);
            if (!ea || !eb || ckpt_read_f32(&ra, ea, 0, t->rows, 0, t->cols, x, err, sizeof err) ||
                ckpt_read_f32(&rb, eb, 0, t->rows, 0, t->cols, y, err, sizeof err)) {
                d.worse++;
                printf("%s: %s\n", name, ea && eb ? err : "missing");
            } else {
                AdamW8bitSlice sl = {0, n, 0, 0, row, 0, 1};   /* the whole tensor in its rows */
                for (size_t b = 0; b < adamw8bit_slice_blocks(&sl); b++) {
                    int len;
                    size_t j = adamw8bit_block_span(&sl, b, &len);
                    uint8_t ca[ADAMW8BIT_BLOCK], cb[ADAMW8BIT_BLOCK];
                    float aa = adamw8bit_quantize_block(k ? mu : ms, x + j, len, ca), ab = adamw8bit_quantize_block(k ? mu : ms, y + j, len, cb);
                    if (aa > 0) d.absmax = fmax(d.absmax, fabs((double)ab / aa - 1));
                    for (int q = 0; q < len; q++) {
                        int diff = abs((int)ca[q] - (int)cb[q]);
                        int near = fabs((double)x[j + q] - y[j + q]) <= 1e-3 * aa;
                        d.off_by_one += diff == 1;
                        d.near_zero += diff > 1 && near;
                        d.worse += diff > 1 && !near;
                    }
                    d.codes += len;
                    d.blocks++;
                }
            }
            free(x); free(y);
        }
    }
    model_plan_free(&whole);
    ckpt_close(&ra); ckpt_close(&rb);
    return d;
}

/* The relative L2 difference of all the weights (the moments: compare_codes); *most: the largest of one tensor's, named in worst. */
static double compare_weights(const char *a_name, const char *b_name, int step, double *most_out, char *worst, size_t size) {
    char pa[512], pb[512], err[1024];
    snprintf(pa, sizeof pa, "%s/%s/ckpt_%08d/state.bin", dir, a_name, step);
    snprintf(pb, sizeof pb, "%s/%s/ckpt_%08d/state.bin", dir, b_name, step);
    CkptReader ra, rb;
    if (ckpt_open(&ra, pa, err, sizeof err) || ckpt_open(&rb, pb, err, sizeof err)) { snprintf(worst, size, "%s", err); return INFINITY; }
    double most = 0, all_num = 0, all_den = 0;
    snprintf(worst, size, "-");
    for (int i = 0; i < ra.n; i++) {
        const CkptEntry *ea = &ra.entries[i], *eb = ckpt_find(&rb, ea->name);
        if (!strncmp(ea->name, "optimizer.", 10)) continue;
        int64_t rows, cols;
        ckpt_entry_dims(ea, &rows, &cols);
        float *x = mallocCheck((size_t)(rows * cols) * 4), *y = mallocCheck((size_t)(rows * cols) * 4);
        double num = 0, den = 0;
        if (!eb || ckpt_read_f32(&ra, ea, 0, rows, 0, cols, x, err, sizeof err) || ckpt_read_f32(&rb, eb, 0, rows, 0, cols, y, err, sizeof err))
            num = INFINITY, den = 1;
        for (int64_t k = 0; isfinite(num) && k < rows * cols; k++) { num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]); den += (double)x[k] * x[k]; }
        double rel = sqrt(num / (den > 0 ? den : 1));
        if (!(rel <= most)) { most = rel; snprintf(worst, size, "%s", ea->name); }
        all_num += num; all_den += den;
        free(x); free(y);
    }
    ckpt_close(&ra); ckpt_close(&rb);
    *most_out = most;
    return sqrt(all_num / (all_den > 0 ? all_den : 1));
}

/* An 8-bit run against one rank's: the logged losses (from step first on) within 1e-6, the final weights within
 * 1e-4 (relative L2 of all of them), every block's absmax within 1e-2 (a block of other elements would differ
 * by its whole scale), every moment code equal or one step apart, or within 1e-3 of absmax near zero (their
 * counts printed). Per
 * tensor the weights are not held to 1e-4: tp sums in another order, so a few codes land one step from one
 * rank's (a value within 1e-7 of the midpoint between two map values), and one such code moves its element's
 * step by up to the map's gap, ~1.4% of lr; in o_proj and down_proj, whose init is scaled down by
 * sqrt(2 n_layers), one element moved so is ~1.6e-4 of its tensor (measured: tp=2, step 2, 4 codes one step
 * apart). The codes themselves are checked one by one, which is what a wrong block rule would break. */
static void check_q8(const char *ref, const char *name, int first, const char *what) {
    Curve r = read_curve(ref), c = read_curve(name);
    double worst_loss = c.steps == r.steps - first + 1 && c.steps > 0 ? 0 : INFINITY;
    for (int s = 0; s < c.steps && s + first - 1 < r.steps; s++) worst_loss = fmax(worst_loss, fabs(c.loss[s] - r.loss[s + first - 1]) / fabs(r.loss[s + first - 1]));
    double val = fabs(c.val - r.val) / fabs(r.val);
    char worst[1200];
    double most = INFINITY, w = compare_weights(ref, name, 3, &most, worst, sizeof worst);
    CodeDiff d = compare_codes(ref, name, 3);
    CHECK(worst_loss <= 1e-6 && val <= 1e-6, "%s: losses differ from one rank's by %.3g, val by %.3g (tolerance 1e-6)", what, worst_loss, val);
    CHECK(w <= 1e-4, "%s: final weights differ from one rank's by %.3g (worst tensor %s, %.3g; tolerance 1e-4)", what, w, worst, most);
    CHECK(d.codes > 0 && d.worse == 0, "%s: of %zu moment codes %zu are more than one step from one rank's (and not near 0)", what,
          d.codes, d.worse);
    CHECK(d.absmax <= 1e-2, "%s: a block's absmax differs from one rank's by %.3g", what, d.absmax);
    printf("%-52s losses %.1e val %.1e weights %.1e (worst tensor %.1e) | %zu codes in %zu blocks: %zu one step apart, "
           "%zu further near 0; absmax %.1e\n", what, worst_loss, val, w, most, d.codes, d.blocks, d.off_by_one, d.near_zero, d.absmax);
}

static void layout_q8(const char *name, int ranks, const char *args) {
    char a[1024];
    snprintf(a, sizeof a, "%s " Q8, args);
    if (train(name, ranks, a) != 0) { CHECK(0, "%s (%d ranks) failed to run", a, ranks); return; }
    q8_accounting(args, 0);
    check_q8("ref8", name, 1, a);
}

/* Save at step 2 with one layout, continue with another: step 3 and the end as one rank's. */
static void resume_q8(const char *name, int r1, const char *a1, int r2, const char *a2) {
    char args[1024], cmd[1024], what[512];
    snprintf(args, sizeof args, "%s " Q8 " --checkpoint_every=2", a1);
    if (train(name, r1, args) != 0) { CHECK(0, "resume: %s failed to run", a1); return; }
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s/ckpt_00000003 %s/%s.jsonl", dir, name, dir, name);
    if (system(cmd) != 0) die("test: cannot clean up");
    snprintf(args, sizeof args, "%s " Q8 " --resume=1", a2);
    if (train(name, r2, args) != 0) { CHECK(0, "resume: %s after %s failed to run", a2, a1); return; }
    CHECK(strstr(out, "resume | step 2 from") && !strstr(out, "old block rule"), "resume: '%s' after '%s' resumed from step 2 as 8-bit state "
          "of this rule:\n%s", a2, a1, out);
    snprintf(what, sizeof what, "resume 8-bit [%s] -> [%s]", a1, a2);
    check_q8("ref8", name, 3, what);
}

/* A checkpoint of 8-bit state from a build before the whole-tensor rule (header optimizer 1 = adamw,
 * config optimizer=adamw8bit) resumes with the conversion said in words, and still trains. */
static void old_rule_converted(void) {
    char args[1024], path[512], cmd[1024];
    snprintf(args, sizeof args, Q8 " --checkpoint_every=2");
    if (train("old8", 1, args) != 0) { CHECK(0, "old rule: the first run failed"); return; }
    snprintf(cmd, sizeof cmd, "rm -rf %s/old8/ckpt_00000003", dir);
    if (system(cmd) != 0) die("test: cannot clean up");
    snprintf(path, sizeof path, "%s/old8/ckpt_00000002/state.bin", dir);
    FILE *f = fopen(path, "r+b");
    int32_t h[CKPT_HEADER_INTS];
    CHECK(f && fread(h, 4, CKPT_HEADER_INTS, f) == CKPT_HEADER_INTS && h[CKPT_H_OPTIMIZER] == CKPT_OPT_ADAMW8BIT_ROWS,
          "an 8-bit checkpoint says its rule in the header (optimizer %d)", f ? h[CKPT_H_OPTIMIZER] : -1);
    if (!f) return;
    h[CKPT_H_OPTIMIZER] = CKPT_OPT_ADAMW;   /* what builds before the rule wrote */
    uint32_t crc = ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    memcpy(&h[CKPT_H_CRC], &crc, 4);
    rewind(f);
    CHECK(fwrite(h, 4, CKPT_HEADER_INTS, f) == CKPT_HEADER_INTS, "patching %s", path);
    fclose(f);
    snprintf(args, sizeof args, Q8 " --resume=1");
    int rc = train("old8", 1, args);
    CHECK(rc == 0 && strstr(out, "old block rule") && strstr(out, "converting") && strstr(out, "resume | step 2 from"),
          "an old-rule 8-bit checkpoint resumes converted, and says so (rc %d):\n%s", rc, out);
    Curve r = read_curve("ref8"), c = read_curve("old8");
    double dl = c.steps >= 1 ? fabs(c.loss[c.steps - 1] - r.loss[2]) / r.loss[2] : INFINITY;
    CHECK(dl < 1e-3, "the converted run's step 3 loss is near one rank's: %.2g apart", dl);
    printf("old-rule 8-bit checkpoint: converted with a message; step 3 loss %.1e from one rank's (requantized the same)\n", dl);
}

static void adamw8bit_layouts(void) {
    if (train("ref8", 1, Q8) != 0) die("test: the one-rank 8-bit reference run failed:\n%s", out);
    q8_accounting("one rank", Q8_TENSORS);
    memory_same(2, "--tp=2 " Q8);   /* the 8-bit state each tp rank allocates is what the plan says */
    layout_q8("dp2q", 2, "--dp=2");
    layout_q8("dp4zq", 4, "--dp=4 --zero=1 --bucket_mb=0.01");
    layout_q8("tp2sq", 2, "--tp=2 --sequence_parallel=1");
    layout_q8("pp2q", 2, "--pp=2");
    layout_q8("dp2tp2pp2q", 8, "--dp=2 --tp=2 --pp=2 --zero=1 --sequence_parallel=1 --bucket_mb=0.01");
    resume_q8("r8", 4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=1", 2, "--pp=2");
    old_rule_converted();
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
    /* with pipeline boundaries of N/tp tokens, recompute (full above), ZeRO-1, bf16 (8-bit AdamW: adamw8bit_layouts) */
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("ref", "tp2pp2s", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective", fp32);
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

/* The table through NCCL, every rank a test host on the one GPU (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1, tests/gpu/nccl_layouts.sh):
 * the layouts above that each reach another NCCL path, at the same tolerances; every one accumulates gradients over
 * micro-batches (total_batch_tokens 256 = 8 micro-batches of 32 tokens on one rank); the 8-bit AdamW layouts
 * (adamw8bit_layouts) run in the "dp" half. Two halves, so the script can run
 * them side by side: "dp" (data and pipeline parallel, ZeRO-1, 8-bit AdamW, bf16, fp16, recompute, resume) and "tp". */
static void nccl_data_and_pipeline(void) {
    layout("ref", "dp2", 2, "--dp=2", fp32);
    layout("ref", "dp2rf", 2, "--dp=2 --recompute=full", fp32);
    layout("ref", "dp2b", 2, "--dp=2 --bucket_mb=0.004", fp32);
    layout("ref", "dp4z", 4, "--dp=4 --zero=1", fp32);
    layout_tol("refbf", "dp2bf", 2, "--dp=2 --precision=bf16", bf16, 1e-2);
    layout_tol("refbf", "dp2zbf", 2, "--dp=2 --zero=1 --precision=bf16", bf16, 1e-2);
    layout("ref", "pp2", 2, "--pp=2", fp32);
    layout("ref", "pp4", 4, "--pp=4", fp32);
    layout("ref", "pp2g", 2, "--pp=2 --pp_schedule=gpipe", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "pp2u", 2, "--pp=2 --pp_layers=3,1", fp32);
    layout("ref", "dp2pp2", 4, "--dp=2 --pp=2 --zero=1", fp32);
    layout("refbf", "pp2bf", 2, "--pp=2 --precision=bf16 --recompute=full", bf16);
    layout("ref16", "pp2f16", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective", bf16);
    resume("ref", "r21", 2, "--dp=2", 1, "");
    resume("ref", "rp", 2, "--pp=2", 4, "--pp=4");
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
}
static void nccl_tensor(void) {
    if (train("ref84", 1, H84)) die("test: a one-rank reference run failed:\n%s", out);
    layout("ref", "tp2", 2, "--tp=2", fp32);
    layout("ref", "tp2s", 2, "--tp=2 --sequence_parallel=1 --recompute=full", fp32);
    layout("ref84", "tp4", 4, "--tp=4 " H84, fp32);
    layout("ref", "dp2tp2", 4, "--dp=2 --tp=2", fp32);
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("ref", "dp2tp2pp2i", 8, "--dp=2 --tp=2 --pp=2 --pp_schedule=interleaved --pp_virtual=2 --zero=1 --sequence_parallel=1", fp32);
    layout("ref", "tp2pp2s", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective", fp32);
    layout_tol("refbf", "tp2sbf", 2, "--tp=2 --sequence_parallel=1 --precision=bf16", bf16, 5e-2);
    /* fp16: partial sums rounded before the tp sum, as bf16 above (measured on CPU ranks: tensors 4.1e-3, a norm weight's v) */
    layout_tol("ref16", "tp2f16", 2, "--tp=2 --precision=fp16 --recompute=selective", bf16, 5e-2);
    resume("ref84", "rt24", 2, "--tp=2 " H84, 4, "--tp=4 --sequence_parallel=1 " H84);
    resume("ref", "r3d", 8, "--dp=2 --tp=2 --pp=2", 2, "--tp=2 --sequence_parallel=1");
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

/* `test_layouts`: every layout on CPU ranks (make test); `test_layouts q8`: the 8-bit AdamW layouts alone. `test_layouts --device=cuda`: the tensor-parallel
 * part on the GPU, the ranks sharing it through MPI (tests/gpu/tp.sh); LLM3D_TEST_ARGS="--device=cuda
 * --comm_backend=mpi": every layout there (tests/gpu/parallel.sh). On the GPU the memory plan is within 10%.
 * LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 with LLM3D_TEST_ARGS="--device=cuda --comm_backend=nccl": the NCCL table above,
 * its half LLM3D_TEST_PART=dp|tp (tests/gpu/nccl_layouts.sh). */
int main(int argc, char **argv) {
#ifndef LLM3D_MPI
    printf("skipped: this build has no Open MPI, so only the one-rank grid exists\n");
    return test_summary();
#endif
    int tp_only = argc > 1 && !strcmp(argv[1], "--device=cuda");
    int q8_only = argc > 1 && !strcmp(argv[1], "q8");   /* `test_layouts q8`: the 8-bit AdamW part alone */
    if (tp_only) setenv("LLM3D_TEST_ARGS", "--device=cuda --comm_backend=mpi", 1);
    const char *extra = getenv("LLM3D_TEST_ARGS"), *sw = getenv("LLM3D_NCCL_HOSTS_ON_ONE_GPU"), *part = getenv("LLM3D_TEST_PART");
    on_gpu = extra && strstr(extra, "--device=cuda");
    nccl_hosts = sw && !strcmp(sw, "1");
    if (nccl_hosts && !(on_gpu && strstr(extra, "--comm_backend=nccl")))
        die("test: LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 runs the NCCL table, and wants LLM3D_TEST_ARGS=\"--device=cuda --comm_backend=nccl\"");
    /* the ranks of a run share the host's cores (comm/launch.c) instead of each taking
     * OMP_NUM_THREADS of them: 4 ranks x 2 spinning threads on 2 cores run ~10x slower */
    unsetenv("OMP_NUM_THREADS");
    make_data();
    /* references: one rank */
    if (!q8_only && (train("ref", 1, "") || train("refbf", 1, "--precision=bf16") ||
                     train("ref16", 1, "--precision=fp16 --recompute=selective")))
        die("test: the one-rank reference run failed:\n%s", out);
    if (nccl_hosts) {   /* LLM3D_TEST_PART: dp, tp, or both */
        if (!part || !strcmp(part, "dp")) { nccl_data_and_pipeline(); adamw8bit_layouts(); }
        if (!part || !strcmp(part, "tp")) nccl_tensor();
    } else {
        if (!tp_only && !q8_only) data_parallel_and_pipeline();
        if (!q8_only) tensor_parallel();
        if (!tp_only) adamw8bit_layouts();
        if (!on_gpu && !q8_only) launches_refused();
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_summary();
}
