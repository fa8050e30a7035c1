/* model/fp8.c — precision=fp8's delayed scaling (the recipe and why: model/fp8.h):
 * the arguments each block matmul's FP8 op gets, and the step's end, which
 * turns the step's amax record into the next step's scales. */
#include "llama.h"
#include "fp8.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int model_fp8_tensors(const Model *m) { return m->cfg.n_layers * FP8_MATMULS * FP8_ROLES; }
static size_t entries(const Model *m) { return (size_t)model_fp8_tensors(m); }
static float role_max(int role) { return role == FP8_DOUT ? FP8_E5M2_MAX : FP8_E4M3_MAX; }

float fp8_scale_for(float amax, float fmt_max) {
    if (!(amax > 0) || !isfinite(amax)) return 0;
    int e = (int)floorf(log2f(fmt_max) - log2f(amax)) - FP8_MARGIN;
    if (e > 100) e = 100;   /* an all-but-zero tensor: keep the scale finite */
    if (e < -100) e = -100;
    return ldexpf(1.0f, e);
}

/* every tensor's scale from the largest max of its history */
static void rescale(Fp8State *s, size_t n) {
    for (size_t e = 0; e < n; e++) {
        float h = 0;
        for (int k = 0; k < FP8_HISTORY; k++) h = fmaxf(h, s->history[(size_t)k * n + e]);
        s->scale[e] = fp8_scale_for(h, role_max((int)(e % FP8_ROLES)));
    }
}

void model_fp8_args(const Model *m, int i, int which, Fp8Matmul *out) {
    const Fp8State *s = &m->fp8;
    const float *sc = s->scale + ((size_t)s->global_layer[i] * FP8_MATMULS + which) * FP8_ROLES;
    *out = (Fp8Matmul){.x_scale = sc[FP8_X], .w_scale = sc[FP8_W], .dout_scale = sc[FP8_DOUT],
                                    .amax = s->amax + ((size_t)i * FP8_MATMULS + which) * FP8_ROLES, .scratch = s->scratch};
}

int model_fp8_producer_casts(const Model *m, const Fp8Matmul *q) {
    return m->fp8.producers && q->x_scale > 0 && q->w_scale > 0 && q->dout_scale > 0;
}

int model_fp8_step_end(Model *m, int finite) {
    Fp8State *s = &m->fp8;
    size_t n = entries(m), per_layer = FP8_MATMULS * FP8_ROLES, local = (size_t)m->n_local_layers * per_layer;
    int world = comm_group_size(m->comm, GROUP_WORLD);
    float *mine = callocCheck(n, sizeof(float)), *all = mallocCheck((size_t)world * n * sizeof(float));
    float *rec = mallocCheck((local ? local : 1) * sizeof(float));
    m->be->download(rec, s->amax, local * sizeof(float));
    for (int i = 0; i < m->n_local_layers; i++)
        memcpy(mine + (size_t)s->global_layer[i] * per_layer, rec + (size_t)i * per_layer, per_layer * sizeof(float));
    comm_allgather_host(m->comm, GROUP_WORLD, mine, all, n * sizeof(float));
    int saturated = 0, clean = finite;
    for (size_t e = 0; e < n; e++) {
        float a = 0;
        for (int r = 0; r < world; r++) {
            float v = all[(size_t)r * n + e];
            if (isnan(v) || v > a) a = isnan(a) ? a : v;
        }
        mine[e] = a;
        if (!isfinite(a)) clean = 0;
        if (s->scale[e] > 0 && a * s->scale[e] > role_max((int)(e % FP8_ROLES))) saturated++;
    }
    if (clean) {   /* a step with inf/nan anywhere adds nothing: its maxima would turn every scale to 0 */
        memcpy(s->history + (size_t)(s->steps % FP8_HISTORY) * n, mine, n * sizeof(float));
        s->steps++;
        rescale(s, n);
    }
    m->be->zero(s->amax, local * sizeof(float));
    free(mine); free(all); free(rec);
    return saturated;
}

int model_fp8_scaled(const Model *m) {
    int n = 0;
    for (size_t e = 0; e < entries(m); e++) n += m->fp8.scale[e] > 0;
    return n;
}

long model_fp8_fingerprint(const Model *m) {
    long f = 0;
    for (size_t e = 0; e < entries(m); e++)
        if (m->fp8.scale[e] > 0) f += (long)(e + 1) * ilogbf(m->fp8.scale[e]);
    return f;
}

void model_fp8_history_get(const Model *m, float *out) {
    const Fp8State *s = &m->fp8;
    size_t n = entries(m);
    for (int k = 0; k < FP8_HISTORY; k++)   /* the ring from its oldest row: the one the next step writes */
        memcpy(out + (size_t)k * n, s->history + (size_t)((s->steps + k) % FP8_HISTORY) * n, n * sizeof(float));
}

void model_fp8_history_set(Model *m, const float *in) {
    Fp8State *s = &m->fp8;
    size_t n = entries(m);
    memcpy(s->history, in, (size_t)FP8_HISTORY * n * sizeof(float));
    s->steps = FP8_HISTORY;   /* the next step overwrites row 0, the oldest */
    rescale(s, n);
}
