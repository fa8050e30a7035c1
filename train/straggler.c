/* train/straggler.c — naming the rank the others wait for (config key straggler_pct).
 *
 * The idea: on logged steps every rank's step-time split is gathered anyway
 * (StepStats); a rank's own work is what it spent loading data, computing and
 * updating — the rest of its step is waiting for the others. A rank whose
 * work exceeds the median of the other ranks doing the same work (the same
 * pipeline stage; all ranks when each stage has one rank) by more than
 * straggler_pct percent, and by at least a millisecond, is a straggler: the log names it
 * with its split, so "data wait" (a slow disk or loader) reads apart from
 * "compute" (a slow or throttled device). */
#include "trainer.h"
#include <stdlib.h>

static double work(const StepSplit *s) { return s->data + s->compute + s->optimizer; }

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of the work of the other ranks with rank me's key; -1 when there are none */
static double median_of(const StepSplit *all, int n, const int *key, int me, double *scratch) {
    int m = 0;
    for (int r = 0; r < n; r++)
        if (key[r] == key[me] && r != me) scratch[m++] = work(&all[r]);
    if (m == 0) return -1;
    qsort(scratch, m, sizeof(double), by_value);
    return m % 2 ? scratch[m / 2] : 0.5 * (scratch[m / 2 - 1] + scratch[m / 2]);
}

void straggler_find(StepStats *s, const StepSplit *all, int n, int pp, int inner, double pct) {
    s->straggler_rank = -1;
    s->stragglers = 0;
    if (pct <= 0 || n < 2) return;
    int *key = malloc(n * sizeof(int));
    double *scratch = malloc(n * sizeof(double)), *median = malloc(n * sizeof(double));
    if (!key || !scratch || !median) die("out of host memory for the straggler check");
    for (int r = 0; r < n; r++) key[r] = n / pp > 1 ? (r / inner) % pp : 0;   /* the same pipeline stage, if it has company */
    double worst = 0;
    for (int r = 0; r < n; r++) {
        median[r] = median_of(all, n, key, r, scratch);
        double excess = work(&all[r]) - median[r];
        if (median[r] < 0 || excess <= 1e-3 || excess <= median[r] * pct / 100) continue;
        s->stragglers++;
        if (s->straggler_rank < 0 || excess / median[r] > worst) {
            worst = median[r] > 0 ? excess / median[r] : 1e9;
            s->straggler_rank = r;
            s->straggler = all[r];
            s->straggler_median = median[r];
        }
    }
    free(key); free(scratch); free(median);
}

void straggler_print(const StepStats *s, double pct, FILE *out) {
    if (s->straggler_rank < 0) return;
    const StepSplit *w = &s->straggler;
    fprintf(out, "straggler | rank %d: step work %.1f ms, %.0f%% over the others' median %.1f ms (straggler_pct=%g) | data wait %.1f ms | "
                 "compute %.1f ms | optimizer %.1f ms", s->straggler_rank, 1e3 * work(w),
            s->straggler_median > 0 ? 100 * (work(w) / s->straggler_median - 1) : 100.0, 1e3 * s->straggler_median, pct,
            1e3 * w->data, 1e3 * w->compute, 1e3 * w->optimizer);
    if (s->stragglers > 1) fprintf(out, " | and %d more rank(s) over the threshold", s->stragglers - 1);
    fprintf(out, "\n");
}
