/* parallel/schedule_check.c — proves a schedule sound by running it on paper
 * (parallel/schedule.h): pairing, dependencies, waits, and a timed simulation
 * that either finishes every stage or names the stages that wait on each other.
 *
 * Messages between two stages are matched in order, whatever they carry (MPI
 * and NCCL both match a pair's messages first come, first served), so the k-th
 * send from stage a to stage b must be what the k-th receive on b from a
 * expects. Posting a group of sends and receives never blocks; an ACT_WAIT
 * blocks until its message is done. The simulation runs twice: as MPI runs it
 * (a message is done once both sides have posted it) for the timeline and the
 * bubble, and as NCCL runs it (a stage's messages in the four lanes of
 * comm_p2p_lane, each lane's part of the groups one after another in posting
 * order, each done once every partner's part has started), which can only be
 * later, so a list that finishes there finishes on both. */
#include "schedule.h"
#include "ddp.h"
#include "../comm/comm.h"
#include "../common/util.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int is_comm(ActionKind k) { return k >= ACT_SEND_ACT && k <= ACT_RECV_GRAD; }
static int msg_index(ActionKind k) { return k - ACT_SEND_ACT; }
static int is_send(ActionKind k) { return k == ACT_SEND_ACT || k == ACT_SEND_GRAD; }

static int fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

static void describe(const Schedule *s, int st, const Action *a, char *out, size_t size) {
    if (a->kind == ACT_FORWARD && a->to > 0)
        snprintf(out, size, "%s of micro-batch %d, chunk %d, step %d", action_names[a->kind], a->mb, a->chunk, a->from);
    else if (a->kind >= ACT_BACKWARD && a->kind <= ACT_BACKWARD_WEIGHT) snprintf(out, size, "%s of micro-batch %d, chunk %d, steps %d..%d", action_names[a->kind], a->mb, a->chunk, a->from, a->to);
    else if (a->kind == ACT_WAIT && a->msg >= ACT_SEND_ACT && a->msg <= ACT_RECV_GRAD)
        snprintf(out, size, "wait for the %s of micro-batch %d, chunk %d", action_names[a->msg], a->mb, a->chunk);
    else if (a->mb >= 0) snprintf(out, size, "%s of micro-batch %d, chunk %d (virtual stage %d)", action_names[a->kind], a->mb, a->chunk,
                                  schedule_virtual_stage(s->kind, s->stages, st, a->chunk));
    else snprintf(out, size, "%s of bucket %d", action_names[a->kind], a->bucket);
}

/* The message a send or receive carries: (is_grad, micro-batch, virtual stage it is the input/output gradient of). */
static void message(const Schedule *s, int st, const Action *a, int *grad, int *mb, int *target) {
    int vs = schedule_virtual_stage(s->kind, s->stages, st, a->chunk);
    *grad = a->kind == ACT_SEND_GRAD || a->kind == ACT_RECV_GRAD;
    *mb = a->mb;
    if (a->kind == ACT_SEND_ACT) *target = vs + 1;         /* the input of the next virtual stage */
    else if (a->kind == ACT_SEND_GRAD) *target = vs - 1;   /* the output gradient of the previous one */
    else *target = vs;
}

/* Each stage's actions in order: what each needs is done before it. */
static int check_order(const Schedule *s, int st, char *err, size_t size) {
    int p = s->stages, v = s->chunks, m = s->micro_batches, last_vs = p * v - 1;
    int pairs = m * v;
    int *fwd = callocCheck(pairs, sizeof(int)), *got_act = callocCheck(pairs, sizeof(int)), *got_grad = callocCheck(pairs, sizeof(int));
    int *next = callocCheck(pairs, sizeof(int)), *fnext = callocCheck(pairs, sizeof(int)), rc = 0, optimizer = 0;
    int *wnext = callocCheck(pairs, sizeof(int));   /* split: the W steps done */
    int *posted = callocCheck(4 * (size_t)pairs, sizeof(int)), *waited = callocCheck(4 * (size_t)pairs, sizeof(int));   /* per message kind */
    char what[160];
    for (int i = 0; i < s->n[st] && rc == 0; i++) {
        const Action *a = &s->list[st][i];
        describe(s, st, a, what, sizeof what);
        if (a->kind > ACT_RECV_GRAD && a->kind != ACT_WAIT) {
            if (a->kind == ACT_OPTIMIZER) optimizer++;
            continue;
        }
        if (a->mb < 0 || a->mb >= m || a->chunk < 0 || a->chunk >= v) { rc = fail(err, size, "stage %d: %s is outside the step", st, what); break; }
        int q = a->mb * v + a->chunk, vs = schedule_virtual_stage(s->kind, p, st, a->chunk), steps = s->steps[st * v + a->chunk];
        if (is_comm(a->kind)) {
            if (posted[msg_index(a->kind) * pairs + q]++) { rc = fail(err, size, "stage %d: %s is posted twice", st, what); break; }
            if (a->peer == st) posted[msg_index(a->kind) * pairs + q] = waited[msg_index(a->kind) * pairs + q] = 1;   /* a copy: no wait */
        }
        switch (a->kind) {
        case ACT_RECV_ACT: if (a->peer == st) got_act[q]++; break;
        case ACT_RECV_GRAD: if (a->peer == st) got_grad[q]++; break;
        case ACT_WAIT:
            if (a->msg < ACT_SEND_ACT || a->msg > ACT_RECV_GRAD) rc = fail(err, size, "stage %d: a wait for no message (%d)", st, a->msg);
            else if (!posted[msg_index(a->msg) * pairs + q]) rc = fail(err, size, "stage %d: %s comes before its message is posted", st, what);
            else if (waited[msg_index(a->msg) * pairs + q]++) rc = fail(err, size, "stage %d: %s waits a second time", st, what);
            else if (a->msg == ACT_RECV_ACT) got_act[q]++;
            else if (a->msg == ACT_RECV_GRAD) got_grad[q]++;
            break;
        case ACT_FORWARD:
            if (vs > 0 && !got_act[q]) rc = fail(err, size, "stage %d: %s runs before its input was received (and waited for)", st, what);
            else if (fwd[q]) rc = fail(err, size, "stage %d: %s runs twice", st, what);
            else if (a->to == 0) fwd[q] = 1;
            else if (!s->fsteps || a->from != fnext[q] || a->to <= a->from)   /* zero=3: a forward in steps */
                rc = fail(err, size, "stage %d: %s does not continue the forward at step %d", st, what, fnext[q]);
            else if ((fnext[q] = a->to) >= s->fsteps[st * v + a->chunk]) fwd[q] = 1;
            break;
        case ACT_SEND_ACT:
            if (!fwd[q]) rc = fail(err, size, "stage %d: %s sends an output its forward has not made yet", st, what);
            break;
        case ACT_BACKWARD: case ACT_BACKWARD_INPUT:
            if ((a->kind == ACT_BACKWARD) == s->split)
                rc = fail(err, size, "stage %d: %s in a schedule that %s the backward", st, what, s->split ? "splits" : "does not split");
            else if (!fwd[q]) rc = fail(err, size, "stage %d: %s runs before its forward", st, what);
            else if (vs < last_vs && !got_grad[q])
                rc = fail(err, size, "stage %d: %s runs before its output's gradient was received (and waited for)", st, what);
            else if (a->from != next[q] || a->to > steps || a->to <= a->from)
                rc = fail(err, size, "stage %d: %s does not continue the backward at step %d of %d", st, what, next[q], steps);
            else next[q] = a->to;
            break;
        case ACT_BACKWARD_WEIGHT:
            if (!s->split) rc = fail(err, size, "stage %d: %s in a schedule that does not split the backward", st, what);
            else if (a->from != wnext[q] || a->to <= a->from || a->to > next[q])
                rc = fail(err, size, "stage %d: %s does not continue the weight gradients at step %d, after B's %d steps", st, what,
                          wnext[q], next[q]);
            else wnext[q] = a->to;
            break;
        case ACT_SEND_GRAD:
            if (next[q] != steps) rc = fail(err, size, "stage %d: %s sends a gradient its backward has not finished", st, what);
            break;
        default: break;
        }
    }
    for (int q = 0; q < pairs && rc == 0; q++) {
        if (!fwd[q]) rc = fail(err, size, "stage %d never runs the forward of micro-batch %d, chunk %d", st, q / v, q % v);
        else if (!s->forward_only && next[q] != s->steps[st * v + q % v])
            rc = fail(err, size, "stage %d never finishes the backward of micro-batch %d, chunk %d", st, q / v, q % v);
        else if (!s->forward_only && s->split && wnext[q] != s->steps[st * v + q % v])
            rc = fail(err, size, "stage %d never finishes the weight gradients (W) of micro-batch %d, chunk %d", st, q / v, q % v);
    }
    for (int k = 0; k < 4 * pairs && rc == 0; k++)
        if (posted[k] && !waited[k])
            rc = fail(err, size, "stage %d never waits for its %s of micro-batch %d, chunk %d", st, action_names[ACT_SEND_ACT + k / pairs],
                      k % pairs / v, k % pairs % v);
    if (rc == 0 && !s->forward_only && optimizer != 1) rc = fail(err, size, "stage %d runs the optimizer %d times, not once", st, optimizer);
    free(posted); free(waited);
    free(fwd); free(got_act); free(got_grad); free(next); free(fnext); free(wnext);
    return rc;
}

/* zero=2/3: every gradient's place reduced before it is written again and before the optimizer; every unit's
 * weights gathered and waited for before a compute reads them, into a free place, and released after; the most
 * parameters held gathered at once. */
static int check_zero(const Schedule *s, int st, size_t *high, char *err, size_t size) {
    int nb = s->n_buckets[st], rc = 0, pending[DDP_PLACES], holder[DDP_PLACES];
    int *state = callocCheck((size_t)nb + 1, sizeof(int));   /* 0 not held, 1 gathering, 2 gathered */
    for (int p = 0; p < DDP_PLACES; p++) pending[p] = holder[p] = -1;
    size_t now = 0;
    char what[160];
    *high = 0;
    for (int i = 0; i < s->n[st] && rc == 0; i++) {
        const Action *a = &s->list[st][i];
        describe(s, st, a, what, sizeof what);
        int b = a->bucket, p = b >= 0 && b < nb ? s->place[st][b] : 0;
        int bucketed = a->kind == ACT_REDUCE || a->kind == ACT_REDUCE_WAIT || a->kind == ACT_GATHER || a->kind == ACT_GATHER_WAIT ||
                       a->kind == ACT_FREE;
        if ((bucketed && (b < 0 || b >= nb)) || a->writes >= nb || a->reads >= nb) {   /* a broken list: say so, read nothing past the arrays */
            rc = fail(err, size, "stage %d: %s names a bucket outside 0..%d", st, what, nb - 1);
            break;
        }
        switch (a->kind) {
        case ACT_FORWARD: case ACT_BACKWARD: case ACT_BACKWARD_INPUT: case ACT_BACKWARD_WEIGHT:
            if (a->reads >= 0 && state[a->reads] != 2)
                rc = fail(err, size, "stage %d: %s reads bucket %d's weights before they are gathered", st, what, a->reads);
            else if (a->writes >= 0 && pending[s->place[st][a->writes]] >= 0)
                rc = fail(err, size, "stage %d: %s writes bucket %d's gradient into a place whose last reduction (bucket %d) is not done",
                          st, what, a->writes, pending[s->place[st][a->writes]]);
            break;
        case ACT_REDUCE: pending[p] = b; break;
        case ACT_REDUCE_WAIT:
            if (pending[p] != b) rc = fail(err, size, "stage %d: %s waits for a reduction not started", st, what);
            pending[p] = -1;
            break;
        case ACT_GATHER:
            if (s->zero < 3) break;
            if (state[b] || holder[p] >= 0)
                rc = fail(err, size, "stage %d: %s gathers into a place bucket %d still holds", st, what, holder[p] >= 0 ? holder[p] : b);
            state[b] = 1; holder[p] = b; now += s->elements[st][b];
            if (now > *high) *high = now;
            break;
        case ACT_GATHER_WAIT:
            if (s->zero == 3 && state[b] != 1) rc = fail(err, size, "stage %d: %s waits for a gather not started", st, what);
            if (s->zero == 3) state[b] = 2;
            break;
        case ACT_FREE:
            if (state[b] != 2) rc = fail(err, size, "stage %d: %s releases weights not gathered", st, what);
            state[b] = 0; holder[p] = -1; now -= s->elements[st][b];
            break;
        case ACT_OPTIMIZER:
            for (int q = 0; q < DDP_PLACES && rc == 0; q++)
                if (pending[q] >= 0) rc = fail(err, size, "stage %d: the optimizer runs before bucket %d's reduction is done", st, pending[q]);
            break;
        default: break;
        }
    }
    for (int k = 0; k < nb && rc == 0; k++)
        if (state[k]) rc = fail(err, size, "stage %d: bucket %d's gathered weights are never released", st, k);
    free(state);
    return rc;
}

/* A send's buffer stays as it was until its wait: no compute or gradient receive of another (micro-batch, chunk) in
 * its slot before it (nor a copy into that slot), and an activation's sender runs no backward of its own before it. */
static int check_send_buffers(const Schedule *s, int st, char *err, size_t size) {
    char what[160];
    for (int i = 0; i < s->n[st]; i++) {
        const Action *a = &s->list[st][i];
        if (!(a->kind == ACT_SEND_ACT || a->kind == ACT_SEND_GRAD) || a->peer == st) continue;
        for (int j = i + 1; j < s->n[st]; j++) {
            const Action *b = &s->list[st][j];
            if (b->kind == ACT_WAIT && b->msg == (int)a->kind && b->mb == a->mb && b->chunk == a->chunk) break;
            int same = b->mb == a->mb && b->chunk == a->chunk, other = !same && b->mb >= 0;
            if ((other && b->dest_slot >= 0 && b->dest_slot == a->slot) ||
                (other && b->slot == a->slot && (action_is_compute(b->kind) || b->kind == ACT_RECV_GRAD)) ||
                (same && a->kind == ACT_SEND_ACT && (b->kind == ACT_BACKWARD || b->kind == ACT_BACKWARD_INPUT))) {
                describe(s, st, b, what, sizeof what);
                char sent[160];
                describe(s, st, a, sent, sizeof sent);
                return fail(err, size, "stage %d: %s writes slot %d while its %s may still be reading it (its wait comes later)", st, what,
                            a->slot, sent);
            }
        }
    }
    return 0;
}

/* The timed run of the lists. fifo 0 (MPI): a message is done when both sides have posted it. fifo 1 (NCCL): a
 * posted group of messages is cut by lane (comm_p2p_lane), and each stage runs a lane's parts one after another in
 * posting order; a part starts when it is posted and the lane's part before it is done, and is done when every
 * partner's part has started. A message to the stage itself is done when posted. A "group" below is such a part,
 * named by its first action. */
typedef struct {
    const Schedule *s;
    int fifo, most;
    int **partner, **group, **prev_group;   /* prev_group: the group before this one in its lane, -1: none */
    double *posted;                         /* (stages * most) when each action's group was posted, -1: not yet */
    double *start, *done;                   /* fifo: memo, -1 not known */
    char *state;                            /* fifo: 1 while being worked out (a cycle: not known yet) */
} Run;

static double *at(const Run *r, double *a, int st, int i) { return &a[(size_t)st * r->most + i]; }
static double group_done(Run *r, int st, int g);
static double group_start(Run *r, int st, int g) {
    double p = *at(r, r->posted, st, g);
    if (p < 0) return -1;
    int prev = r->prev_group[st][g];
    if (prev < 0) return p;
    double d = group_done(r, st, prev);
    return d < 0 ? -1 : d > p ? d : p;
}
static double group_done(Run *r, int st, int g) {
    double *memo = at(r, r->done, st, g);
    if (*memo >= 0) return *memo;
    char *state = &r->state[(size_t)st * r->most + g];
    if (*state) return -1;
    *state = 1;
    double t = group_start(r, st, g);
    for (int i = g; t >= 0 && i < r->s->n[st] && is_comm(r->s->list[st][i].kind); i++) {   /* the part's messages */
        if (r->group[st][i] != g) continue;
        int ps = r->partner[st][i] / 0x100000, pj = r->partner[st][i] % 0x100000;
        if (ps == st) continue;
        double u = group_start(r, ps, r->group[ps][pj]);
        t = u < 0 ? -1 : u > t ? u : t;
    }
    *state = 0;
    if (t >= 0) *memo = t;
    return t;
}
/* When message i of stage st is done; -1: not known yet. */
static double message_done(Run *r, int st, int i) {
    int ps = r->partner[st][i] / 0x100000, pj = r->partner[st][i] % 0x100000;
    double mine = *at(r, r->posted, st, r->group[st][i]);
    if (mine < 0) return -1;
    if (ps == st) return mine;
    if (r->fifo) return group_done(r, st, r->group[st][i]);
    double theirs = *at(r, r->posted, ps, r->group[ps][pj]);
    return theirs < 0 ? -1 : theirs > mine ? theirs : mine;
}

static int simulate(Run *r, ScheduleSim *sim, char *err, size_t size) {
    const Schedule *s = r->s;
    int p = s->stages, most = r->most, rc = 0, done = 0;
    size_t cells = (size_t)p * most + 1;
    r->posted = mallocCheck(cells * sizeof(double));
    r->done = mallocCheck(cells * sizeof(double));
    r->state = callocCheck(cells, 1);
    for (size_t k = 0; k < cells; k++) r->posted[k] = r->done[k] = -1;
    int *pc = callocCheck(p, sizeof(int)), *wait_for = mallocCheck(cells * sizeof(int));
    double *t = callocCheck(p, sizeof(double));
    for (int st = 0; st < p; st++)   /* each wait's message */
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            int *w = &wait_for[(size_t)st * most + i];
            *w = -1;
            for (int j = i - 1; a->kind == ACT_WAIT && j >= 0 && *w < 0; j--) {
                const Action *b = &s->list[st][j];
                if ((int)b->kind == a->msg && b->mb == a->mb && b->chunk == a->chunk) *w = j;
            }
        }
    while (rc == 0 && done < p) {
        int moved = 0;
        done = 0;
        for (int st = 0; st < p; st++) {
            while (pc[st] < s->n[st]) {
                const Action *a = &s->list[st][pc[st]];
                double *start = &sim->start[(size_t)st * most + pc[st]], *end = &sim->end[(size_t)st * most + pc[st]];
                if (is_comm(a->kind)) {   /* the group is posted: the stage goes on */
                    int g0 = pc[st], g1 = g0;
                    while (g1 < s->n[st] && is_comm(s->list[st][g1].kind)) g1++;
                    for (int i = g0; i < g1; i++) r->posted[(size_t)st * most + r->group[st][i]] = t[st];
                    for (int i = g0; i < g1; i++) sim->start[(size_t)st * most + i] = sim->end[(size_t)st * most + i] = t[st];
                    pc[st] = g1; moved = 1;
                    continue;
                }
                if (a->kind == ACT_WAIT) {
                    int j = wait_for[(size_t)st * most + pc[st]];
                    double d = j < 0 ? t[st] : message_done(r, st, j);
                    if (d < 0) break;   /* not known yet: the partner has not posted (or its stream not reached it) */
                    *start = t[st];
                    if (d > t[st]) t[st] = d;
                    *end = t[st];
                    pc[st]++; moved = 1;
                    continue;
                }
                double d = a->kind == ACT_FORWARD ? (a->to > 0 ? (double)(a->to - a->from) / s->fsteps[st * s->chunks + a->chunk] : 1.0)
                         : a->kind == ACT_BACKWARD ? 2.0 * (a->to - a->from) / s->steps[st * s->chunks + a->chunk]
                         : a->kind == ACT_BACKWARD_INPUT || a->kind == ACT_BACKWARD_WEIGHT
                             ? 1.0 * (a->to - a->from) / s->steps[st * s->chunks + a->chunk] : 0.0;
                *start = t[st]; t[st] += d; *end = t[st];
                sim->busy[st] += d;
                pc[st]++; moved = 1;
            }
            done += pc[st] == s->n[st];
        }
        if (!moved && done < p) {
            char a1[160];
            int o = snprintf(err, size, "the schedule deadlocks%s:", r->fifo ? " as NCCL runs it (a stage's groups in posting order in each lane)" : "");
            for (int st = 0; st < p && o < (int)size; st++) {
                if (pc[st] == s->n[st]) continue;
                describe(s, st, &s->list[st][pc[st]], a1, sizeof a1);
                o += snprintf(err + o, size - o, " stage %d waits at its %s;", st, a1);
            }
            rc = -1;
        }
    }
    sim->makespan = 0;
    for (int st = 0; st < p; st++) if (t[st] > sim->makespan) sim->makespan = t[st];
    sim->bubble = 0;
    for (int st = 0; st < p; st++) {
        sim->idle[st] = sim->makespan - sim->busy[st];
        sim->bubble += sim->makespan > 0 ? sim->idle[st] / sim->makespan / p : 0;
    }
    free(r->posted); free(r->done); free(r->state); free(pc); free(wait_for); free(t);
    return rc;
}

int schedule_check(const Schedule *s, ScheduleSim *sim, char *err, size_t size) {
    int p = s->stages, rc = 0, most = 0;
    char a1[160], a2[160];
    memset(sim, 0, sizeof *sim);
    for (int st = 0; st < p; st++) {
        if (check_order(s, st, err, size)) return -1;
        if (s->zero) {
            if (!sim->gathered_high) sim->gathered_high = callocCheck(p, sizeof(size_t));
            if (check_zero(s, st, &sim->gathered_high[st], err, size)) return -1;
        }
        if (s->waits && check_send_buffers(s, st, err, size)) return -1;
        if (s->n[st] > most) most = s->n[st];
    }
    /* pairing: the k-th message from a to b is what b's k-th receive from a expects */
    int **partner = callocCheck(p, sizeof(int *)), **group = callocCheck(p, sizeof(int *)), **prev = callocCheck(p, sizeof(int *));
    for (int st = 0; st < p; st++) {
        partner[st] = mallocCheck(((size_t)s->n[st] + 1) * sizeof(int));
        group[st] = mallocCheck(((size_t)s->n[st] + 1) * sizeof(int));
        prev[st] = mallocCheck(((size_t)s->n[st] + 1) * sizeof(int));
        int last[COMM_P2P_LANES] = {-1, -1, -1, -1}, run = 0;   /* each lane's last part; the posted group's first action */
        for (int i = 0; i < s->n[st]; i++) {
            const Action *a = &s->list[st][i];
            partner[st][i] = group[st][i] = prev[st][i] = -1;
            if (!is_comm(a->kind)) continue;
            if (!(i > 0 && is_comm(s->list[st][i - 1].kind))) run = i;
            int lane = a->peer == st ? -1 : comm_p2p_lane(st, a->peer, is_send(a->kind));   /* -1: a copy to itself */
            for (int j = run; j <= i && group[st][i] < 0; j++) {   /* the part: the group's first action in this lane */
                const Action *b = &s->list[st][j];
                if ((b->peer == st ? -1 : comm_p2p_lane(st, b->peer, is_send(b->kind))) == lane) group[st][i] = j;
            }
            if (group[st][i] == i && lane >= 0) { prev[st][i] = last[lane]; last[lane] = i; }
        }
    }
    for (int a = 0; a < p && rc == 0; a++) {   /* to itself (zbv's turn): a copy, matched by what it carries, the send first */
        for (int i = 0; i < s->n[a] && rc == 0; i++) {
            const Action *x = &s->list[a][i];
            if (!is_comm(x->kind) || x->peer != a || !is_send(x->kind)) continue;
            int g1, m1, t1, g2, m2, t2, found = -1;
            message(s, a, x, &g1, &m1, &t1);
            for (int j = 0; j < s->n[a] && found < 0; j++) {
                const Action *y = &s->list[a][j];
                if (!is_comm(y->kind) || is_send(y->kind) || y->peer != a || partner[a][j] >= 0) continue;
                message(s, a, y, &g2, &m2, &t2);
                if (g1 == g2 && m1 == m2 && t1 == t2) found = j;
            }
            describe(s, a, x, a1, sizeof a1);
            if (found < 0) rc = fail(err, size, "stage %d's %s has no receive on the stage itself", a, a1);
            else if (found < i) rc = fail(err, size, "stage %d receives the %s from itself before it sends it", a, a1);
            else { partner[a][i] = a * 0x100000 + found; partner[a][found] = a * 0x100000 + i; }
        }
        for (int j = 0; j < s->n[a] && rc == 0; j++)
            if (is_comm(s->list[a][j].kind) && s->list[a][j].peer == a && partner[a][j] < 0) {
                describe(s, a, &s->list[a][j], a1, sizeof a1);
                rc = fail(err, size, "stage %d's %s has no send on the stage itself", a, a1);
            }
    }
    for (int a = 0; a < p && rc == 0; a++)
        for (int b = 0; b < p && rc == 0; b++) {
            int i = 0, j = 0;
            if (a == b) continue;
            for (;;) {
                while (i < s->n[a] && !(is_send(s->list[a][i].kind) && s->list[a][i].peer == b)) i++;
                while (j < s->n[b] && !(is_comm(s->list[b][j].kind) && !is_send(s->list[b][j].kind) && s->list[b][j].peer == a)) j++;
                if (i == s->n[a] && j == s->n[b]) break;
                if (i == s->n[a] || j == s->n[b]) {
                    int side = i == s->n[a] ? b : a, at_ = i == s->n[a] ? j : i;
                    describe(s, side, &s->list[side][at_], a1, sizeof a1);
                    rc = fail(err, size, "stage %d's %s has no partner on stage %d", side, a1, side == a ? b : a);
                    break;
                }
                int g1, m1, t1, g2, m2, t2;
                message(s, a, &s->list[a][i], &g1, &m1, &t1);
                message(s, b, &s->list[b][j], &g2, &m2, &t2);
                if (g1 != g2 || m1 != m2 || t1 != t2) {
                    describe(s, a, &s->list[a][i], a1, sizeof a1);
                    describe(s, b, &s->list[b][j], a2, sizeof a2);
                    rc = fail(err, size, "stage %d's %s is taken by stage %d's %s: the two stages disagree on the order of their messages",
                              a, a1, b, a2);
                    break;
                }
                partner[a][i] = b * 0x100000 + j;
                partner[b][j] = a * 0x100000 + i;
                i++; j++;
            }
        }
    sim->max_actions = most;
    sim->busy = callocCheck(p, sizeof(double));
    sim->idle = callocCheck(p, sizeof(double));
    sim->start = callocCheck((size_t)p * most + 1, sizeof(double));
    sim->end = callocCheck((size_t)p * most + 1, sizeof(double));
    Run r = {.s = s, .most = most, .partner = partner, .group = group, .prev_group = prev};
    if (rc == 0) {   /* NCCL's lanes first, for their figures alone; then MPI's, whose timeline is kept */
        r.fifo = 1;
        rc = simulate(&r, sim, err, size);
        sim->makespan_fifo = sim->makespan;
        sim->bubble_fifo = sim->bubble;
        memset(sim->busy, 0, (size_t)p * sizeof(double));
        if (rc == 0) {
            r.fifo = 0;
            rc = simulate(&r, sim, err, size);
        }
    }
    for (int st = 0; st < p; st++) { free(partner[st]); free(group[st]); free(prev[st]); }
    free(partner); free(group); free(prev);
    return rc;
}

void schedule_sim_free(ScheduleSim *sim) {
    free(sim->busy); free(sim->idle); free(sim->start); free(sim->end); free(sim->gathered_high);
    memset(sim, 0, sizeof *sim);
}
