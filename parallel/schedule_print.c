/* parallel/schedule_print.c — a schedule drawn: each stage's timeline as text
 * columns and as an SVG picture, from the simulated times of
 * schedule_check (parallel/schedule.h).
 *
 * A column is one time unit (a chunk's forward); a backward takes two. F3 is
 * the forward of micro-batch 3, B3 its backward (zb1: B3 its input gradients
 * and W3 its weight gradients, a column each); with interleaving, F3.1 is
 * micro-batch 3 through the stage's chunk 1. A backward the data-parallel pass
 * split around a bucket's reduction shows as its parts; the reductions
 * themselves take no simulated time and are listed under the timeline (in the
 * SVG, a lane under the stage: each from its start to the stage's wait). With
 * ZeRO-2/3 each stage's gathers, frees and reductions are summed up, and
 * schedule_print_actions lists every action in order. */
#include "schedule.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static void label(const Schedule *s, const Action *a, char *out, size_t size) {
    char k = a->kind == ACT_FORWARD ? 'F' : a->kind == ACT_BACKWARD_WEIGHT ? 'W' : 'B';   /* zb1: B the input gradients, W the weights' */
    if (s->chunks > 1) snprintf(out, size, "%c%d.%d", k, a->mb, a->chunk);
    else snprintf(out, size, "%c%d", k, a->mb);
}

void schedule_print(const Schedule *s, const ScheduleSim *sim, FILE *out) {
    int width = s->chunks > 1 ? 6 : 4, cols = (int)(sim->makespan + 0.5);
    char *row = mallocCheck((size_t)cols * width + 2);
    fprintf(out, "time   |");
    for (int c = 0; c < cols; c++) fprintf(out, "%-*d", width, c);
    fprintf(out, "\n");
    for (int st = 0; st < s->stages; st++) {
        memset(row, ' ', (size_t)cols * width);
        row[(size_t)cols * width] = 0;
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            if (!action_is_compute(a->kind)) continue;
            double t0 = sim->start[(size_t)st * sim->max_actions + i], t1 = sim->end[(size_t)st * sim->max_actions + i];
            int c0 = (int)(t0 + 1e-9), c1 = (int)(t1 - 1e-9);
            char l[16];
            label(s, a, l, sizeof l);
            int first = a->kind == ACT_FORWARD || a->from == 0;   /* the later parts of a split backward carry no label */
            for (int c = c0; c <= c1 && c < cols; c++) {
                char *cell = row + (size_t)c * width;
                if (*cell != ' ') continue;
                const char *text = c == c0 && first ? l : "..";
                memcpy(cell, text, strlen(text));
            }
        }
        fprintf(out, "stage %d|%s\n", st, row);
    }
    free(row);
    for (int st = 0; st < s->stages; st++) {
        int shown = 0;
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            if (a->kind != ACT_REDUCE) continue;
            if (!shown++) fprintf(out, "stage %d starts reducing gradient buckets at t =", st);
            fprintf(out, " %g (bucket %d)", sim->start[(size_t)st * sim->max_actions + i], a->bucket);
        }
        if (shown) fprintf(out, "\n");
    }
}

/* One action as a short word: F0/2 = forward of micro-batch 0, step 2 (zero=3); B0/1 = backward step 1; gather(5) = bucket 5. */
static void word(const Schedule *s, const Action *a, char *out, size_t size) {
    char l[16];
    if (action_is_compute(a->kind)) {
        label(s, a, l, sizeof l);
        if (a->kind != ACT_FORWARD || a->to > 0) snprintf(out, size, "%s/%d", l, a->from);
        else snprintf(out, size, "%s", l);
    } else if (a->mb >= 0) snprintf(out, size, "%s(mb %d)", action_names[a->kind], a->mb);
    else if (a->kind == ACT_OPTIMIZER) snprintf(out, size, "optimizer");
    else snprintf(out, size, "%s(%d)", action_names[a->kind], a->bucket);
}

void schedule_print_zero(const Schedule *s, const ScheduleSim *sim, size_t param_bytes, FILE *out) {
    if (!s->zero) return;
    for (int st = 0; st < s->stages; st++) {
        int n[ACT_KINDS] = {0}, prefetched = 0, reads = 0;
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            n[a->kind]++;
            if (!action_is_compute(a->kind) || a->reads < 0) continue;
            reads++;
            /* its gather (if it needed one) came before the previous compute: it ran while that computed */
            int k = i - 1;
            while (k >= 0 && !action_is_compute(s->list[st][k].kind) &&
                   !(s->list[st][k].kind == ACT_GATHER && s->list[st][k].bucket == a->reads)) k--;
            prefetched += k < 0 || s->list[st][k].kind != ACT_GATHER;
        }
        fprintf(out, "zero=%d   | stage %d: %d reduce-scatters (each waited before its place is written again), ", s->zero, st, n[ACT_REDUCE]);
        if (s->zero == 3) {
            char b[32];
            size_t high = sim->gathered_high ? sim->gathered_high[st] : 0;
            fprintf(out, "%d gathers and %d frees; %d of %d weight reads gathered a compute ahead; at most %zu parameters gathered at once (%s)",
                    n[ACT_GATHER], n[ACT_FREE], prefetched, reads, high, format_bytes((double)high * param_bytes, b, sizeof b));
        } else {
            fprintf(out, "then the all-gather of the updated weights (%d buckets)", n[ACT_GATHER]);
        }
        fprintf(out, "\n");
    }
}

/* 0: prepares the next compute (waits, gathers, receives, the optimizer); 1: a compute; 2: follows one (reductions, frees, sends). */
static int phase(ActionKind k) {
    if (action_is_compute(k)) return 1;
    return k == ACT_REDUCE || k == ACT_FREE || k == ACT_SEND_ACT || k == ACT_SEND_GRAD ? 2 : 0;
}

void schedule_print_actions(const Schedule *s, FILE *out) {
    for (int st = 0; st < s->stages; st++) {
        fprintf(out, "actions  | stage %d, in order, a line per compute ([F0/2]: micro-batch 0's forward step 2; (5): bucket 5):\n", st);
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            char w[48];
            word(s, a, w, sizeof w);
            if (i == 0 || (phase(s->list[st][i - 1].kind) >= 1 && phase(a->kind) <= 1)) fprintf(out, i ? "\n          " : "          ");
            fprintf(out, phase(a->kind) == 1 ? "[%s] " : "%s ", w);
        }
        fprintf(out, "\n");
    }
}

/* The width in pixels of n characters of the pictures' 12-pixel sans-serif text (its widest letters
 * are about 0.6 em; legends are sized by it so nothing is cut at the edge). */
#define TEXT_PX(n) ((int)(n) * 7)

/* The simulated start of stage st's wait for bucket b's operation (kind: ACT_REDUCE_WAIT or ACT_GATHER_WAIT); -1: none. */
static double wait_time(const Schedule *s, const ScheduleSim *sim, int st, int kind, int b) {
    for (int i = 0; i < s->n[st]; i++)
        if ((int)s->list[st][i].kind == kind && s->list[st][i].bucket == b) return sim->start[(size_t)st * sim->max_actions + i];
    return -1;
}

/* One panel: a title line, each stage's lane (and, under a stage that reduces buckets of gradients (dp > 1), a lane
 * of its own: each bucket's reduction (and ZeRO-1's all-gather) as a thin bar from where it starts to where the stage
 * waits for it, so what runs under the rest of the backward shows as overlap; reductions take no simulated time: a
 * bar spans when the operation may run, not how long the link needs), then its legend. f NULL: only measures.
 * Returns the panel's height; *width its width. */
static int panel(FILE *f, const Schedule *s, const ScheduleSim *sim, const char *title, int top, double unit, int *width) {
    const int lane = 34, left = 70;
    int *y = mallocCheck(((size_t)s->stages + 1) * sizeof(int)), *ops = callocCheck((size_t)s->stages, sizeof(int)), any = 0;
    for (int st = 0; st < s->stages; st++)
        for (int i = 0; i < s->n[st]; i++) ops[st] += s->list[st][i].kind == ACT_REDUCE || s->list[st][i].kind == ACT_GATHER;
    y[0] = top + 40;
    for (int st = 0; st < s->stages; st++) { y[st + 1] = y[st] + lane + (ops[st] ? lane : 0); any |= ops[st] > 0; }
    /* the legend, a line each, short enough to read at the picture's rendered size */
    char legend[5][160];
    int n_legend = 0, gathers = 0;
    for (int st = 0; st < s->stages; st++) gathers |= wait_time(s, sim, st, ACT_GATHER_WAIT, 0) >= 0;
    if (schedule_splits_backward(s->kind))
        snprintf(legend[n_legend++], sizeof legend[0], "F forward (blue), B input gradients (green), W weight gradients (orange): 1 time unit each; grey: idle");
    else
        snprintf(legend[n_legend++], sizeof legend[0], "grey: idle (the bubble); simulated with a forward = 1, a backward = 2 time units");
    if (s->zero)
        snprintf(legend[n_legend++], sizeof legend[0], "ticks: gather starts (orange), reduce-scatter starts (red), weights released (dark grey)");
    if (any) {
        snprintf(legend[n_legend++], sizeof legend[0], "dp sums: each bucket's gradient %s (orange)%s,",
                 s->zero >= 2 ? "reduce-scatter" : "all-reduce",
                 !gathers ? "" : s->zero >= 3 ? " and its weights' all-gather (purple)" : " and ZeRO-1's all-gather (purple)");
        snprintf(legend[n_legend++], sizeof legend[0], "from when it may start to where the stage waits for it:");
        snprintf(legend[n_legend++], sizeof legend[0], "what runs under the compute is hidden; a short tick is waited for at once");
    }
    int legend_w = 0;
    for (int k = 0; k < n_legend; k++) if (TEXT_PX(strlen(legend[k])) > legend_w) legend_w = TEXT_PX(strlen(legend[k]));
    int plot_w = (int)(sim->makespan * unit), height = y[s->stages] + 14 + 18 * n_legend - top;
    *width = left + (plot_w > legend_w ? plot_w : legend_w) + 20;
    if (!f) { free(y); free(ops); return height; }
    fprintf(f, "<text x='10' y='%d' font-size='14'>%s</text>\n", top + 20, title);
    for (int st = 0; st < s->stages; st++) {
        int yy = y[st];
        fprintf(f, "<text x='10' y='%d'>stage %d</text>\n", yy + lane / 2 + 4, st);
        fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='#eeeeee'/>\n", left, yy + 2, (int)(sim->makespan * unit), lane - 4);
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            if (!action_is_compute(a->kind)) continue;
            double t0 = sim->start[(size_t)st * sim->max_actions + i], t1 = sim->end[(size_t)st * sim->max_actions + i];
            /* forwards blue, backwards (and a split one's B) green, W orange; later chunks darker */
            int shade = 200 - 60 * a->chunk / (s->chunks > 1 ? s->chunks - 1 : 1);
            const char *fmt = a->kind == ACT_FORWARD ? "rgb(90,%d,240)" : a->kind == ACT_BACKWARD_WEIGHT ? "rgb(220,%d,90)" : "rgb(70,200,%d)";
            char colour[32], l[16];
            snprintf(colour, sizeof colour, fmt, shade - 40);
            label(s, a, l, sizeof l);
            fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s' stroke='white'/>\n", left + t0 * unit, yy + 2,
                    (t1 - t0) * unit, lane - 4, colour);
            /* the later parts of a split backward carry no label, nor does a box too narrow for its label */
            if ((a->kind == ACT_FORWARD || a->from == 0) && TEXT_PX(strlen(l)) + 3 <= (t1 - t0) * unit)
                fprintf(f, "<text x='%.1f' y='%d' fill='white'>%s</text>\n", left + t0 * unit + 3, yy + lane / 2 + 4, l);
        }
        if (!ops[st]) continue;
        int yd = yy + lane, k = 0;   /* the stage's data-parallel lane: one thin row per operation */
        double row = (double)(lane - 6) / ops[st];
        fprintf(f, "<text x='10' y='%d' font-size='10'>dp sums</text>\n", yd + lane / 2 + 4);
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            if (a->kind != ACT_REDUCE && a->kind != ACT_GATHER) continue;
            double t0 = sim->start[(size_t)st * sim->max_actions + i];
            double t1 = wait_time(s, sim, st, a->kind == ACT_REDUCE ? ACT_REDUCE_WAIT : ACT_GATHER_WAIT, a->bucket);
            double x = left + t0 * unit, bar = t1 > t0 ? (t1 - t0) * unit : 0;
            if (bar < 4) bar = 4;   /* started where it is waited for: exposed, a tick */
            fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'><title>bucket %d %s</title></rect>\n", x,
                    yd + 2 + k * row, bar, row > 2 ? row - 1 : row, a->kind == ACT_REDUCE ? "rgb(240,150,40)" : "rgb(160,90,200)",
                    a->bucket, a->kind == ACT_REDUCE ? (s->zero >= 2 ? "reduce-scatter" : "all-reduce") : "all-gather");
            k++;
        }
        /* ZeRO: a gather starts (orange, top), a reduce-scatter starts (red, bottom), a release (grey, middle) */
        for (int i = 0; s->zero && i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            const char *colour = a->kind == ACT_GATHER ? "orange" : a->kind == ACT_REDUCE ? "red" : a->kind == ACT_FREE ? "#555555" : NULL;
            if (!colour || (a->kind == ACT_GATHER && s->zero < 3)) continue;
            double x = left + sim->start[(size_t)st * sim->max_actions + i] * unit;
            int y0 = a->kind == ACT_GATHER ? yy + 2 : a->kind == ACT_REDUCE ? yy + lane - 12 : yy + lane / 2 - 4;
            fprintf(f, "<rect x='%.1f' y='%d' width='3' height='10' fill='%s'/>\n", x - 1.5, y0, colour);
        }
    }
    for (int k = 0; k < n_legend; k++) fprintf(f, "<text x='%d' y='%d'>%s</text>\n", left, y[s->stages] + 20 + 18 * k, legend[k]);
    free(y); free(ops);
    return height;
}

/* A time unit's width: 36 px, wider for a short step (640 px at least) and so that the shortest compute (a ZeRO-3
 * forward cut into one piece a unit) still holds its label. */
static double unit_of(const Schedule *s, const ScheduleSim *sim) {
    double unit = sim->makespan * 36 >= 640 ? 36 : 640 / sim->makespan, shortest = 1;
    for (int st = 0; st < s->stages; st++)
        for (int i = 0; i < s->n[st]; i++) {
            size_t k = (size_t)st * sim->max_actions + i;
            int compute = s->list[st][i].kind == ACT_FORWARD || s->list[st][i].kind == ACT_BACKWARD;
            if (compute && sim->end[k] > sim->start[k] && sim->end[k] - sim->start[k] < shortest) shortest = sim->end[k] - sim->start[k];
        }
    return unit * shortest < 24 ? 24 / shortest : unit;
}

int schedule_write_svg_beside(const Schedule *s, const ScheduleSim *sim, const char *title, const Schedule *b, const ScheduleSim *bsim,
                              const char *btitle, const char *path) {
    char tmp[4200];
    FILE *f = atomic_open(path, tmp, sizeof tmp);   /* the output door: dies naming path when it cannot be written */
    /* one time scale for both: a stage's whole forward is one unit, so a zbv chunk (half a stage) is half of one */
    double k1 = s->kind == PP_ZBV ? 0.5 : 1, k2 = b && b->kind == PP_ZBV ? 0.5 : 1, unit = unit_of(s, sim) / k1;
    if (b && unit_of(b, bsim) / k2 > unit) unit = unit_of(b, bsim) / k2;
    double span = b && bsim->makespan * k2 > sim->makespan * k1 ? bsim->makespan * k2 : sim->makespan * k1;
    if (b && span * unit > 4000) unit = 4000 / span;   /* within reason */
    int w1, w2 = 0, h1 = panel(NULL, s, sim, title, 0, unit * k1, &w1), h2 = b ? panel(NULL, b, bsim, btitle, 0, unit * k2, &w2) : 0;
    int w = w1 > w2 ? w1 : w2, h = h1 + h2;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' font-family='sans-serif' font-size='12'>\n",
            w, h, w, h);   /* the viewBox lets a page scale it to its width */
    fprintf(f, "<rect width='%d' height='%d' fill='white'/>\n", w, h);
    panel(f, s, sim, title, 0, unit * k1, &w1);
    if (b) panel(f, b, bsim, btitle, h1, unit * k2, &w2);
    fprintf(f, "</svg>\n");
    atomic_commit(f, tmp, path);
    return 0;
}

int schedule_write_svg(const Schedule *s, const ScheduleSim *sim, const char *path, const char *title) {
    return schedule_write_svg_beside(s, sim, title, NULL, NULL, NULL, path);
}
