/* tests/test_fp8.c — precision=fp8 on the CPU, through its exact emulation:
 *   - fp8_round against the formats themselves: every one of the 256 codes of
 *     E4M3 and E5M2 decoded by hand is kept as it is, midpoints go to the even
 *     neighbour, subnormals, saturation (never inf), NaN;
 *   - the scale rule: the largest power of two that keeps the max inside;
 *   - the emulated FP8 matmul against a plain loop over rounded operands, the
 *     calibration path (scale 0) equal to the plain matmul, the amax record;
 *   - training: the first step runs in bf16 (no history yet) and matches a
 *     bf16 run exactly, later steps run in FP8 (their losses differ from bf16's
 *     yet stay close), every block tensor gets a scale, a NaN step is skipped
 *     and adds no history, and scales pushed past the data's range are
 *     counted as saturated tensors without an inf anywhere.
 *   - the memory plan on cuda: fp8's FP8 scratch lies under the head's
 *     buffers, so l124m's fp8 without recompute takes what bf16 takes, the
 *     amax record aside;
 *   - a checkpoint whose FP8 history holds a NaN or has the wrong shape is
 *     refused at resume, naming the file and the entry; on cuda, FP8 sizes
 *     that are not multiples of 16 are refused at start-up, naming the key.
 * The layouts' equality with one rank in FP8: tests/test_layouts_fp8.c. */
#include "test.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include "../checkpoint/format.h"
#include "../train/memory.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* code c of format f as a float, from the bit fields: sign, exponent (bias 7 / 15), mantissa (3 / 2 bits) */
static float decode(int c, Fp8Format f) {
    int mb = f == FP8_E4M3 ? 3 : 2, eb = 7 - mb, bias = f == FP8_E4M3 ? 7 : 15;
    int s = c >> 7, e = (c >> mb) & ((1 << eb) - 1), m = c & ((1 << mb) - 1);
    if (f == FP8_E4M3 && e == 15 && m == 7) return NAN;        /* E4M3 (fn): one NaN pattern, no inf */
    if (f == FP8_E5M2 && e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
    float v = e ? ldexpf(1.0f + m / (float)(1 << mb), e - bias) : ldexpf(m / (float)(1 << mb), 1 - bias);
    return s ? -v : v;
}

static void test_round(Fp8Format f, const char *name) {
    int kept = 0, finite = 0;
    float largest = 0;
    for (int c = 0; c < 256; c++) {
        float v = decode(c, f);
        if (!isfinite(v)) continue;
        finite++;
        kept += fp8_round(v, f) == v && signbit(fp8_round(v, f)) == signbit(v);
        largest = fmaxf(largest, v);
    }
    CHECK(kept == finite, "%s: %d of %d finite codes round to themselves", name, kept, finite);
    CHECK(largest == fp8_max(f), "%s: the largest code %g is fp8_max %g", name, largest, fp8_max(f));
    /* midpoints between neighbours go to the one with an even mantissa; just above them, up */
    int ties = 0, tie_ok = 0;
    for (int c = 0; c < 0x7f; c++) {
        float a = decode(c, f), b = decode(c + 1, f);
        if (!isfinite(a) || !isfinite(b)) continue;
        float mid = (a + b) / 2, want = (c & 1) ? b : a;
        ties++;
        tie_ok += fp8_round(mid, f) == want && fp8_round(nextafterf(mid, INFINITY), f) == b && fp8_round(nextafterf(mid, 0), f) == a;
    }
    CHECK(ties > 100 && tie_ok == ties, "%s: %d of %d midpoints to even, their neighbours to the nearer", name, tie_ok, ties);
    float mx = fp8_max(f);
    CHECK(fp8_round(mx * 1.06f, f) == mx && fp8_round(1e30f, f) == mx && fp8_round(INFINITY, f) == mx && fp8_round(-INFINITY, f) == -mx,
          "%s: past the largest number it saturates (never inf)", name);
    CHECK(isnan(fp8_round(NAN, f)), "%s: NaN stays NaN", name);
    float tiny = decode(1, f);   /* the smallest subnormal */
    CHECK(fp8_round(tiny * 0.5f, f) == 0 && fp8_round(tiny * 0.51f, f) == tiny && fp8_round(tiny * 1.5f, f) == 2 * tiny,
          "%s: subnormals round to multiples of %g, ties to even", name, tiny);
}

static void test_scale_rule(void) {
    CHECK(FP8_MARGIN == 1 && fp8_scale_for(1.0f, FP8_E4M3_MAX) == 128.0f, "amax 1: scale 128 (448/1 -> 2^8, one power of margin)");
    CHECK(fp8_scale_for(448.0f, FP8_E4M3_MAX) == 0.5f && fp8_scale_for(449.0f, FP8_E4M3_MAX) == 0.25f, "amax at/over the max");
    CHECK(fp8_scale_for(1e-3f, FP8_E5M2_MAX) == 0x1p24f, "amax 1e-3 in E5M2: 2^24 (57344e3 -> 2^25, margin)");
    CHECK(fp8_scale_for(0, FP8_E4M3_MAX) == 0 && fp8_scale_for(NAN, FP8_E4M3_MAX) == 0 && fp8_scale_for(INFINITY, FP8_E4M3_MAX) == 0,
          "no history, NaN or inf: scale 0 (bf16)");
    CHECK(fp8_scale_for(1e-38f, FP8_E4M3_MAX) == 0x1p100f, "an all-but-zero max keeps the scale finite");
    for (float a = 1e-4f; a < 1e4f; a *= 1.37f) {
        float s = fp8_scale_for(a, FP8_E4M3_MAX);
        if (!(2 * a * s <= FP8_E4M3_MAX && 4 * a * s > FP8_E4M3_MAX)) { CHECK(0, "amax %g: scale %g is not the largest that fits", a, s); return; }
    }
    CHECK(1, "every scale is the largest power of two that keeps twice the max inside");
}

/* ref (R,Cn)[r][c] = sum_k q(a[r*ar + k*ak]) q(b[c*bc + k*bk]) / (sa sb), q(t) = fp8_round(t * s, f): the product of the
 * rounded operands in double; returns the worst relative difference of got from it (floor: the denominator's) */
static double worst_vs_rounded(const float *got, float *ref, int R, int Cn, int K, const float *a, int ar, int ak, float sa, Fp8Format fa,
                               const float *b, int bc, int bk, float sb, Fp8Format fb, double floor) {
    double worst = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cn; c++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)fp8_round(a[r * ar + k * ak] * sa, fa) * fp8_round(b[c * bc + k * bk] * sb, fb);
            ref[r * Cn + c] = (float)(s / ((double)sa * sb));
            worst = fmax(worst, fabs(got[r * Cn + c] - ref[r * Cn + c]) / (fabs(ref[r * Cn + c]) + floor));
        }
    return worst;
}

static void test_matmul(void) {
    enum { N = 24, IC = 40, OC = 32 };
    Rng r;
    rng_seed(&r, 7);
    float x[N * IC], w[OC * IC], dy[N * OC], out[N * OC], ref[N * OC], dx[N * IC], rdx[N * IC], dw[OC * IC], rdw[OC * IC];
    for (int i = 0; i < N * IC; i++) x[i] = rng_normal(&r) * 3;
    for (int i = 0; i < OC * IC; i++) w[i] = rng_normal(&r) * 0.05f;
    for (int i = 0; i < N * OC; i++) dy[i] = rng_normal(&r) * 1e-4f;
    x[5] = 4000;   /* past x's scale below: saturates */
    float amax[3] = {0}, *scratch = mallocCheck(matmul_fp8_scratch_bytes(4, N, IC, OC));
    Fp8Matmul q = {.x_scale = 0.25f, .w_scale = 4096.0f, .dout_scale = 0x1p28f, .amax = amax, .scratch = scratch};
    matmul_fp8_forward_cpu(out, x, w, N, IC, OC, NULL, &q);
    double worst = worst_vs_rounded(out, ref, N, OC, IC, x, IC, 1, q.x_scale, FP8_E4M3, w, IC, 1, q.w_scale, FP8_E4M3, 1e-3);
    CHECK(worst < 1e-5, "FP8 forward = the product of the rounded operands (worst rel %.2g)", worst);
    CHECK(amax[0] == 4000 && amax[1] > 0 && amax[2] == 0, "forward records max |x| %g, |w| %g, not dout", amax[0], amax[1]);
    float xq = fp8_round(4000 * 0.25f, FP8_E4M3) / 0.25f;
    CHECK(xq == FP8_E4M3_MAX / 0.25f, "4000 x 0.25 saturates at 448 (back: %g)", xq);
    memset(dw, 0, sizeof dw); memset(rdw, 0, sizeof rdw);
    matmul_fp8_backward_cpu(dx, dw, dy, x, w, N, IC, OC, 1, &q);
    double wdx = worst_vs_rounded(dx, rdx, N, IC, OC, dy, OC, 1, q.dout_scale, FP8_E5M2, w, 1, IC, q.w_scale, FP8_E4M3, 1e-7);
    double wdw = worst_vs_rounded(dw, rdw, OC, IC, N, dy, 1, OC, q.dout_scale, FP8_E5M2, x, 1, IC, q.x_scale, FP8_E4M3, 1e-7);
    CHECK(wdx < 1e-4 && wdw < 1e-4, "FP8 backward: dinp (E5M2 x E4M3) worst rel %.2g, dweight %.2g", wdx, wdw);
    CHECK(amax[2] > 0, "backward records max |dout| %g", amax[2]);
    /* no history: the plain matmul, the maxima still recorded */
    float plain[N * OC], amax0[3] = {0};
    Fp8Matmul q0 = {.amax = amax0, .scratch = scratch};
    matmul_fp8_forward_cpu(out, x, w, N, IC, OC, NULL, &q0);
    matmul_forward_cpu(plain, x, w, N, IC, OC, NULL);
    CHECK(!memcmp(out, plain, sizeof plain) && amax0[0] == 4000, "scale 0: the plain matmul, maxima recorded");
    double diff = 0;
    for (int i = 0; i < N * OC; i++) diff = fmax(diff, fabs(plain[i] - ref[i]));
    CHECK(diff > 1e-3, "the FP8 product differs from the plain one (by %.3g): the rounding happened", diff);
    free(scratch);
}

/* ------------------------------------------------------------- training */

static char shard[256];

static void small(Config *c, int precision, int steps) {
    config_defaults(c);
    c->dim = 32; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->ffn_dim = 64; c->seq_len = 16; c->batch_size = 8;
    c->warmup_steps = 0; c->max_steps = steps; c->lr = 3e-3f; c->precision = precision;
    snprintf(c->train_data, sizeof c->train_data, "%s", shard);
    c->val_data[0] = 0;
}

static void test_training(void) {
    enum { STEPS = 20 };
    Config cb, c8;
    small(&cb, PRECISION_BF16, STEPS);
    small(&c8, PRECISION_FP8, STEPS);
    Trainer tb, t8;
    trainer_init(&tb, &cb);
    trainer_init(&t8, &c8);
    CHECK(t8.model.part.fp8 && t8.be->act == DTYPE_BF16 && t8.be->emulated, "precision=fp8 on cpu: bf16 emulated, FP8 block matmuls");
    int entries = model_fp8_tensors(&t8.model);
    double lb[STEPS], l8[STEPS], worst = 0, apart = 0;
    for (int s = 0; s < STEPS; s++) {
        lb[s] = trainer_step(&tb).loss;
        l8[s] = trainer_step(&t8).loss;
        if (s == 0) CHECK(model_fp8_scaled(&t8.model) == entries, "after the first step every tensor has a scale (%d of %d)",
                          model_fp8_scaled(&t8.model), entries);
        if (s > 0) { worst = fmax(worst, fabs(l8[s] - lb[s]) / lb[s]); apart += l8[s] != lb[s]; }
    }
    CHECK(l8[0] == lb[0], "step 1 has no history: bf16 matmuls, the bf16 run's loss exactly (%.6f vs %.6f)", l8[0], lb[0]);
    CHECK(apart == STEPS - 1, "every later step runs in FP8: its loss differs from bf16's (%g of %d steps)", apart, STEPS - 1);
    CHECK(worst < 0.02 && l8[STEPS - 1] < 0.9 * l8[0], "FP8 trains like bf16: worst loss difference %.3g, loss %.3f -> %.3f", worst,
          l8[0], l8[STEPS - 1]);
    CHECK(t8.model.fp8.steps == STEPS && t8.fp8_saturated_total == 0, "%d steps of history, %d saturated tensors", t8.model.fp8.steps,
          t8.fp8_saturated_total);
    printf("fp8 (emulated) vs bf16, %d steps: worst loss difference %.3g, final %.4f vs %.4f\n", STEPS, worst, l8[STEPS - 1], lb[STEPS - 1]);
    /* a spike: every scale x 2^12 makes the values pass the formats' max; the casts saturate, counted, nothing inf */
    for (int e = 0; e < entries; e++) t8.model.fp8.scale[e] *= 4096.0f;
    StepStats st = trainer_step(&t8);
    CHECK(t8.fp8_saturated > 0 && isfinite(st.loss) && isfinite(st.grad_norm), "scales x 4096: %d tensors saturated, loss %.4f finite",
          t8.fp8_saturated, st.loss);
    int back = 1;
    for (int e = 0; e < entries; e++) back &= t8.model.fp8.scale[e] < 1e30f;
    CHECK(back && t8.fp8_saturated > 0, "the next scales come from the history again");
    trainer_free(&tb);
    trainer_free(&t8);
}

/* The producers (kernels/fp8.h) — RMSNorm before q|k|v and gate|up, SwiGLU before down and its backward before
 * gate|up's — cast the matmul operands themselves; on the CPU they emulate the same copies, so a run with them equals
 * one with LLM3D_FP8_FUSED=off (the matmuls cast) bit for bit, in every recompute mode (selective and full run the
 * norms and SwiGLU again in the backward) — and the producers ran, as many times as the schedule says. */
static void test_producers(void) {
    enum { STEPS = 6 };
    const char *mode[] = {"none", "selective", "full"};
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
        double loss[2][STEPS];
        long casts[2];
        for (int off = 0; off < 2; off++) {
            if (off) setenv("LLM3D_FP8_FUSED", "off", 1);
            Config c;
            small(&c, PRECISION_FP8, STEPS);
            c.recompute = r;
            Trainer t;
            trainer_init(&t, &c);
            unsetenv("LLM3D_FP8_FUSED");
            for (int s = 0; s < STEPS; s++) loss[off][s] = trainer_step(&t).loss;
            casts[off] = t.model.fp8.producer_casts;
            trainer_free(&t);
        }
        int same = memcmp(loss[0], loss[1], sizeof loss[0]) == 0;
        /* step 1 has no scales (plain kernels); from step 2, a layer: the forward's ln1, ln2 and SwiGLU and the backward's
         * SwiGLU; with recompute also ln1 again before q|k|v's backward, and what the recompute runs (selective: ln2 and
         * SwiGLU; full: the whole forward's three) */
        long per_layer = 4 + (r == RECOMPUTE_SELECTIVE ? 1 + 2 : r == RECOMPUTE_FULL ? 1 + 3 : 0);
        long want = (long)(STEPS - 1) * 2 * per_layer;
        printf("%s fp8 producers (RMSNorm, SwiGLU), recompute=%s: %ld calls (LLM3D_FP8_FUSED=off: %ld), losses %s\n", same && casts[0] == want ? "ok  " : "FAIL",
               mode[r], casts[0], casts[1], same ? "equal bit for bit" : "differ");
        CHECK(casts[0] == want && casts[1] == 0, "recompute=%s: the producers ran %ld times (want %ld), %ld with LLM3D_FP8_FUSED=off",
              mode[r], casts[0], want, casts[1]);
        CHECK(same, "recompute=%s: the producers' run differs from the casts' (step %d: %.9g vs %.9g)", mode[r], STEPS, loss[0][STEPS - 1],
              loss[1][STEPS - 1]);
    }
}

static void test_nan_step(void) {
    Config c;
    small(&c, PRECISION_FP8, 6);
    snprintf(c.fault, sizeof c.fault, "nan:rank=0:step=3");
    Trainer t;
    trainer_init(&t, &c);
    for (int s = 0; s < c.max_steps; s++) trainer_step(&t);
    CHECK(t.skipped_steps == 1 && t.opt.step == c.max_steps - 1, "a NaN step is skipped as fp16 skips one (%d skipped)", t.skipped_steps);
    CHECK(t.model.fp8.steps == c.max_steps - 1, "and adds no history (%d of %d steps)", t.model.fp8.steps, c.max_steps);
    int ok = 1;
    for (int e = 0; e < model_fp8_tensors(&t.model); e++) ok &= t.model.fp8.scale[e] > 0 && isfinite(t.model.fp8.scale[e]);
    CHECK(ok, "every scale stays finite and positive after it");
    trainer_free(&t);
}

/* A checkpoint whose FP8 history is damaged (rewritten whole, so every CRC is right) — a NaN in it (shape 0) or one
 * column short (shape 1) — is refused at resume, naming the file and the entry */
static void test_damaged_history(int shape) {
    char run[300], args[1200], path[400], out[1 << 14], err[1024];
    snprintf(run, sizeof run, "%s.run", shard);
    snprintf(args, sizeof args, "--dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=8 --max_steps=%%d "
             "--precision=fp8 --train_data=%s --val_data= --run_dir=%s --checkpoint_every=2 --sample_tokens=0 --log_every=1", shard, run);
    char a2[1300];
    snprintf(a2, sizeof a2, args, 2);
    int rc = test_run("build/train", a2, out, sizeof out);
    snprintf(path, sizeof path, "%s/ckpt_00000002/state.bin", run);
    CkptReader r;
    if (rc != 0 || ckpt_open(&r, path, err, sizeof err) != 0) { CHECK(0, "fp8 run to damage (rc %d): %s\n%s", rc, err, out); return; }
    CkptWriter w;
    ckpt_writer_open(&w, path, &r.state, r.config_text, (CkptWriteHooks){-1, -1});
    int found = 0;
    for (int i = 0; i < r.n; i++) {
        const CkptEntry *e = &r.entries[i];
        float *data = mallocCheck((size_t)e->bytes + 1);
        if (ckpt_read_raw(&r, e, data, err, sizeof err) != 0) die("test: %s", err);
        int64_t dims[2] = {e->shape[0], e->shape[1]};
        if (!strcmp(e->name, FP8_CHECKPOINT_NAME)) {
            found = 1;
            if (shape) dims[1]--;   /* the first rows' worth of the data, one column fewer */
            else data[5] = NAN;
        }
        ckpt_writer_add(&w, e->name, e->dtype, e->ndim, e->ndim == 2 ? dims : e->shape, data);
        free(data);
    }
    ckpt_close(&r);
    ckpt_writer_finish(&w);
    CHECK(found, "an fp8 checkpoint holds %s", FP8_CHECKPOINT_NAME);
    snprintf(a2, sizeof a2, args, 3);
    strcat(a2, " --resume=1");
    rc = test_run("build/train", a2, out, sizeof out);
    const char *want = shape ? FP8_CHECKPOINT_NAME " is 16 x 23" : "'" FP8_CHECKPOINT_NAME "' holds a non-finite value (nan) at element 5";   /* every reader's check (issue 50) */
    CHECK(rc != 0 && strstr(out, want) && strstr(out, "ckpt_00000002"),
          "a checkpoint's FP8 history %s is refused at resume, naming it (rc %d, want '%s'):\n%s", shape ? "of the wrong shape" : "with a NaN",
          rc, want, out);
    snprintf(a2, sizeof a2, "rm -rf '%s'", run);
    if (system(a2) != 0) printf("note: could not remove %s\n", run);
}

/* The plan on cuda (nothing allocated): the FP8 copies of one matmul's operands live only inside one block call, so
 * they lie under the head's buffers (the logits' chunk) after the recompute buffers (model/layout.c). Without
 * recompute, where the head's buffers are the larger (l124m), fp8's activations are bf16's plus the amax record; never
 * more than bf16's plus the scratch and the record; the scratch overlaps the logits, never a recompute buffer. */
static void test_plan(void) {
    const char *presets[2] = {"l124m", "l350m"};
    const char *mode[3] = {"none", "selective", "full"};
    char err[256];
    Comm comm;
    comm_init_one(&comm);
    for (int k = 0; k < 2; k++)
        for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
            Config c;
            config_defaults(&c);
            config_set(&c, "preset", presets[k], err, sizeof err);
            c.device = DEVICE_CUDA;
            ModelConfig mc;
            model_config_from(&mc, &c, 32000);
            MemoryPlan p[2];
            size_t scratch = 0;
            int under_head = 0, clear_of_recompute = 1;
            for (int f = 0; f < 2; f++) {
                c.precision = f ? PRECISION_FP8 : PRECISION_BF16;
                Backend gpu = memory_plan_backend(&c);
                p[f] = memory_plan(&c, &mc, &gpu, &comm, NULL, r, OPTIMIZER_ADAMW, COMPUTE_WEIGHTS_KEEP, 16);
                if (!f) continue;
                Model m;   /* the same plan's layout, to see where the scratch lies */
                ModelPart q = model_part_whole(&mc);
                q.fp8 = 1;
                model_plan(&m, &mc, &gpu, &comm, &q, 16, c.seq_len, r);
                size_t N = 16 * (size_t)c.seq_len;
                scratch = matmul_fp8_scratch_bytes(1, (int)N, m.C, 2 * m.F);   /* gate|up's: the widest here */
                /* model_plan carves views from base NULL: the pointers are offsets */
                size_t s0 = (size_t)m.fp8.scratch, l0 = (size_t)m.logits, l1 = l0 + (size_t)m.head_chunk * m.V * 2;
                under_head = s0 < l1 && l0 < s0 + scratch;
                const LayerActs *sh = &m.shared;
                const void *rec[] = {sh->ln1, sh->att, sh->hs, sh->qkv, sh->res_mid, sh->h13};
                for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++)
                    if (rec[i]) clear_of_recompute &= (size_t)rec[i] < s0;   /* every recompute buffer starts before it */
                model_plan_free(&m);
            }
            long extra = (long)(p[1].activations - p[0].activations);
            long record = ((long)c.n_layers * FP8_MATMULS * FP8_ROLES * 4 + 255) / 256 * 256;
            printf("%s plan on cuda, recompute=%s: activations bf16 %.1f MiB, fp8 %+ld bytes (its FP8 scratch %.1f MiB)\n", presets[k], mode[r],
                   p[0].activations / 1048576.0, extra, scratch / 1048576.0);
            CHECK(under_head && clear_of_recompute, "%s recompute=%s: the FP8 scratch lies under the logits, after the recompute buffers",
                  presets[k], mode[r]);
            CHECK(extra >= record && extra <= record + ((long)scratch + 255) / 256 * 256,
                  "%s recompute=%s: fp8 adds %ld bytes of activations, at most its scratch's %zu and the record's %ld", presets[k], mode[r],
                  extra, scratch, record);
            if (k == 0 && r == RECOMPUTE_NONE)
                CHECK(extra == record, "l124m: fp8's activations are bf16's plus the amax record's %ld bytes (%+ld)", record, extra);
        }
}

/* On cuda, FP8 matrices whose sizes are not multiples of 16 are refused before anything runs, naming the size */
static void test_sizes_refused(void) {
    char out[1 << 14];
    const char *base = "--device=cuda --precision=fp8 --n_layers=2 --n_heads=4 --n_kv_heads=2 --seq_len=16 --batch_size=2 --train_data=/nonexistent";
    char args[600];
    snprintf(args, sizeof args, "%s --dim=40 --ffn_dim=64", base);
    int rc = test_run("build/train", args, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "sizes must be multiples of 16, and dim = 40 is not") && strstr(out, "--precision=bf16"),
          "precision=fp8 on cuda with dim=40 is refused naming it (rc %d):\n%s", rc, out);
    snprintf(args, sizeof args, "%s --dim=32 --ffn_dim=72 --tp=2", base);
    rc = test_run("build/train", args, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "ffn_dim/tp = 36 is not"), "precision=fp8 on cuda with ffn_dim/tp=36 is refused naming it (rc %d):\n%s",
          rc, out);
}

int main(void) {
    test_round(FP8_E4M3, "E4M3");
    test_round(FP8_E5M2, "E5M2");
    test_scale_rule();
    test_matmul();
    test_plan();
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_fp8_%d.bin", (int)getpid());
    enum { N = 20000 };
    uint32_t *tok = mallocCheck(N * 4);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i % 7) * 5 + (i / 7) % 3);
    shard_write(shard, tok, N, 40);
    free(tok);
    test_training();
    test_producers();
    test_nan_step();
    test_damaged_history(0);
    test_damaged_history(1);
    test_sizes_refused();
    unlink(shard);
    return test_summary();
}
