/* parallel/schedule_print.c — a schedule drawn: each stage's timeline as text
 * columns and as an SVG picture, from the simulated times of
 * schedule_check (parallel/schedule.h).
 *
 * A column is one time unit (a chunk's forward); a backward takes two. F3 is
 * the forward of micro-batch 3, B3 its backward; with interleaving, F3.1 is
 * micro-batch 3 through the stage's chunk 1. A backward the data-parallel pass
 * split around a bucket's reduction shows as its parts; the reductions
 * themselves take no simulated time and are listed under the timeline. */
#include "schedule.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static void label(const Schedule *s, const Action *a, char *out, size_t size) {
    char k = a->kind == ACT_FORWARD ? 'F' : 'B';
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
            if (a->kind != ACT_FORWARD && a->kind != ACT_BACKWARD) continue;
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

int schedule_write_svg(const Schedule *s, const ScheduleSim *sim, const char *path, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const int unit = 36, lane = 34, left = 70, top = 40;
    int w = left + (int)(sim->makespan * unit) + 20, h = top + s->stages * lane + 30;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' font-size='12'>\n", w, h);
    fprintf(f, "<rect width='%d' height='%d' fill='white'/>\n<text x='10' y='20' font-size='14'>%s</text>\n", w, h, title);
    for (int st = 0; st < s->stages; st++) {
        int y = top + st * lane;
        fprintf(f, "<text x='10' y='%d'>stage %d</text>\n", y + lane / 2 + 4, st);
        fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='#eeeeee'/>\n", left, y + 2, (int)(sim->makespan * unit), lane - 4);
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            if (a->kind != ACT_FORWARD && a->kind != ACT_BACKWARD) continue;
            double t0 = sim->start[(size_t)st * sim->max_actions + i], t1 = sim->end[(size_t)st * sim->max_actions + i];
            /* forwards blue, backwards green; later chunks darker */
            int shade = 200 - 60 * a->chunk / (s->chunks > 1 ? s->chunks - 1 : 1);
            const char *fmt = a->kind == ACT_FORWARD ? "rgb(90,%d,240)" : "rgb(70,200,%d)";
            char colour[32], l[16];
            snprintf(colour, sizeof colour, fmt, shade - 40);
            label(s, a, l, sizeof l);
            fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s' stroke='white'/>\n", left + t0 * unit, y + 2,
                    (t1 - t0) * unit, lane - 4, colour);
            fprintf(f, "<text x='%.1f' y='%d' fill='white'>%s</text>\n", left + t0 * unit + 3, y + lane / 2 + 4, l);
        }
    }
    fprintf(f, "<text x='%d' y='%d'>grey: idle (the bubble) — simulated with a forward = 1, a backward = 2 time units</text>\n", left,
            top + s->stages * lane + 20);
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}
