/* parallel/schedule.c — the builders of a step's action lists: 1F1B, GPipe,
 * interleaved 1F1B (Megatron's), ZB-H1 (zero bubble, the backward split into
 * B and W), forwards only; the data-parallel pass; the activation slots
 * (parallel/schedule.h).
 *
 * Every builder says only in which order a stage runs the forward and the
 * backward of its (micro-batch, chunk) pairs; emit_forward and emit_backward
 * put the receive just before the work that needs it and the send just after
 * the work that produced it, so the pairs Megatron posts together (send the
 * forward and receive a backward, send the backward and receive a forward)
 * come out as one group by themselves. */
#include "schedule.h"
#include "../common/util.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *const action_names[ACT_KINDS] = {"forward", "backward", "backward-input", "backward-weight", "send-act", "recv-act", "send-grad", "recv-grad",
                                              "reduce", "reduce-wait", "optimizer", "gather", "gather-wait", "free"};

static void push_at(Schedule *s, int stage, int at, Action a) {
    if (s->n[stage] == s->cap[stage]) {
        s->cap[stage] = s->cap[stage] ? 2 * s->cap[stage] : 64;
        s->list[stage] = realloc(s->list[stage], (size_t)s->cap[stage] * sizeof(Action));
        if (!s->list[stage]) die("out of host memory for a schedule");
    }
    Action *l = s->list[stage];
    memmove(l + at + 1, l + at, (size_t)(s->n[stage] - at) * sizeof(Action));
    a.slot = a.keep = -1;
    l[at] = a;
    s->n[stage]++;
}
static void push(Schedule *s, int stage, Action a) { push_at(s, stage, s->n[stage], a); }

static void init(Schedule *s, int kind, int p, int m, int v) {
    memset(s, 0, sizeof *s);
    s->kind = kind; s->stages = p; s->micro_batches = m; s->chunks = v;
    s->list = callocCheck(p, sizeof(Action *));
    s->n = callocCheck(p, sizeof(int));
    s->cap = callocCheck(p, sizeof(int));
    s->slots = callocCheck(p, sizeof(int));
    s->steps = callocCheck((size_t)p * v, sizeof(int));
}

/* Chunk c of stage st is the model's virtual stage c*p + st; its neighbours are on the next and previous stage. */
static int virtual_stage(const Schedule *s, int st, int c) { return c * s->stages + st; }
static int last_virtual(const Schedule *s) { return s->stages * s->chunks - 1; }

typedef struct { int forward, mb, chunk, weight; } Work;   /* weight: W (split schedules; forward 0); else a backward is B there */

static void emit_compute(Schedule *s, int st, Work w) {
    /* reads/writes -1: no ZeRO bucket until schedule_add_zero names one (an evaluation's list never has one) */
    ActionKind back = w.weight ? ACT_BACKWARD_WEIGHT : s->split ? ACT_BACKWARD_INPUT : ACT_BACKWARD;
    if (w.forward) push(s, st, (Action){.kind = ACT_FORWARD, .mb = w.mb, .chunk = w.chunk, .reads = -1, .writes = -1});
    else push(s, st, (Action){.kind = back, .mb = w.mb, .chunk = w.chunk, .from = 0, .to = s->steps[st * s->chunks + w.chunk],
                              .reads = -1, .writes = -1});
}

/* The message a piece of work needs before it (receive) or makes after it (send), if any. */
static int needs_recv(const Schedule *s, int st, Work w, Action *a) {
    int vs = virtual_stage(s, st, w.chunk), p = s->stages;
    if (w.weight) return 0;   /* W needs nothing from another stage */
    if (w.forward && vs > 0) *a = (Action){.kind = ACT_RECV_ACT, .mb = w.mb, .chunk = w.chunk, .peer = (st + p - 1) % p};
    else if (!w.forward && vs < last_virtual(s)) *a = (Action){.kind = ACT_RECV_GRAD, .mb = w.mb, .chunk = w.chunk, .peer = (st + 1) % p};
    else return 0;
    return 1;
}
static int makes_send(const Schedule *s, int st, Work w, Action *a) {
    int vs = virtual_stage(s, st, w.chunk), p = s->stages;
    if (w.weight) return 0;   /* nor makes anything for one */
    if (w.forward && vs < last_virtual(s)) *a = (Action){.kind = ACT_SEND_ACT, .mb = w.mb, .chunk = w.chunk, .peer = (st + 1) % p};
    else if (!w.forward && vs > 0) *a = (Action){.kind = ACT_SEND_GRAD, .mb = w.mb, .chunk = w.chunk, .peer = (st + p - 1) % p};
    else return 0;
    return 1;
}

/* One stage's work in order, with its messages. Before each piece of work
 * comes one group: the sends of the work done since the last group and the
 * receives this work needs. joined (Megatron's interleaved schedule): a
 * forward and the backward right after it share one group, placed before the
 * forward, so in the steady state one group sends a forward's output and a
 * backward's gradient and receives the next of each — posted together, the
 * sends of one stage always find the receives of its neighbours. */
static int joins(const Work *w, int j, int joined) {   /* w[j]'s receive is posted in the group before w[j-1] */
    if (j == 0) return 0;
    if (joined) return w[j - 1].forward && !w[j].forward;
    return w[j - 1].weight && w[j].forward;
}

static void place(Schedule *s, int st, const Work *w, int n, int joined) {
    Action *sends = mallocCheck(((size_t)n + 1) * sizeof(Action)), a;
    int n_sends = 0;
    for (int i = 0; i < n; i++) {
        int shares = joins(w, i, joined);   /* its receive came with the previous work's */
        if (!shares) {
            for (int k = 0; k < n_sends; k++) push(s, st, sends[k]);
            n_sends = 0;
            for (int j = i; j < n && (j == i || joins(w, j, joined)); j++)
                if (needs_recv(s, st, w[j], &a)) push(s, st, a);
        }
        emit_compute(s, st, w[i]);
        if (makes_send(s, st, w[i], &a)) sends[n_sends++] = a;
    }
    for (int k = 0; k < n_sends; k++) push(s, st, sends[k]);
    free(sends);
}

/* ZB-H1's order on stage st (one chunk): 1F1B's warm-up of p - st - 1 forwards, then F, B, W of consecutive
 * micro-batches — each W right after its B, so the stage holds 1F1B's p - st micro-batches at most — then the
 * cool-down: the B's, each as soon as its gradient can be there, with the W's put off into the gaps. Stage st's
 * k-th cool-down B waits for stage st+1's, which itself came a B and (from the second on) a W later than its
 * previous one; so after its first cool-down B a stage runs one W before each further B, and the rest of its W's
 * at the end. Returns the number of pieces of work. */
static int zb1_order(int p, int m, int st, Work *w) {
    int warmup = p - st - 1 < m ? p - st - 1 : m, n = 0, next_w = 0;
    for (int k = 0; k < warmup; k++) w[n++] = (Work){1, k, 0, 0};
    for (int k = 0; k < m - warmup; k++) {
        w[n++] = (Work){1, warmup + k, 0, 0};
        w[n++] = (Work){0, k, 0, 0};
        w[n++] = (Work){0, next_w++, 0, 1};
    }
    for (int k = m - warmup; k < m; k++) {
        if (k > m - warmup && next_w < k) w[n++] = (Work){0, next_w++, 0, 1};
        w[n++] = (Work){0, k, 0, 0};
    }
    while (next_w < m) w[n++] = (Work){0, next_w++, 0, 1};
    return n;
}

/* Interleaved order (Megatron): micro-step k runs chunk (k/p) % v of micro-batch (k/(p*v))*p + k%p,
 * forwards in chunk order, backwards in reverse chunk order. */
static int step_mb(const Schedule *s, int k) { int p = s->stages; return k / (p * s->chunks) * p + k % p; }
static int step_chunk(const Schedule *s, int k, int forward) {
    int c = k / s->stages % s->chunks;
    return forward ? c : s->chunks - 1 - c;
}

void schedule_build(Schedule *s, int kind, int p, int m, int v, const int *steps) {
    if (kind != PP_INTERLEAVED) v = 1;
    init(s, kind, p, m, v);
    s->split = schedule_splits_backward(kind);
    memcpy(s->steps, steps, (size_t)p * v * sizeof(int));
    if (m < p && p > 1)
        die("a pipeline of pp=%d stages needs at least %d micro-batches per step, and this step has %d\n"
            "  hint: raise total_batch_tokens (micro-batches = total_batch_tokens / (batch_size*seq_len*dp)) or lower batch_size", p, p, m);
    if (kind == PP_INTERLEAVED && m % p)
        die("pp_schedule=interleaved runs micro-batches in groups of pp=%d, and %d micro-batches do not divide into them\n"
            "  hint: make the micro-batches per step a multiple of %d (total_batch_tokens / (batch_size*seq_len*dp))", p, m, p);
    int total = m * v;
    Work *w = mallocCheck(3 * (size_t)total * sizeof(Work));
    for (int st = 0; st < p; st++) {
        int n = 0;
        if (kind == PP_GPIPE) {   /* every forward, then every backward */
            for (int i = 0; i < m; i++) w[n++] = (Work){1, i, 0, 0};
            for (int i = 0; i < m; i++) w[n++] = (Work){0, i, 0, 0};
        } else if (kind == PP_ZB1) {
            n = zb1_order(p, m, st, w);
        } else {
            /* 1F1B: a warm-up of forwards fills the pipeline, then one forward and one backward
             * alternate, then a cool-down of backwards drains it; interleaved does the same over
             * the m*v micro-steps of its chunks, with Megatron's longer warm-up */
            int warmup = kind == PP_INTERLEAVED ? (p - st - 1) * 2 + (v - 1) * p : p - st - 1;
            if (warmup > total) warmup = total;
            for (int k = 0; k < warmup; k++) w[n++] = (Work){1, step_mb(s, k), step_chunk(s, k, 1), 0};
            for (int k = 0; k < total - warmup; k++) {
                w[n++] = (Work){1, step_mb(s, warmup + k), step_chunk(s, warmup + k, 1), 0};
                w[n++] = (Work){0, step_mb(s, k), step_chunk(s, k, 0), 0};
            }
            for (int k = total - warmup; k < total; k++) w[n++] = (Work){0, step_mb(s, k), step_chunk(s, k, 0), 0};
        }
        place(s, st, w, n, kind == PP_INTERLEAVED);
    }
    free(w);
}

void schedule_build_forward(Schedule *s, int p, int m, int v) {
    init(s, v > 1 ? PP_INTERLEAVED : PP_1F1B, p, m, v);
    s->forward_only = 1;
    Work *w = mallocCheck((size_t)m * v * sizeof(Work));
    for (int st = 0; st < p; st++) {
        int n = 0;
        for (int i = 0; i < m; i++)
            for (int c = 0; c < v; c++) w[n++] = (Work){1, i, c, 0};
        place(s, st, w, n, 0);
    }
    free(w);
}

/* The last action of the stage that completes (chunk, step): the chunk's last
 * forward for step -1, else its last backward whose steps hold step. */
static int find_ready(const Schedule *s, int st, BucketReady r) {
    for (int i = s->n[st] - 1; i >= 0; i--) {
        const Action *a = &s->list[st][i];
        if (a->chunk != r.chunk) continue;
        if (r.step < 0 && a->kind == ACT_FORWARD) return i;
        if (r.step >= 0 && a->kind == (s->split ? ACT_BACKWARD_WEIGHT : ACT_BACKWARD) && a->from <= r.step && r.step < a->to) return i;
    }
    die("internal: no action completes chunk %d's backward step %d on stage %d", r.chunk, r.step, st);
}

void schedule_add_data_parallel(Schedule *s, int st, const BucketReady *ready, int n_buckets, int zero) {
    for (int k = 0; k < n_buckets; k++) {
        int i = find_ready(s, st, ready[k]);
        Action *a = &s->list[st][i];
        if ((a->kind == ACT_BACKWARD || a->kind == ACT_BACKWARD_WEIGHT) && ready[k].step + 1 < a->to) {   /* split: the rest of the backward runs after the reduction starts */
            Action rest = *a;
            rest.from = ready[k].step + 1;
            a->to = ready[k].step + 1;
            push_at(s, st, i + 1, rest);
        }
        int at = i + 1;
        while (at < s->n[st] && s->list[st][at].kind == ACT_REDUCE) at++;   /* after the reductions started at this point */
        push_at(s, st, at, (Action){.kind = ACT_REDUCE, .bucket = k, .mb = -1, .chunk = -1});
    }
    for (int k = 0; k < n_buckets; k++) push(s, st, (Action){.kind = ACT_REDUCE_WAIT, .bucket = k, .mb = -1, .chunk = -1});
    push(s, st, (Action){.kind = ACT_OPTIMIZER, .mb = -1, .chunk = -1});
    if (!zero) return;
    for (int k = 0; k < n_buckets; k++) push(s, st, (Action){.kind = ACT_GATHER, .bucket = k, .mb = -1, .chunk = -1});
    for (int k = 0; k < n_buckets; k++) push(s, st, (Action){.kind = ACT_GATHER_WAIT, .bucket = k, .mb = -1, .chunk = -1});
}

static int uses_slot(const Action *a) { return a->kind <= ACT_RECV_GRAD; }
static int uses_keep(const Action *a) { return a->kind == ACT_BACKWARD_INPUT || a->kind == ACT_BACKWARD_WEIGHT; }

/* Numbers the (micro-batch, chunk) pairs' intervals on stage st — from the first action `uses` takes to the last —
 * with the lowest index free at each start: writes each action's index into *field, returns the most held at once. */
static int assign(Schedule *s, int st, int (*uses)(const Action *), size_t field, int *first, int *last, int *index_of, int *taken) {
    int pairs = s->micro_batches * s->chunks, held = 0, most = 0;
    for (int q = 0; q < pairs; q++) { first[q] = last[q] = index_of[q] = -1; }
    for (int i = 0; i < s->n[st]; i++) {
        const Action *a = &s->list[st][i];
        if (!uses(a)) continue;
        int q = a->mb * s->chunks + a->chunk;
        if (first[q] < 0) first[q] = i;
        last[q] = i;
    }
    memset(taken, 0, ((size_t)pairs + 1) * sizeof(int));
    for (int i = 0; i < s->n[st]; i++) {
        Action *a = &s->list[st][i];
        if (!uses(a)) continue;
        int q = a->mb * s->chunks + a->chunk, *at = (int *)((char *)a + field);
        if (first[q] == i) {
            int k = 0;
            while (taken[k]) k++;
            taken[k] = 1;
            index_of[q] = k;
            if (++held > most) most = held;
        }
        *at = index_of[q];
        if (last[q] == i) { taken[index_of[q]] = 0; held--; }
        if (field == offsetof(Action, slot)) a->frees_slot = last[q] == i;
    }
    return most;
}

void schedule_assign_slots(Schedule *s) {
    int pairs = s->micro_batches * s->chunks;
    int *first = mallocCheck((size_t)pairs * sizeof(int)), *last = mallocCheck((size_t)pairs * sizeof(int));
    int *index_of = mallocCheck((size_t)pairs * sizeof(int)), *taken = callocCheck((size_t)pairs + 1, sizeof(int));
    if (!s->keeps) s->keeps = callocCheck(s->stages, sizeof(int));
    for (int st = 0; st < s->stages; st++) {
        int most = assign(s, st, uses_slot, offsetof(Action, slot), first, last, index_of, taken);
        s->slots[st] = most > 0 ? most : 1;
        s->keeps[st] = assign(s, st, uses_keep, offsetof(Action, keep), first, last, index_of, taken);
    }
    free(first); free(last); free(index_of); free(taken);
}

void schedule_free(Schedule *s) {
    for (int st = 0; st < s->stages; st++) free(s->list[st]);
    for (int st = 0; s->place && st < s->stages; st++) { free(s->place[st]); free(s->elements[st]); }
    free(s->place); free(s->elements); free(s->n_buckets); free(s->fsteps);
    free(s->list); free(s->n); free(s->cap); free(s->slots); free(s->keeps); free(s->steps);
    memset(s, 0, sizeof *s);
}

double schedule_bubble_formula(const Schedule *s) {
    double p = s->stages, m = s->micro_batches, v = s->chunks;
    if (s->split) return (p - 1) / (3 * m + p - 1);
    return (p - 1) / (v * m + p - 1);
}
