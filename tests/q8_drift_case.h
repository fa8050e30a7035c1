/* tests/q8_drift_case.h — issue 52's drift measure and bound for 8-bit AdamW, and its synthetic drift case;
 * shared by tests/test_adamw8bit_drift.c (the CPU reference, in make test) and tests/gpu/test_adamw8bit_cuda.c
 * (the CUDA kernel), so both run the same gradients against the same bound, and both tests' rare-token replays
 * (the embedding gradients of a real AdamW run) use the same measure and bound (q8_adam_part, q8_slack,
 * q8_bound_replay).
 *
 * The case: an embedding of 512 rows of 128 (one quantization block a row), rows 0..255 with a gradient
 * every step, rows 256..511 with one gradient each (at a step in 1..130), 150 steps at lr 3e-3, weight
 * decay 0.1, b1 0.9, b2 0.95, eps 1e-8. Each gradient is N(0, 1) * 1e-2 * 10^(-4u), u uniform: within a
 * row they span four decades and more, so some elements sit far below their block's largest, at the
 * bottom of the map. The random stream starts at Q8D_RNG_STATE: the state tests/gpu/test_adamw8bit_cuda.c's
 * stream had when this case first ran on an H100 (2026-12-07, after that test's other cases drew from it),
 * so this is that run's case, gradient for gradient.
 *
 * The measure: for each element of one gradient, the Adam part of its movement after that gradient,
 * A = sum over the later steps of (p * decay - p_new) — what the moments move it, without the decoupled
 * weight decay p * lr * wd that both optimizers apply alike — under 8-bit AdamW (A8) and fp32 AdamW (A32).
 * After one gradient m keeps its sign, so |A| is the sum of the step sizes.
 * Why not the total movement here (the wording; the rare-token replays assert it beside the bound,
 * where it holds: at most 1.001x on the CPU, 1.055x on the H100): in this synthetic case an
 * element whose m rounds to 0 (below 2.75e-7 of its block's absmax: the safe direction) moves by weight
 * decay alone, where AdamW's small Adam steps may cancel its decay: on the H100 case 0.22 lr against AdamW's
 * net 0.04 lr, a 5.7x "drift" that is a missing Adam step, not an extra one.
 *
 * The bound: |A8| <= 1.5 |A32| + c * K * lr (+ 1e-4 lr for the fp32 rounding of the measured steps), with
 *   c = (sqrt(1.5 * 2) - 1)^2 / (2 - 1) - (1.5 - 1) = 0.0359   (the map and the 1.5x alone: any setting),
 *   K = sum over the steps after the gradient of m^ / sqrt(v^) of a one-gradient element
 *     = sum_k (1-b1) b1^k / (1-b1^t) * sqrt(1-b2^t) / (sqrt(1-b2) b2^(k/2))   (the setting's betas and steps:
 *       at b1 0.9, b2 0.95 and 150 steps <= 5.80; 5.39 late in a run).
 * Why: a row of one gradient has m and s = sqrt(v) at the same fraction f of their block's absmax, so
 * both round to the same code magnitude (the floor and the map's missing -5.5e-7 only ever raise s's):
 * |m| and s are multiplied by the same factor rho (s by at least rho). Where sqrt(v^) >> eps that cancels in
 * m / sqrt(v) and the step is AdamW's. Where eps dominates (sqrt(v^) ~ eps: gradients ~1e-8 here) the
 * step is about m^ / eps and rho passes through. Round to nearest on this map raises |m| by at most
 * 1.466x above its two smallest magnitudes (the widest relative gap, 7.75e-6 to 2.125e-5), so there the
 * step is at most 1.5x AdamW's; at them by up to 2x (a magnitude just above half of the smallest code: 5.5e-7 on
 * the positive side, 3.25e-6 on the negative side, which lacks -5.5e-7). With x = rho f S / eps, the
 * excess of one step over 1.5x AdamW's is at most K_k lr * max_x [rho x/(rho x + 1) - 1.5 x/(x + 1)], and
 * for rho = 2 that maximum is c (at x = 0.18). The excess rides m's own decay: it is not drift (steps
 * AdamW no longer takes), and its sum is at most 0.21 lr. The premise is the block's: every element of it
 * had its one gradient at the same step (a rare token's embedding row, one block a row, in the replays too).
 * The path: the case must contain elements whose m rounded up by more than 1.5x and whose Adam movement
 * passed 1.5x AdamW's (the absolute term holds them), and elements whose m rounded to 0 that moved more
 * than 1.5x AdamW's in total (why the measure leaves the decay out); q8d_result counts both. */
#pragma once
#include "test.h"
#include "../common/util.h"
#include "../kernels/adamw8bit.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the measure and the bound, for any run (the synthetic case below, the rare-token replays) */

/* After one step of 8-bit or fp32 AdamW (decay = 1 - lr * wd, the kernels' own fp32 value): adds each element's
 * Adam part of the step's movement, p_before * decay - p_after, to a[i]; an element with a gradient this step
 * starts again from 0, so a[i] is the Adam part of its movement since its last gradient. */
static inline void q8_adam_part(double *a, const float *g, const float *before, const float *after, float decay, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = g[i] != 0.0f ? 0.0 : a[i] + ((double)(before[i] * decay) - after[i]);
}

/* The bound's absolute term, in units of lr, for an element whose one gradient came at step t0 of a run of
 * `steps` steps at betas b1, b2 (the header): c K + 1e-4. */
static inline double q8_slack(double b1, double b2, int t0, int steps) {
    double rho = 2.0, a = 1.5;
    double c = (sqrt(a * rho) - 1) * (sqrt(a * rho) - 1) / (rho - 1) - (a - 1), K = 0;
    for (int t = t0 + 1; t <= steps; t++) {
        int k = t - t0;
        K += (1 - b1) * pow(b1, k) / (1 - pow(b1, t)) * sqrt(1 - pow(b2, t)) / (sqrt(1 - b2) * pow(b2, k / 2.0));
    }
    return c * K + 1e-4;
}

typedef struct {
    size_t n, over;               /* elements measured; those past the bound */
    size_t past, moved;           /* |A8| > 1.5 |A32| (held by the absolute term); A32 != 0 (the measure ran) */
    double worst, excess, slack;  /* largest |A8| / |A32|; largest |A8| - 1.5 |A32| (lr); largest slack (lr) */
} Q8Bound;

/* One element: its Adam parts a8, a32 against 1.5 |a32| + slack lr. */
static inline void q8_bound_add(Q8Bound *b, double a8, double a32, double slack, double lr) {
    a8 = fabs(a8); a32 = fabs(a32);
    b->n++;
    b->over += a8 > 1.5 * a32 + slack * lr;
    b->past += a8 > 1.5 * a32;
    b->moved += a32 != 0;
    if (a8 > b->worst * a32) b->worst = a32 > 0 ? a8 / a32 : INFINITY;
    b->excess = fmax(b->excess, (a8 - 1.5 * a32) / lr);
    b->slack = fmax(b->slack, slack);
}

/* A replay of `steps` steps at lr, betas b1, b2 (the rare-token case's: each element's Adam parts a8, a32 since
 * its last gradient, at step last[i], of grads[i] steps with one): the elements of one gradient at least 10
 * steps before the end against the bound (once), every other element against 1.5x + others_slack lr (its m sums
 * many gradients and may end near 0 by cancellation, where AdamW barely moves: no bound is derived for it). */
static inline void q8_bound_replay(Q8Bound *once, Q8Bound *others, const double *a8, const double *a32, const int *last,
                                   const int *grads, size_t n, int steps, double lr, double b1, double b2, double others_slack) {
    double *slack = mallocCheck((size_t)(steps + 1) * sizeof(double));   /* by the step of the gradient */
    for (int t0 = 0; t0 <= steps; t0++) slack[t0] = q8_slack(b1, b2, t0, steps);
    memset(once, 0, sizeof *once);
    memset(others, 0, sizeof *others);
    for (size_t i = 0; i < n; i++) {
        if (grads[i] == 1 && steps - last[i] >= 10) q8_bound_add(once, a8[i], a32[i], slack[last[i]], lr);
        else q8_bound_add(others, a8[i], a32[i], others_slack, lr);
    }
    free(slack);
}

/* Total movement after the last gradient (weight decay included: issue 52's own wording of the drift check,
 * asserted for the rare-token replays' elements of one gradient, printed for the others), 8-bit (q) against AdamW (a): elements of one gradient at least 10 steps before the end: the largest
 * ratio and how many pass 1.5x; the others: the largest excess over 1.5x in lr, and how many pass 1.5x + slack lr. */
typedef struct { double worst, excess; size_t once, over, over_many; } Q8Total;
static inline Q8Total q8_total_drift(const float *q_end, const float *q_at, const float *a_end, const float *a_at, const int *last,
                                     const int *grads, size_t n, int steps, double lr, double slack) {
    Q8Total d = {0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        double mv = fabs((double)q_end[i] - q_at[i]), ma = fabs((double)a_end[i] - a_at[i]);
        if (grads[i] == 1 && steps - last[i] >= 10) {
            d.once++;
            d.over += mv > 1.5 * ma;
            if (mv > d.worst * ma) d.worst = ma > 0 ? mv / ma : INFINITY;
        } else {
            d.over_many += mv > 1.5 * ma + slack * lr;
            d.excess = fmax(d.excess, (mv - 1.5 * ma) / lr);
        }
    }
    return d;
}

/* A replay's checks (who names it in each line): the measure ran (10,000+ elements of one gradient, 90% of them
 * moved by AdamW's Adam steps), no m != 0 with v decoding to 0 (holes element-steps), the one-gradient elements
 * within their bound, the others within 1.5x + 0.5 lr. */
static inline void q8_replay_checks(const char *who, const Q8Bound *once, const Q8Bound *others, size_t holes) {
    CHECK(once->n > 10000 && once->moved > once->n * 9 / 10, "%s: %zu elements of one gradient 10+ steps before the end, %zu of them "
          "moved by fp32 AdamW's Adam steps after it (the measure ran)", who, once->n, once->moved);
    CHECK(holes == 0, "%s: no element has m != 0 with v decoding to 0 (%zu element-steps do)", who, holes);
    CHECK(once->over == 0, "%s: no element of one gradient moves after it by its Adam steps more than 1.5x AdamW's + c K lr "
          "(<= %.3f lr): %zu do (worst %.3fx, 1.5x + %.4f lr)", who, once->slack, once->over, once->worst, once->excess);
    CHECK(others->over == 0, "%s: no other element moves after its last gradient by its Adam steps more than 1.5x AdamW's + 0.5 lr: "
          "%zu do (1.5x + %.2f lr)", who, others->over, others->excess);
}

/* A replay of one run's embedding gradients through fp32 AdamW and the 8-bit kernel (tests/test_adamw8bit_drift.c
 * on the CPU, rt_replay of tests/gpu/test_adamw8bit_cuda.c through CUDA): both weights before each step (b32, b8),
 * the Adam part of each element's moves since its last gradient (a32, a8), its weights then (at32, at8), that step
 * and how many steps had one (last, grads), and the element-steps with m != 0 and v decoding to 0 (holes). */
typedef struct { size_t n, holes; float *b32, *b8, *at32, *at8; double *a32, *a8; int *last, *grads; } Q8Replay;
static inline void q8r_init(Q8Replay *r, size_t n, const float *w0) {
    *r = (Q8Replay){n, 0, mallocCheck(n * 4), mallocCheck(n * 4), mallocCheck(n * 4), mallocCheck(n * 4), callocCheck(n, 8),
                    callocCheck(n, 8), callocCheck(n, sizeof(int)), callocCheck(n, sizeof(int))};
    memcpy(r->at32, w0, n * 4);
    memcpy(r->at8, w0, n * 4);
}
static inline void q8r_free(Q8Replay *r) {
    free(r->b32); free(r->b8); free(r->at32); free(r->at8); free(r->a32); free(r->a8); free(r->last); free(r->grads);
}
/* before step t: both runs' weights */
static inline void q8r_before(Q8Replay *r, const float *w32, const float *w8) {
    memcpy(r->b32, w32, r->n * 4);
    memcpy(r->b8, w8, r->n * 4);
}
/* after step t with gradient g and the kernels' decay factor: the Adam parts, the weights of the elements with a
 * gradient, and the 8-bit state's decoded moments dm, dv counted for holes */
static inline void q8r_after(Q8Replay *r, int t, const float *g, const float *w32, const float *w8, float decay, const float *dm,
                             const float *dv) {
    q8_adam_part(r->a32, g, r->b32, w32, decay, r->n);
    q8_adam_part(r->a8, g, r->b8, w8, decay, r->n);
    for (size_t i = 0; i < r->n; i++) {
        if (g[i] != 0.0f) { r->at32[i] = w32[i]; r->at8[i] = w8[i]; r->last[i] = t; r->grads[i]++; }
        r->holes += dm[i] != 0.0f && dv[i] == 0.0f;
    }
}
/* the end of `steps` steps at lr with betas b1, b2, ending at weights w32, w8: the bound (q8_bound_replay), the checks
 * (q8_replay_checks, who naming them), the check in its own words — no element of one gradient moves in
 * total after it more than 1.5x what AdamW moves it (the synthetic drift case cannot hold this one: an element whose
 * m rounds to 0 there moves by weight decay alone; tests/q8_drift_case.h's top says why) — and one line of
 * figures, its newline left to the caller */
static inline void q8r_finish(const Q8Replay *r, const char *who, int steps, float lr, double b1, double b2, const float *w32,
                              const float *w8) {
    Q8Bound once, others;
    q8_bound_replay(&once, &others, r->a8, r->a32, r->last, r->grads, r->n, steps, lr, b1, b2, 0.5);
    Q8Total d = q8_total_drift(w8, r->at8, w32, r->at32, r->last, r->grads, r->n, steps, lr, 0.5);
    q8_replay_checks(who, &once, &others, r->holes);
    CHECK(d.over == 0, "%s: no element of one gradient moves after it in total (weight decay included) more than 1.5x AdamW's: "
          "%zu of %zu do (worst %.3fx)", who, d.over, d.once, d.worst);
    printf("%s of %d steps of embedding gradients: the %zu elements of one gradient moved after it by their Adam steps at most "
           "%.3fx fp32 AdamW's, 1.5x + %.4f lr (bound 1.5x + <= %.3f lr; %zu past 1.5x), the others at most 1.5x + %.2f lr; in total "
           "(weight decay included) the once elements at most %.3fx (%zu over 1.5x), the others 1.5x + %.2f lr; m != 0 with v = 0: %zu",
           who, steps, once.n, once.worst, once.excess, once.slack, once.past, others.excess, d.worst, d.over, d.excess, r->holes);
}

#define Q8D_ROWS 512
#define Q8D_DIM 128
#define Q8D_N ((size_t)Q8D_ROWS * Q8D_DIM)
#define Q8D_STEPS 150
#define Q8D_EVERY 256                         /* rows Q8D_EVERY.. get one gradient each */
#define Q8D_WD 0.1f
#define Q8D_RNG_STATE 0x05d81162e9ef0c62ull   /* the H100 run's stream at this case (the header) */

static inline AdamWHyper q8d_hyper(int t) {
    AdamWHyper h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = t};
    return h;
}

typedef struct {
    Rng rng;
    int once[Q8D_ROWS];   /* 0: a gradient every step; else the step of the row's one gradient */
    float *w0;            /* (N) initial weights */
    double *a8, *a32;     /* (N) Adam part of the movement since the element's last gradient */
    float *at8, *at32;    /* (N) weights right after that gradient (for the total movement) */
    float *rho;           /* (N) |m| after quantizing over |m| before, at that gradient's step */
    int *last;            /* (N) the step of that gradient */
} Q8Drift;

/* The rows' schedule and the initial weights, from the case's stream. */
static inline void q8d_init(Q8Drift *d) {
    d->rng.s = Q8D_RNG_STATE;
    for (int r = 0; r < Q8D_ROWS; r++) d->once[r] = r < Q8D_EVERY ? 0 : 1 + (int)(rng_u64(&d->rng) % (Q8D_STEPS - 20));
    d->w0 = mallocCheck(Q8D_N * 4);
    for (size_t i = 0; i < Q8D_N; i++) d->w0[i] = rng_normal(&d->rng) * 0.02f;
    d->a8 = callocCheck(Q8D_N, 8); d->a32 = callocCheck(Q8D_N, 8);
    d->at8 = mallocCheck(Q8D_N * 4); d->at32 = mallocCheck(Q8D_N * 4); d->rho = mallocCheck(Q8D_N * 4);
    d->last = callocCheck(Q8D_N, sizeof(int));
    memcpy(d->at8, d->w0, Q8D_N * 4);
    memcpy(d->at32, d->w0, Q8D_N * 4);
}
static inline void q8d_free(Q8Drift *d) {
    free(d->w0); free(d->a8); free(d->a32); free(d->at8); free(d->at32); free(d->rho); free(d->last);
}

/* Step t's gradients (N): each row's elements N(0, 1) * 1e-2 * 10^(-4u), the normal drawn first. */
static inline void q8d_grads(Q8Drift *d, int t, float *g) {
    for (int r = 0; r < Q8D_ROWS; r++)
        for (int k = 0; k < Q8D_DIM; k++) {
            size_t i = (size_t)r * Q8D_DIM + k;
            g[i] = 0.0f;
            if (d->once[r] != 0 && d->once[r] != t) continue;
            float z = rng_normal(&d->rng), u = rng_uniform(&d->rng);
            g[i] = z * 1e-2f * powf(10.0f, -4.0f * u);
        }
}

/* After step t: the weights before and after it (8-bit, fp32 AdamW), the 8-bit state after it (host copy;
 * one slice of rows of Q8D_DIM from code 0 and absmax 0) and fp32 AdamW's m after it. */
static inline void q8d_track(Q8Drift *d, int t, const float *g, const float *p8_before, const float *p8, const float *p32_before,
                             const float *p32, AdamW8bitState st, const float *m32) {
    const float *map = adamw8bit_map();
    float decay = 1.0f - q8d_hyper(t).lr * Q8D_WD;   /* the kernels' own */
    q8_adam_part(d->a8, g, p8_before, p8, decay, Q8D_N);
    q8_adam_part(d->a32, g, p32_before, p32, decay, Q8D_N);
    for (size_t i = 0; i < Q8D_N; i++) {
        if (g[i] == 0.0f) continue;
        /* the 8-bit m before quantizing is fp32 AdamW's here: a once row's moments were 0 */
        float mq = fabsf(map[st.m_code[i]] * st.m_absmax[i / Q8D_DIM]);
        d->rho[i] = m32[i] != 0.0f ? mq / fabsf(m32[i]) : 1.0f;
        d->last[i] = t; d->at8[i] = p8[i]; d->at32[i] = p32[i];
    }
}

typedef struct {
    Q8Bound adam;                 /* the elements of one gradient against the bound */
    size_t up, up_over;           /* m rounded up by more than 1.5x; of them, |A8| > 1.5 |A32| */
    size_t zeroed, zeroed_over;   /* m rounded to 0 under AdamW's moving m; of them, total movement > 1.5x AdamW's */
    size_t total_over;            /* total movement > 1.5x AdamW's (the first form of the check) */
    double total_worst;
} Q8DriftResult;

/* p8, p32: the final weights. */
static inline Q8DriftResult q8d_result(const Q8Drift *d, const float *p8, const float *p32) {
    Q8DriftResult r = {0};
    AdamWHyper h = q8d_hyper(1);
    for (int row = Q8D_EVERY; row < Q8D_ROWS; row++) {
        double slack = q8_slack(h.beta1, h.beta2, d->once[row], Q8D_STEPS);
        for (int k = 0; k < Q8D_DIM; k++) {
            size_t i = (size_t)row * Q8D_DIM + k;
            double a8 = fabs(d->a8[i]), a32 = fabs(d->a32[i]);
            double mv = fabs((double)p8[i] - d->at8[i]), ma = fabs((double)p32[i] - d->at32[i]);
            q8_bound_add(&r.adam, a8, a32, slack, h.lr);
            r.up += d->rho[i] > 1.5f;
            r.up_over += d->rho[i] > 1.5f && a8 > 1.5 * a32;
            r.zeroed += d->rho[i] == 0.0f && a32 > 0;
            r.zeroed_over += d->rho[i] == 0.0f && a32 > 0 && mv > 1.5 * ma;
            r.total_over += mv > 1.5 * ma;
            if (mv > r.total_worst * ma) r.total_worst = ma > 0 ? mv / ma : INFINITY;
        }
    }
    return r;
}
