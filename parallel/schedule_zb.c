/* parallel/schedule_zb.c — the zero-bubble orders (Qi et al., "Zero Bubble
 * Pipeline Parallelism", 2023), every backward split into B and W: ZB-H1 (one
 * chunk a stage) and ZB-V (two chunks a stage in V order — stage st holds the
 * model's virtual stages st and 2p-1-st, so the first and the last layers sit
 * on stage 0 — at 1F1B's memory).
 *
 * ZB-H1 comes in two, by config key zb1_memory (what a stage holds from a
 * micro-batch's forward to its W). busiest: the paper's handcrafted order
 * (zb1_stage below), every stage up to p — 1F1B's busiest stage's, stage 0's
 * — and ZB-H1's step, 3m + p - 1 time units. 1f1b (the default): stage st at
 * 1F1B's own p - st, found by the run on paper below; its step is
 * 3m + 2(p - 1), and no order does better there: the last stage, holding one
 * micro-batch, runs F, B, W of each in turn, so its last B ends at
 * 3m + p - 2 at the earliest, and each stage before runs its last B one unit
 * later and then that micro-batch's W. The same argument shows why ZB-H1's
 * step needs more than p - st on the later stages: with no idle time after the
 * fill, stage st's last B must end st + 1 units before the step does, all of
 * them W's of distinct micro-batches, so it holds st + 1 at once.
 *
 * The run on paper (zb1_memory=1f1b and ZB-V), with every chunk's F, B and W
 * one time unit, as the paper's own scheduler does: each stage, when free,
 * takes the first piece of work it can start, in this order of preference: a
 * B whose gradient is there (the stages before wait for it; the later chunk's
 * first), a forward of the later chunk (it finishes a micro-batch), a forward
 * of the first chunk (it starts one) while the stage holds fewer than its cap
 * (from the first forward to the last W: zb1 p - st; ZB-V's starts at p
 * micro-batches, 2p chunks, and grows, up to 2p, only until the run reaches
 * the shortest step there is, 6m + p - 1 chunk-times, which it does at p),
 * else a W, which nobody waits for, to fill the gap; with nothing it can start
 * now, the piece that can start first. Sends never wait (the executor posts
 * them and goes on), so these orders are the ones schedule_check simulates,
 * and there it proves them sound and deadlock-free. */
#include "schedule_order.h"
#include "schedule.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int kind, p, m, v;  /* PP_ZB1 (v = 1) or PP_ZBV (v = 2) */
    int cap;            /* micro-batches a stage holds at most, from their first forward to their last W (zb1: cap - st) */
    double *f, *b;      /* (vp virtual stages x m) when each F and B ended; -1: not yet run */
    int *next_f, *next_b;       /* (vp) the next micro-batch each virtual stage forwards / backwards */
    int *w_queue, *w_head, *w_tail;   /* (p x vm) per stage: the (mb, chunk) pairs whose B ran and W has not, in B's order */
    int *open;          /* (p) micro-batches between their first forward and their last W on each stage */
    double *t;          /* (p) when each stage is free */
} Paper;

static int vs_of(const Paper *z, int st, int c) { return schedule_virtual_stage(z->kind, z->p, st, c); }

/* When piece kind (0 F, 1 B) of virtual stage vs for its next micro-batch can start; -1: not yet known (or none left). */
static double ready_at(const Paper *z, int kind, int vs) {
    int m = z->m, last = z->v * z->p - 1;
    if (kind == 0) {
        int mb = z->next_f[vs];
        if (mb >= m) return -1;
        return vs == 0 ? 0 : z->f[(vs - 1) * m + mb];
    }
    int mb = z->next_b[vs];
    if (mb >= m || z->f[vs * m + mb] < 0) return -1;
    return vs == last ? z->f[vs * m + mb] : z->b[(vs + 1) * m + mb];
}

/* The piece stage st runs next and when it starts; 0 when it has nothing left or nothing known yet. Candidates in
 * the order of preference; the one that starts first wins, ties to the preferred. */
static int choose(const Paper *z, int st, Work *out, double *start) {
    double now = z->t[st], best = 0;
    int found = 0;
    for (int k = 0; k < 5; k++) {   /* B of the later chunk, B of the first, F of the later, F of the first (memory permitting), W */
        Work w;
        double r;
        if (k < 4) {
            int fwd = k >= 2, c = k % 2 == 0 ? z->v - 1 : 0, vs = vs_of(z, st, c);
            if (z->v == 1 && k % 2 == 0) continue;   /* one chunk: no later one */
            if (fwd && c == 0 && z->open[st] >= (z->kind == PP_ZB1 ? z->cap - st : z->cap)) continue;   /* zb1: 1F1B's p - st */
            if (fwd && z->kind == PP_ZB1 && z->open[st] - (z->w_tail[st] - z->w_head[st]) >= z->p - st) continue;   /* 1F1B's F to B */
            r = ready_at(z, !fwd, vs);
            w = (Work){fwd, fwd ? z->next_f[vs] : z->next_b[vs], c, 0};
        } else {
            if (z->w_head[st] == z->w_tail[st]) continue;
            int q = z->w_queue[st * z->v * z->m + z->w_head[st]];
            r = now;
            w = (Work){0, q / z->v, q % z->v, 1};
        }
        if (r < 0) continue;
        double s = r > now ? r : now;
        if (!found || s < best) { found = 1; best = s; *out = w; }
        if (s <= now) break;   /* it can start at once: nothing less preferred goes before it */
    }
    *start = best;
    return found;
}

static void run(Paper *z, int st, Work w, double start) {
    int m = z->m, vs = vs_of(z, st, w.chunk);
    double end = start + 1;
    z->t[st] = end;
    if (w.forward) {
        z->f[vs * m + w.mb] = end;
        z->next_f[vs]++;
        if (w.chunk == 0) z->open[st]++;
    } else if (!w.weight) {
        z->b[vs * m + w.mb] = end;
        z->next_b[vs]++;
        z->w_queue[st * z->v * m + z->w_tail[st]++] = w.mb * z->v + w.chunk;
    } else {
        z->w_head[st]++;
        if (w.chunk == 0) z->open[st]--;
    }
}

/* One run on paper with the cap; fills each stage's order (w: p rows of 3vm) when w is not NULL. Returns the makespan. */
static double paper_run(int kind, int p, int m, int cap, Work *w, int *n) {
    int v = kind == PP_ZBV ? 2 : 1, row = 3 * v * m;
    Paper z = {.kind = kind, .p = p, .m = m, .v = v, .cap = cap};
    int V = v * p, left = 3 * v * m * p;
    z.f = mallocCheck((size_t)V * m * sizeof(double));
    z.b = mallocCheck((size_t)V * m * sizeof(double));
    for (int i = 0; i < V * m; i++) z.f[i] = z.b[i] = -1;
    z.next_f = callocCheck(V, sizeof(int));
    z.next_b = callocCheck(V, sizeof(int));
    z.w_queue = callocCheck((size_t)p * v * m, sizeof(int));
    z.w_head = callocCheck(p, sizeof(int));
    z.w_tail = callocCheck(p, sizeof(int));
    z.open = callocCheck(p, sizeof(int));
    z.t = callocCheck(p, sizeof(double));
    if (n) memset(n, 0, (size_t)p * sizeof(int));
    double makespan = 0;
    while (left > 0) {   /* the stage whose next piece starts first runs it (ties: the lower stage) */
        int who = -1;
        double when = 0;
        Work pick = {0};
        for (int st = 0; st < p; st++) {
            Work x;
            double t0;
            if (choose(&z, st, &x, &t0) && (who < 0 || t0 < when)) { who = st; when = t0; pick = x; }
        }
        if (who < 0) die("internal: the %s order for pp=%d, %d micro-batches found no piece to run", schedule_name(kind), p, m);
        run(&z, who, pick, when);
        if (w) w[(size_t)who * row + n[who]++] = pick;
        if (when + 1 > makespan) makespan = when + 1;
        left--;
    }
    free(z.f); free(z.b); free(z.next_f); free(z.next_b); free(z.w_queue); free(z.w_head); free(z.w_tail); free(z.open); free(z.t);
    return makespan;
}

/* ZB-H1, the paper's handcrafted order (Qi et al. 2023, section 3.1): stage st runs 1F1B's warm-up (p - st forwards),
 * then for each micro-batch j its B, the W of micro-batch j - st (none while j < st: put off by st) and the next
 * forward, and in the cool-down the st W's still put off. The stage reaches its first B after p - 1 units idle
 * (st waiting for its first input, p - 1 - st for the first gradient) and is never idle again: each W it puts off
 * fills a slot 1F1B spends waiting for a gradient, and its last B leaves st + 1 W's to run while the stages before
 * still run theirs — the step is 3m + p - 1 units, ZB-H1's formula. Each stage holds p micro-batches (forward to
 * W) at most: 1F1B's stage 0, its busiest; no order can keep stage st at 1F1B's own p - st and reach the formula
 * (docs/pipeline-parallel.md: the last stage would have to hold p). w: st's pieces (3m); returns how many. */
static int zb1_stage(int p, int m, int st, Work *w) {
    int k = 0, warm = p - st < m ? p - st : m, next_w = 0;
    for (int j = 0; j < warm; j++) w[k++] = (Work){1, j, 0, 0};
    for (int j = 0; j < m; j++) {
        w[k++] = (Work){0, j, 0, 0};
        if (j >= st) w[k++] = (Work){0, next_w++, 0, 1};
        if (j + warm < m) w[k++] = (Work){1, j + warm, 0, 0};
    }
    while (next_w < m) w[k++] = (Work){0, next_w++, 0, 1};
    return k;
}

int zb_orders(int kind, int p, int m, int zb1_memory, Work *w, int *n) {
    if (kind == PP_ZB1 && zb1_memory == ZB1_MEMORY_BUSIEST) {
        for (int st = 0; st < p; st++) n[st] = zb1_stage(p, m, st, w + (size_t)st * 3 * m);
        return p;
    }
    if (kind == PP_ZB1) {   /* stage st within 1F1B's own p - st: the run on paper at that cap */
        paper_run(kind, p, m, p, w, n);
        return p;
    }
    int v = 2, best_cap = p;
    double target = 3.0 * v * m + p - 1, best = -1;   /* the shortest step there is: every stage busy but for the fill */
    for (int cap = p; cap <= 2 * p; cap++) {   /* the least memory that reaches it, else the least that does best */
        double t = paper_run(kind, p, m, cap, NULL, NULL);
        if (best < 0 || t < best) { best = t; best_cap = cap; }
        if (t <= target) break;
    }
    paper_run(kind, p, m, best_cap, w, n);
    return best_cap;
}
