/* parallel/schedule.c — the builders of a step's action lists: 1F1B, GPipe,
 * interleaved 1F1B (Megatron's), ZB-H1 and ZB-V (zero bubble, the backward
 * split into B and W; their orders in parallel/schedule_zb.c), forwards
 * only; the data-parallel pass; the activation slots and the waits
 * (parallel/schedule.h).
 *
 * Every builder says only in which order a stage runs the forward and the
 * backward of its (micro-batch, chunk) pairs; emit_forward and emit_backward
 * put the receive just before the work that needs it and the send just after
 * the work that produced it, so the pairs Megatron posts together (send the
 * forward and receive a backward, send the backward and receive a forward)
 * come out as one group by themselves. */
#include "schedule.h"
#include "schedule_order.h"
#include "../common/util.h"
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *const action_names[ACT_KINDS] = {"forward", "backward", "backward-input", "backward-weight", "send-act", "recv-act", "send-grad", "recv-grad",
                                              "reduce", "reduce-wait", "optimizer", "gather", "gather-wait", "free", "wait"};

static void push_at(Schedule *s, int stage, int at, Action a) {
    if (s->n[stage] == s->cap[stage]) {
        s->cap[stage] = s->cap[stage] ? 2 * s->cap[stage] : 64;
        s->list[stage] = realloc(s->list[stage], (size_t)s->cap[stage] * sizeof(Action));
        if (!s->list[stage]) die("out of host memory for a schedule");
    }
    Action *l = s->list[stage];
    memmove(l + at + 1, l + at, (size_t)(s->n[stage] - at) * sizeof(Action));
    a.slot = a.keep = a.dest_slot = -1;
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

/* Chunk c of stage st is the model's virtual stage schedule_virtual_stage(); its neighbours' stages follow from theirs. */
static int virtual_stage(const Schedule *s, int st, int c) { return schedule_virtual_stage(s->kind, s->stages, st, c); }
static int last_virtual(const Schedule *s) { return s->stages * s->chunks - 1; }
static int stage_of(const Schedule *s, int vs) { return schedule_stage_of(s->kind, s->stages, vs); }

static void emit_compute(Schedule *s, int st, Work w) {
    /* reads/writes -1: no ZeRO bucket until schedule_add_zero names one (an evaluation's list never has one) */
    ActionKind back = w.weight ? ACT_BACKWARD_WEIGHT : s->split ? ACT_BACKWARD_INPUT : ACT_BACKWARD;
    if (w.forward) push(s, st, (Action){.kind = ACT_FORWARD, .mb = w.mb, .chunk = w.chunk, .reads = -1, .writes = -1});
    else push(s, st, (Action){.kind = back, .mb = w.mb, .chunk = w.chunk, .from = 0, .to = s->steps[st * s->chunks + w.chunk],
                              .reads = -1, .writes = -1});
}

/* The message a piece of work needs before it (receive) or makes after it (send), if any. */
static int needs_recv(const Schedule *s, int st, Work w, Action *a) {
    int vs = virtual_stage(s, st, w.chunk);
    if (w.weight) return 0;   /* W needs nothing from another stage */
    if (w.forward && vs > 0) *a = (Action){.kind = ACT_RECV_ACT, .mb = w.mb, .chunk = w.chunk, .peer = stage_of(s, vs - 1)};
    else if (!w.forward && vs < last_virtual(s)) *a = (Action){.kind = ACT_RECV_GRAD, .mb = w.mb, .chunk = w.chunk, .peer = stage_of(s, vs + 1)};
    else return 0;
    return 1;
}
static int makes_send(const Schedule *s, int st, Work w, Action *a) {
    int vs = virtual_stage(s, st, w.chunk);
    if (w.weight) return 0;   /* nor makes anything for one */
    if (w.forward && vs < last_virtual(s)) *a = (Action){.kind = ACT_SEND_ACT, .mb = w.mb, .chunk = w.chunk, .peer = stage_of(s, vs + 1)};
    else if (!w.forward && vs > 0) *a = (Action){.kind = ACT_SEND_GRAD, .mb = w.mb, .chunk = w.chunk, .peer = stage_of(s, vs - 1)};
    else return 0;
    return 1;
}

/* One stage's work in order, with its messages. Before each piece of work
 * comes one group: the sends of the work done since the last group and the
 * receives this work needs. joined (Megatron's interleaved schedule): a
 * forward and the backward right after it share one group, placed before the
 * forward, so in the steady state one group sends a forward's output and a
 * backward's gradient and receives the next of each — posted together, the
 * sends of one stage always find the receives of its neighbours. Elsewhere
 * (zbv) a forward's receive is posted before the W just before it, to arrive
 * while W runs; zb1 posts it after the W (JOIN_NONE), once W has freed the
 * slot the receive writes into, so a stage holds no more than its p slots. */
enum { JOIN_W_F, JOIN_F_B, JOIN_NONE };
static int joins(const Work *w, int j, int joined) {   /* w[j]'s receive is posted in the group before w[j-1] */
    if (j == 0 || joined == JOIN_NONE) return 0;
    if (joined == JOIN_F_B) return w[j - 1].forward && !w[j].forward;
    return w[j - 1].weight && w[j].forward;
}

/* A message's name, the same on both sides: gradient or not, micro-batch, and the virtual stage it is the input (or
 * output gradient) of. */
static long message_key(const Schedule *s, int st, const Action *a) {
    int vs = virtual_stage(s, st, a->chunk), grad = a->kind == ACT_SEND_GRAD || a->kind == ACT_RECV_GRAD;
    int target = a->kind == ACT_SEND_ACT ? vs + 1 : a->kind == ACT_SEND_GRAD ? vs - 1 : vs;
    return ((long)grad * s->micro_batches + a->mb) * (s->stages * s->chunks + 1) + target;
}

typedef struct { Action a; int pos, rank; } Recv;   /* a receive, the work before whose group it is posted, its place among the peer's sends */

/* Each stage's receives and the group each is posted in: just before the work that needs it (joined: with the
 * previous work's), or earlier where the stage it comes from sends in another order — two stages match their messages
 * first come, first served (MPI on a pair of ranks, NCCL too), so a stage posts its receives from a peer in the order
 * the peer sends them: each no later than the next one's. Receives from the stage itself are copies matched by name. */
static Recv *plan_receives(const Schedule *s, int st, Work *const *w, const int *n, int joined, int *n_recv) {
    Recv *r = mallocCheck(((size_t)n[st] + 1) * sizeof(Recv));
    Action a;
    int k = 0;
    for (int i = 0; i < n[st]; i++) {
        if (!needs_recv(s, st, w[st][i], &a)) continue;
        int pos = i;
        while (pos > 0 && joins(w[st], pos, joined)) pos--;
        r[k] = (Recv){a, pos, k};   /* from this stage itself (or alone): in its own order */
        k++;
    }
    for (int q = 0; q < s->stages; q++) {   /* the peer's order of sends to this stage */
        if (q == st) continue;
        int rank = 0, *order = mallocCheck(((size_t)k + 1) * sizeof(int)), m = 0;
        for (int i = 0; i < n[q]; i++) {
            if (!makes_send(s, q, w[q][i], &a) || a.peer != st) continue;
            long key = message_key(s, q, &a);
            for (int x = 0; x < k; x++)
                if (r[x].a.peer == q && message_key(s, st, &r[x].a) == key) { r[x].rank = rank; order[m++] = x; }
            rank++;
        }
        for (int y = m - 2; y >= 0; y--)   /* each no later than the next in the peer's order */
            if (r[order[y]].pos > r[order[y + 1]].pos) r[order[y]].pos = r[order[y + 1]].pos;
        free(order);
    }
    *n_recv = k;
    return r;
}

static void place(Schedule *s, int st, const Work *w, int n, Recv *r, int n_recv, int joined) {
    Action *sends = mallocCheck(((size_t)n + 1) * sizeof(Action)), a;
    int n_sends = 0;
    for (int i = 0; i < n; i++) {
        if (!joins(w, i, joined)) {   /* a group: the sends since the last one, the receives posted here */
            for (int k = 0; k < n_sends; k++) push(s, st, sends[k]);
            n_sends = 0;
            for (int q = 0; q < s->stages; q++)   /* by peer, each in its sender's order */
                for (;;) {
                    int best = -1;
                    for (int x = 0; x < n_recv; x++)
                        if (r[x].pos == i && r[x].a.peer == q && r[x].rank >= 0 && (best < 0 || r[x].rank < r[best].rank)) best = x;
                    if (best < 0) break;
                    push(s, st, r[best].a);
                    r[best].rank = -1;
                }
        }
        emit_compute(s, st, w[i]);
        if (makes_send(s, st, w[i], &a)) sends[n_sends++] = a;
    }
    for (int k = 0; k < n_sends; k++) push(s, st, sends[k]);
    free(sends);
}

/* Every stage's work, with its sends and receives. */
static void place_all(Schedule *s, Work *const *w, const int *n, int joined) {
    for (int st = 0; st < s->stages; st++) {
        int n_recv;
        Recv *r = plan_receives(s, st, w, n, joined, &n_recv);
        place(s, st, w[st], n[st], r, n_recv, joined);
        free(r);
    }
}

/* Interleaved order (Megatron): micro-step k runs chunk (k/p) % v of micro-batch (k/(p*v))*p + k%p,
 * forwards in chunk order, backwards in reverse chunk order. */
static int step_mb(const Schedule *s, int k) { int p = s->stages; return k / (p * s->chunks) * p + k % p; }
static int step_chunk(const Schedule *s, int k, int forward) {
    int c = k / s->stages % s->chunks;
    return forward ? c : s->chunks - 1 - c;
}

void schedule_build(Schedule *s, int kind, int p, int m, int v, const int *steps, int zb1_memory) {
    if (kind != PP_INTERLEAVED) v = schedule_chunks(kind, v);
    init(s, kind, p, m, v);
    s->split = schedule_splits_backward(kind);
    s->zb1_memory = kind == PP_ZB1 ? zb1_memory : 0;
    memcpy(s->steps, steps, (size_t)p * v * sizeof(int));
    if (m < p && p > 1)
        die("a pipeline of pp=%d stages needs at least %d micro-batches per step, and this step has %d\n"
            "  hint: raise total_batch_tokens (micro-batches = total_batch_tokens / (batch_size*seq_len*dp)) or lower batch_size", p, p, m);
    if (kind == PP_INTERLEAVED && m % p)
        die("pp_schedule=interleaved runs micro-batches in groups of pp=%d, and %d micro-batches do not divide into them\n"
            "  hint: make the micro-batches per step a multiple of %d (total_batch_tokens / (batch_size*seq_len*dp))", p, m, p);
    int total = m * v, *n = callocCheck(p, sizeof(int));
    Work **w = callocCheck(p, sizeof(Work *));
    for (int st = 0; st < p; st++) w[st] = mallocCheck(3 * (size_t)total * sizeof(Work));
    if (kind == PP_ZB1 || kind == PP_ZBV) {   /* every stage's order from one run on paper */
        Work *zw = mallocCheck((size_t)p * 3 * total * sizeof(Work));
        s->zb_cap = zb_orders(kind, p, m, s->zb1_memory, zw, n);
        for (int st = 0; st < p; st++) memcpy(w[st], zw + (size_t)st * 3 * total, (size_t)n[st] * sizeof(Work));
        free(zw);
    }
    for (int st = 0; st < p && kind != PP_ZB1 && kind != PP_ZBV; st++) {
        Work *o = w[st];
        int k = 0;
        if (kind == PP_GPIPE) {   /* every forward, then every backward */
            for (int i = 0; i < m; i++) o[k++] = (Work){1, i, 0, 0};
            for (int i = 0; i < m; i++) o[k++] = (Work){0, i, 0, 0};
        } else {
            /* 1F1B: a warm-up of forwards fills the pipeline, then one forward and one backward
             * alternate, then a cool-down of backwards drains it; interleaved does the same over
             * the m*v micro-steps of its chunks, with Megatron's longer warm-up */
            int warmup = kind == PP_INTERLEAVED ? (p - st - 1) * 2 + (v - 1) * p : p - st - 1;
            if (warmup > total) warmup = total;
            for (int j = 0; j < warmup; j++) o[k++] = (Work){1, step_mb(s, j), step_chunk(s, j, 1), 0};
            for (int j = 0; j < total - warmup; j++) {
                o[k++] = (Work){1, step_mb(s, warmup + j), step_chunk(s, warmup + j, 1), 0};
                o[k++] = (Work){0, step_mb(s, j), step_chunk(s, j, 0), 0};
            }
            for (int j = total - warmup; j < total; j++) o[k++] = (Work){0, step_mb(s, j), step_chunk(s, j, 0), 0};
        }
        n[st] = k;
    }
    place_all(s, w, n, kind == PP_INTERLEAVED ? JOIN_F_B : kind == PP_ZB1 ? JOIN_NONE : JOIN_W_F);
    for (int st = 0; st < p; st++) free(w[st]);
    free(w); free(n);
}

void schedule_build_forward(Schedule *s, int kind, int p, int m, int v) {
    v = kind == PP_INTERLEAVED ? v : schedule_chunks(kind, v);
    init(s, kind == PP_ZBV ? PP_ZBV : v > 1 ? PP_INTERLEAVED : PP_1F1B, p, m, v);
    s->forward_only = 1;
    int *n = callocCheck(p, sizeof(int));
    Work **w = callocCheck(p, sizeof(Work *));
    for (int st = 0; st < p; st++) {
        w[st] = mallocCheck(((size_t)m * v + 1) * sizeof(Work));
        for (int i = 0; i < m; i++)
            for (int c = 0; c < v; c++) w[st][n[st]++] = (Work){1, i, c, 0};
    }
    place_all(s, w, n, 0);
    for (int st = 0; st < p; st++) free(w[st]);
    free(w); free(n);
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
static int is_message(ActionKind k) { return k >= ACT_SEND_ACT && k <= ACT_RECV_GRAD; }
static int is_send_kind(ActionKind k) { return k == ACT_SEND_ACT || k == ACT_SEND_GRAD; }

/* A receive from this stage itself takes its data at the send of the same message (by name: message_key), which
 * comes first: (self_recv[i]) the receive a send at i feeds, -1 elsewhere. */
static void match_self(const Schedule *s, int st, int *self_recv) {
    int n = s->n[st];
    for (int i = 0; i < n; i++) self_recv[i] = -1;
    for (int i = 0; i < n; i++) {
        const Action *a = &s->list[st][i];
        if (!is_message(a->kind) || !is_send_kind(a->kind) || a->peer != st) continue;
        long key = message_key(s, st, a);
        for (int j = i + 1; j < n && self_recv[i] < 0; j++) {
            const Action *b = &s->list[st][j];
            if (is_message(b->kind) && !is_send_kind(b->kind) && b->peer == st && message_key(s, st, b) == key) self_recv[i] = j;
        }
        if (self_recv[i] < 0) die("internal: stage %d sends to itself with no later receive to meet it", st);
    }
}

/* Numbers the (micro-batch, chunk) pairs' intervals on stage st — from the first action `uses` takes to the last —
 * with the lowest index free at each start: writes each action's index into *field, returns the most held at once.
 * self_recv (slots only): a pair that receives from this stage itself takes its slot at the send, which writes into it. */
static int assign(Schedule *s, int st, int (*uses)(const Action *), size_t field, int *first, int *last, int *index_of, int *taken,
                  const int *self_recv) {
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
        int r = self_recv ? self_recv[i] : -1, qr = r >= 0 ? s->list[st][r].mb * s->chunks + s->list[st][r].chunk : -1;
        for (int k = 0; k < 2; k++) {   /* the receiving pair (when it starts here), then this action's own */
            int pq = k == 0 ? qr : q;
            if (pq < 0 || (k == 1 && index_of[pq] >= 0) || (k == 0 && index_of[pq] >= 0)) continue;
            if (k == 1 && first[pq] != i) continue;
            int x = 0;
            while (taken[x]) x++;
            taken[x] = 1;
            index_of[pq] = x;
            if (++held > most) most = held;
        }
        *at = index_of[q];
        if (qr >= 0) a->dest_slot = index_of[qr];
        if (last[q] == i) { taken[index_of[q]] = 0; held--; }
        if (field == offsetof(Action, slot)) a->frees_slot = last[q] == i;
    }
    return most;
}

/* Does b, an action of another (micro-batch, chunk), write the buffer a send in slot `slot` reads? Its compute writes
 * the whole slot (conservatively: a forward writes the residual stream, the head's and any backward the gradient); a
 * receive of a gradient writes the gradient; a copy into the slot writes either. A receive of an activation writes
 * only the chunk's input, which no send reads (a chunk has a layer at least: its output is another buffer). */
static int overwrites(const Action *b, int slot) {
    if (b->dest_slot >= 0 && b->dest_slot == slot) return 1;
    return b->slot == slot && (action_is_compute(b->kind) || b->kind == ACT_RECV_GRAD);
}

/* The waits of stage st's messages (parallel/schedule.h), each where its data is first needed: a receive before the
 * first compute of its pair (the forward for an activation, the backward for a gradient); a send before its pair's
 * backward (an activation: a recompute may write the chunk's output again) or before another pair writes its buffer
 * (overwrites), whichever comes first, else at the end; never inside a group (before it). A message from or to the
 * stage itself is a copy: no wait. */
static void add_waits(Schedule *s, int st) {
    int n = s->n[st], n_out = 0, n_w = 0;
    const Action *l = s->list[st];
    Action *w = mallocCheck(((size_t)n + 1) * sizeof(Action));
    int *at = mallocCheck(((size_t)n + 1) * sizeof(int));
    for (int i = 0; i < n; i++) {
        const Action *a = &l[i];
        if (!is_message(a->kind) || a->peer == st) continue;
        int j = i + 1, send = is_send_kind(a->kind);
        for (; j < n; j++) {
            const Action *b = &l[j];
            int same = b->mb == a->mb && b->chunk == a->chunk && uses_slot(b);
            if (!send && same && action_is_compute(b->kind)) break;
            if (send && same && (b->kind == ACT_BACKWARD || b->kind == ACT_BACKWARD_INPUT) && a->kind == ACT_SEND_ACT) break;
            if (send && !same && b->mb >= 0 && overwrites(b, a->slot)) break;
        }
        while (j < n && j > 0 && is_message(l[j].kind) && is_message(l[j - 1].kind)) j--;   /* before the group, not inside it */
        at[n_w] = j;
        w[n_w++] = (Action){.kind = ACT_WAIT, .mb = a->mb, .chunk = a->chunk, .msg = a->kind, .peer = a->peer, .slot = -1, .keep = -1,
                            .dest_slot = -1, .bucket = -1, .reads = -1, .writes = -1};
    }
    Action *out = mallocCheck(((size_t)n + n_w + 8) * sizeof(Action));   /* spare room: push_at grows it anyway */
    for (int i = 0; i <= n; i++) {   /* the waits at i (in the order of their messages) go before action i */
        for (int q = 0; q < n_w; q++)
            if (at[q] == i) out[n_out++] = w[q];
        if (i < n) out[n_out++] = l[i];
    }
    free(s->list[st]);
    s->list[st] = out;
    s->n[st] = n_out;
    s->cap[st] = n + n_w + 8;
    free(w); free(at);
}

void schedule_assign_slots(Schedule *s) {
    int pairs = s->micro_batches * s->chunks, most_n = 1;
    for (int st = 0; st < s->stages; st++) if (s->n[st] > most_n) most_n = s->n[st];
    int *first = mallocCheck((size_t)pairs * sizeof(int)), *last = mallocCheck((size_t)pairs * sizeof(int));
    int *index_of = mallocCheck((size_t)pairs * sizeof(int)), *taken = callocCheck((size_t)pairs + 1, sizeof(int));
    int *self_recv = mallocCheck((size_t)most_n * sizeof(int));
    if (!s->keeps) s->keeps = callocCheck(s->stages, sizeof(int));
    for (int st = 0; st < s->stages; st++) {
        if (s->waits) die("internal: the schedule's slots and waits were placed already");
        match_self(s, st, self_recv);
        int most = assign(s, st, uses_slot, offsetof(Action, slot), first, last, index_of, taken, self_recv);
        s->slots[st] = most > 0 ? most : 1;
        s->keeps[st] = assign(s, st, uses_keep, offsetof(Action, keep), first, last, index_of, taken, NULL);
        add_waits(s, st);
    }
    s->waits = 1;
    free(first); free(last); free(index_of); free(taken); free(self_recv);
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
    if (s->kind == PP_ZBV) return (p - 1) / (6 * m + p - 1);   /* ZB-V: F = B = W a chunk, 6m of them a stage, only the fill idle */
    if (s->split && s->zb1_memory == ZB1_MEMORY_1F1B) return 2 * (p - 1) / (3 * m + 2 * (p - 1));   /* ZB-H1 at 1F1B's own memory */
    if (s->split) return (p - 1) / (3 * m + p - 1);
    return (p - 1) / (v * m + p - 1);
}
