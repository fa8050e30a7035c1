/* tests/test_precision.c — mixed precision on the CPU, through the bf16/fp16
 * emulation (backend_cpu_emulated):
 *   - bf16 and fp16 models match fp32 on the PyTorch fixture's weights within
 *     the usual 1e-2 (loss) and 5e-2 (gradients);
 *   - fp16 dynamic loss scaling: a forced overflow (a starting scale of 2^40)
 *     skips steps and halves the scale until the gradients are finite, then
 *     training goes on with no NaN anywhere; x2 after 2000 clean steps. */
#include "test.h"
#include "fixture.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fixture_in_precision(DType act) {
    /* the fixture's weights and batch, fp32 against emulated bf16/fp16 */
    Fixture f;
    fixture_load(&f);
    int B = f.B, T = f.T, *ids = f.ids, *targets = f.targets;
    Comm comm;
    comm_init_one(&comm);
    Model m32, m16;
    fixture_model(&f, &m32, backend_cpu(), &comm, RECOMPUTE_NONE);
    fixture_model(&f, &m16, backend_cpu_emulated(act), &comm, RECOMPUTE_NONE);
    float *g32 = mallocCheck(m32.n_params * 4), *g16 = mallocCheck(m32.n_params * 4);
    int valid = f.valid;
    model_zero_grads(&m32); model_zero_grads(&m16);
    double l32 = model_forward(&m32, ids, targets, B, T, 1.0f / valid) / valid;
    double l16 = model_forward(&m16, ids, targets, B, T, 1.0f / valid) / valid;
    model_backward(&m32); model_backward(&m16);
    model_get_grads(&m32, g32); model_get_grads(&m16, g16);
    double num = 0, den = 0;
    for (size_t i = 0; i < m32.n_params; i++) { num += (g16[i] - g32[i]) * (double)(g16[i] - g32[i]); den += (double)g32[i] * g32[i]; }
    double le = fabs(l16 - l32) / l32, ge = sqrt(num / den);
    CHECK(le < 1e-2, "%s loss %.5f vs fp32 %.5f (rel %.3g)", dtype_name(act), l16, l32, le);
    CHECK(ge < 5e-2, "%s gradients vs fp32: rel err %.3g", dtype_name(act), ge);
    printf("%s (emulated): loss rel err %.2e, gradient rel err %.2e\n", dtype_name(act), le, ge);
    model_free(&m32); model_free(&m16);
    free(g32); free(g16);
    fixture_free(&f);
}

static void test_fp16_loss_scaling(void) {
    char shard[256];
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_precision_%d.bin", (int)getpid());
    enum { N = 20000 };
    uint32_t *tok = mallocCheck(N * 4);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i % 7) * 5 + (i / 7) % 3);   /* learnable structure */
    shard_write(shard, tok, N, 40);
    free(tok);
    Config c;
    config_defaults(&c);
    c.dim = 32; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.ffn_dim = 64; c.seq_len = 16; c.batch_size = 8;
    c.warmup_steps = 0; c.max_steps = 60; c.lr = 3e-3f; c.precision = PRECISION_FP16; c.loss_scale_init = 1099511627776.0f; /* 2^40 */
    snprintf(c.train_data, sizeof c.train_data, "%s", shard);
    c.val_data[0] = 0;
    Trainer tr;
    trainer_init(&tr, &c);
    CHECK(tr.be->emulated && tr.be->act == DTYPE_FP16, "precision=fp16 on cpu selects the emulated backend");
    double first = 0, last = 0;
    int nan_seen = 0;
    for (int s = 0; s < c.max_steps; s++) {
        StepStats st = trainer_step(&tr);
        if (s == 0) first = st.loss;
        last = st.loss;
        nan_seen |= !isfinite(st.loss);
    }
    CHECK(tr.skipped_steps > 0, "a starting scale of 2^40 overflows fp16: %d steps skipped", tr.skipped_steps);
    CHECK(tr.loss_scale < 1099511627776.0f && tr.loss_scale >= 1.0f, "the scale was halved to %g", tr.loss_scale);
    CHECK(tr.opt.step == c.max_steps - tr.skipped_steps, "skipped steps do not advance the optimizer (%d of %d)", tr.opt.step, c.max_steps);
    CHECK(!nan_seen && last < 0.8 * first, "training recovers after the overflows: loss %.3f -> %.3f", first, last);
    float *p = mallocCheck(tr.model.n_params * 4);
    model_get_params(&tr.model, p);
    int finite = 1;
    for (size_t i = 0; i < tr.model.n_params; i++) finite &= isfinite(p[i]) != 0;
    CHECK(finite, "no NaN or inf reached the weights");
    printf("fp16 (emulated) forced overflow: %d steps skipped, scale 2^40 -> %g, loss %.3f -> %.3f\n", tr.skipped_steps,
           tr.loss_scale, first, last);
    /* growth: x2 after LOSS_SCALE_WINDOW clean steps, not before; an overflow resets the count */
    float s0 = tr.loss_scale;
    tr.loss_scale_clean_steps = 0;
    for (int i = 0; i < LOSS_SCALE_WINDOW - 1; i++) trainer_update_loss_scale(&tr, 1);
    CHECK(tr.loss_scale == s0, "no growth before %d clean steps", LOSS_SCALE_WINDOW);
    trainer_update_loss_scale(&tr, 1);
    CHECK(tr.loss_scale == 2 * s0, "x2 after %d clean steps (%g -> %g)", LOSS_SCALE_WINDOW, s0, tr.loss_scale);
    trainer_update_loss_scale(&tr, 0);
    CHECK(tr.loss_scale == s0 && tr.loss_scale_clean_steps == 0, "x0.5 on overflow and the clean count restarts");
    free(p);
    trainer_free(&tr);
    unlink(shard);
}

int main(void) {
    fixture_in_precision(DTYPE_BF16);
    fixture_in_precision(DTYPE_FP16);
    test_fp16_loss_scaling();
    return test_summary();
}
