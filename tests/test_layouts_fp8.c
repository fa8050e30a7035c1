/* tests/test_layouts_fp8.c — precision=fp8 keeps the layout promise. Its scales are delayed, one a
 * tensor, powers of two, and every rank's amax record is reduced (max) over the whole world at each
 * step's end (model/fp8.h): the tp ranks' slices of a weight and of the sequence-parallel stream, the
 * dp ranks' micro-batches and the pipeline stages' layers all give the one max one rank would see. So
 * dp, ZeRO-1 and pp cast with one rank's scales at every step (asserted from each run's log), tp
 * with sequence parallelism, tp x pp and dp x tp with them up to a max that rounds across a scale's
 * boundary (TP_TENSORS says when); every layout's losses and final tensors equal one rank's FP8 run
 * to the rounding of bf16 layouts (losses 1e-3, tests/layouts.h), and FP8 ran: each run's own log
 * says how many tensors it cast (asserted), and its losses differ from a bf16 run's. A checkpoint
 * holds the scales' history: saved by one layout and resumed by another, the run ends where the
 * unbroken one ends (1e-5); resumed from a bf16 checkpoint it says its history starts. The harness
 * is tests/layouts.h. */
#include "test.h"
#include "layouts.h"

#define FP8_TENSORS (4 * 4 * 3)   /* BASE's 4 layers x 4 block matmuls x (x, weight, dout) */
/* tp sums its partial products in another order, so a bf16 value lands one ulp from one rank's now and
 * then; where that value is a tensor's max and sits on a scale's boundary (448 / 2^k: a bf16 number, 3.5
 * here), the layout's scale for that tensor is one power of two from one rank's for a step (measured:
 * layer 0's q|k|v input, max 3.5 on one rank, 3.484 under tp=2, at step 2; the fingerprint differs by 1).
 * The losses stay within 1e-4; the second moment of a norm weight, the most sensitive tensor, within
 * 0.11 (bf16's tp layouts: 1.9e-2). dp and pp sum nothing differently: their scales are one rank's at
 * every step, asserted. */
#define TP_TENSORS 0.15

/* A run's FP8 accounting from its log: the tensors it cast at the last step, and each step's scale fingerprint. */
typedef struct { int tensors, steps; long scales[8]; } Fp8Log;
static Fp8Log fp8_log(const char *name) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
    FILE *f = fopen(path, "r");
    Fp8Log l = {.tensors = -1};
    const char *p;
    while (f && fgets(line, sizeof line, f)) {
        if ((p = strstr(line, "\"fp8_tensors\": "))) l.tensors = atoi(p + 15);
        if ((p = strstr(line, "\"fp8_scales\": ")) && l.steps < 8) l.scales[l.steps++] = atol(p + 14);
    }
    if (f) fclose(f);
    return l;
}

/* A layout's run: one rank's losses and tensors to bf16's layout tolerance, FP8 casts of every tensor, and
 * at every step the very scales one rank cast with. */
static void fp8_layout(const char *name, int ranks, const char *args, double tensor_tol, int scales_exact) {
    char a[200];
    snprintf(a, sizeof a, "--precision=fp8 %s", args);
    layout_tol("ref8", name, ranks, a, bf16, tensor_tol);
    Fp8Log l = fp8_log(name), r = fp8_log("ref8");
    int same = 0;
    for (int k = 0; k < l.steps && k < r.steps; k++) same += l.scales[k] == r.scales[k];
    CHECK(l.tensors == FP8_TENSORS, "%s: casts %d tensors to FP8 (want %d)", a, l.tensors, FP8_TENSORS);
    CHECK(l.steps == r.steps && (scales_exact ? same == l.steps : same >= 1), "%s: scales equal to one rank's at %d of %d steps (want %s)",
          a, same, l.steps, scales_exact ? "all" : "the first at least");
    printf("%-44s scales equal to one rank's at %d of %d steps\n", a, same, l.steps);
}

int main(void) {
    layouts_begin();
    if (train("ref8", 1, "--precision=fp8") || train("refbf", 1, "--precision=bf16")) die("test: the one-rank reference run failed:\n%s", out);
    CHECK(fp8_log("ref8").tensors == FP8_TENSORS, "one rank casts %d tensors to FP8 (want %d)", fp8_log("ref8").tensors, FP8_TENSORS);
    Curve r8 = read_curve("ref8"), rb = read_curve("refbf");
    CHECK(r8.steps == 3 && r8.loss[0] == rb.loss[0] && r8.loss[2] != rb.loss[2],
          "FP8's first step is bf16's (no history yet: %.6f vs %.6f), its last differs (%.6f vs %.6f)", r8.loss[0], rb.loss[0], r8.loss[2],
          rb.loss[2]);
    fp8_layout("dp2", 2, "--dp=2", bf16, 1);
    fp8_layout("dp2z", 2, "--dp=2 --zero=1", bf16, 1);
    fp8_layout("pp2", 2, "--pp=2 --recompute=full", bf16, 1);
    fp8_layout("tp2s", 2, "--tp=2 --sequence_parallel=1", TP_TENSORS, 0);
    fp8_layout("tp2pp2", 4, "--tp=2 --pp=2 --pp_schedule=interleaved", TP_TENSORS, 0);
    fp8_layout("dp2tp2", 4, "--dp=2 --tp=2 --sequence_parallel=1 --recompute=selective", TP_TENSORS, 0);
    /* resume across layouts: the checkpoint holds the scales' history, so the continued run is the unbroken one */
    resume("ref8", "res8", 2, "--precision=fp8 --dp=2", 1, "--precision=fp8");
    resume("ref8", "res8p", 1, "--precision=fp8", 2, "--precision=fp8 --pp=2");
    if (train("res8b", 1, "--precision=bf16 --checkpoint_every=2") == 0) {   /* a bf16 checkpoint has no history: said */
        char rm[300];
        snprintf(rm, sizeof rm, "rm -rf %s/res8b/ckpt_00000003", dir);
        CHECK(system(rm) == 0 && train("res8b", 1, "--precision=fp8 --resume=1") == 0 &&
              strstr(out, "precision=fp8 from a checkpoint without FP8 scales"), "fp8 resumed from a bf16 checkpoint says so:\n%s", out);
    } else CHECK(0, "the bf16 run to resume in fp8 failed:\n%s", out);
    return layouts_end();
}
