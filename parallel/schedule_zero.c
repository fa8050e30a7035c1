/* parallel/schedule_zero.c — ZeRO-2 and ZeRO-3 as actions of a stage's list
 * (parallel/schedule.h: schedule_add_zero; docs/zero.md walks through it).
 *
 * The idea: sharding gradients and weights over the data-parallel ranks is
 * only a question of WHEN each unit's gradient leaves and each unit's weights
 * arrive, and a schedule is exactly that answer written down. The pass takes
 * the pipeline builder's list, cuts its computes into one unit each, and puts
 * next to each compute what its unit needs: the reduce-scatter after the
 * action that wrote a gradient (its wait just before the next writer of the
 * same place), the all-gather before an action that reads weights — started
 * one use ahead, so it runs while the previous unit computes — and the
 * release after the last use. The executor runs the list as it is, and
 * `build/train schedule` checks and prints the same list. */
#include "schedule.h"
#include "ddp.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

typedef struct { Action *a; int n, cap; } List;

static void add(List *l, Action a) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = realloc(l->a, (size_t)l->cap * sizeof(Action));
        if (!l->a) die("out of host memory for a schedule");
    }
    a.slot = a.keep = -1;
    l->a[l->n++] = a;
}

static Action bucket_action(ActionKind kind, int b) { return (Action){.kind = kind, .bucket = b, .mb = -1, .chunk = -1, .reads = -1, .writes = -1}; }
static int is_compute(const Action *a) { return action_is_compute(a->kind); }

/* Every compute cut into single steps (zero=3 forwards; every backward), each marked with what it reads and writes. */
static List cut_steps(const Schedule *s, int st, const ZeroUnits *z, int zero) {
    List l = {0};
    for (int i = 0; i < s->n[st]; i++) {
        Action a = s->list[st][i];
        a.reads = a.writes = -1;
        a.accumulate = 0;
        const int *row = NULL;
        if (a.kind == ACT_FORWARD) {
            int n = z->forward_steps[a.chunk], head = !s->forward_only && z->head_bucket >= 0 &&
                                                      z->forward_reads[a.chunk * z->max_steps + n - 1] == z->head_bucket;
            if (zero < 3) {   /* whole; it writes the head's gradient when it holds the head */
                a.writes = head ? z->head_bucket : -1;
                add(&l, a);
                continue;
            }
            row = z->forward_reads + a.chunk * z->max_steps;
            for (int j = 0; j < n; j++) {
                Action f = a;
                f.from = j; f.to = j + 1;
                f.reads = row[j];
                f.writes = head && j == n - 1 ? z->head_bucket : -1;
                add(&l, f);
            }
        } else if (a.kind == ACT_BACKWARD || a.kind == ACT_BACKWARD_INPUT || a.kind == ACT_BACKWARD_WEIGHT) {
            for (int j = a.from; j < a.to; j++) {   /* split (zb1): B reads the unit's weights, W writes its gradient */
                Action b = a;
                b.from = j; b.to = j + 1;
                b.reads = zero == 3 && a.kind != ACT_BACKWARD_WEIGHT ? z->backward_reads[a.chunk * z->max_steps + j] : -1;
                b.writes = a.kind != ACT_BACKWARD_INPUT ? z->backward_writes[a.chunk * z->max_steps + j] : -1;
                add(&l, b);
            }
        } else if (a.kind != ACT_OPTIMIZER && !(a.kind >= ACT_REDUCE && a.kind <= ACT_FREE)) {
            add(&l, a);   /* sends and receives; any data-parallel actions are this pass's to place */
        }
    }
    return l;
}

/* The next compute at or after i that reads a unit in place p (-1: none). */
static int next_read_in(const List *l, int i, const ZeroUnits *z, int p) {
    for (; i < l->n; i++)
        if (is_compute(&l->a[i]) && l->a[i].reads >= 0 && z->place[l->a[i].reads] == p) return i;
    return -1;
}
static int next_read(const List *l, int i) {
    for (; i < l->n; i++)
        if (is_compute(&l->a[i]) && l->a[i].reads >= 0) return i;
    return -1;
}

void schedule_add_zero(Schedule *s, int st, const ZeroUnits *z, int zero) {
    if (zero < 2 || zero > 3) die("internal: schedule_add_zero for zero=%d", zero);
    s->zero = zero;
    if (!s->place) {
        s->n_buckets = callocCheck(s->stages, sizeof(int));
        s->place = callocCheck(s->stages, sizeof(int *));
        s->elements = callocCheck(s->stages, sizeof(size_t *));
    }
    s->n_buckets[st] = z->n_buckets;
    s->place[st] = mallocCheck(((size_t)z->n_buckets + 1) * sizeof(int));
    s->elements[st] = mallocCheck(((size_t)z->n_buckets + 1) * sizeof(size_t));
    memcpy(s->place[st], z->place, (size_t)z->n_buckets * sizeof(int));
    memcpy(s->elements[st], z->elements, (size_t)z->n_buckets * sizeof(size_t));
    if (zero == 3) {
        if (!s->fsteps) s->fsteps = callocCheck((size_t)s->stages * s->chunks, sizeof(int));
        memcpy(s->fsteps + st * s->chunks, z->forward_steps, (size_t)s->chunks * sizeof(int));
    }
    List in = cut_steps(s, st, z, zero), out = {0};
    int *written = callocCheck((size_t)z->n_buckets + 1, sizeof(int));
    int pending[DDP_PLACES], held[DDP_PLACES], ready[DDP_PLACES];   /* per place: the reduction not yet waited, the bucket gathered */
    for (int p = 0; p < DDP_PLACES; p++) pending[p] = held[p] = -1, ready[p] = 0;
    for (int i = 0; i < in.n; i++) {
        Action a = in.a[i];
        if (!is_compute(&a)) { add(&out, a); continue; }
        if (a.writes >= 0) {   /* the place's last reduction must have left before this action writes it again */
            int p = z->place[a.writes];
            if (pending[p] >= 0) add(&out, bucket_action(ACT_REDUCE_WAIT, pending[p]));
            pending[p] = -1;
            a.accumulate = written[a.writes]++ > 0;
        }
        if (a.reads >= 0) {
            int u = a.reads, p = z->place[u];
            if (held[p] != u) {   /* not gathered ahead (its place was busy then): gather now */
                add(&out, bucket_action(ACT_GATHER, u));
                held[p] = u; ready[p] = 0;
            }
            if (!ready[p]) { add(&out, bucket_action(ACT_GATHER_WAIT, u)); ready[p] = 1; }
            int j = next_read(&in, i + 1);   /* prefetch: the next unit's gather runs while this one computes */
            if (j >= 0) {
                int v = in.a[j].reads, q = z->place[v];
                if (held[q] < 0) { add(&out, bucket_action(ACT_GATHER, v)); held[q] = v; ready[q] = 0; }
            }
        }
        add(&out, a);
        if (a.writes >= 0) {
            add(&out, bucket_action(ACT_REDUCE, a.writes));
            pending[z->place[a.writes]] = a.writes;
        }
        if (a.reads >= 0) {   /* released unless the next use of its place is the same unit */
            int p = z->place[a.reads], j = next_read_in(&in, i + 1, z, p);
            if (j < 0 || in.a[j].reads != a.reads) { add(&out, bucket_action(ACT_FREE, a.reads)); held[p] = -1; }
        }
    }
    if (!s->forward_only) {
        for (int p = 0; p < DDP_PLACES; p++)
            if (pending[p] >= 0) add(&out, bucket_action(ACT_REDUCE_WAIT, pending[p]));
        add(&out, (Action){.kind = ACT_OPTIMIZER, .mb = -1, .chunk = -1, .reads = -1, .writes = -1});
        for (int b = 0; zero == 2 && b < z->n_buckets; b++) add(&out, bucket_action(ACT_GATHER, b));
        for (int b = 0; zero == 2 && b < z->n_buckets; b++) add(&out, bucket_action(ACT_GATHER_WAIT, b));
    }
    free(s->list[st]);
    s->list[st] = out.a;
    s->n[st] = out.n;
    s->cap[st] = out.cap;
    free(in.a);
    free(written);
}
