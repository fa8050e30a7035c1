/* parallel/executor.c — the one loop that runs a step's actions (parallel/executor.h). */
#include "executor.h"
#include "../comm/flight.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static void log_event(Executor *e, const Action *a, double start, double end) {
    if (e->n_log == e->cap_log) {
        e->cap_log = e->cap_log ? 2 * e->cap_log : 256;
        e->log = realloc(e->log, (size_t)e->cap_log * sizeof(ExecEvent));
        if (!e->log) die("out of host memory for the executor's log");
    }
    e->log[e->n_log++] = (ExecEvent){a->kind, a->mb, a->chunk, a->bucket, a->from, a->to, start, end};
}

static int is_p2p(ActionKind k) { return k >= ACT_SEND_ACT && k <= ACT_RECV_GRAD; }

/* The handle of message (kind, mb, chunk) in this run's table. */
static CommHandle *handle_of(Executor *e, int kind, int mb, int chunk) {
    return &e->handles[((size_t)(kind - ACT_SEND_ACT) * e->table_mb + mb) * e->table_chunks + chunk];
}

/* The group of sends and receives starting at actions[i]: posted together, each finished later by its ACT_WAIT
 * (comm_p2p_start). A message to or from this stage itself (zbv's turn) is no message: the send copies its data
 * into the receiving pair's slot at once, and the receive has nothing left to do. Returns the group's length. */
static int run_p2p(Executor *e, const Action *actions, int i, int n, int B, int T) {
    Model *m = e->model;
    const Comm *c = e->comm;
    CommP2P ops[64];
    const Action *of[64];
    CommHandle h[64];
    int k = 0, n_ops = 0;
    size_t count = model_boundary_elements(m, B, T);
    for (; i + k < n && is_p2p(actions[i + k].kind); k++) {
        const Action *a = &actions[i + k];
        void *buf = a->kind == ACT_SEND_ACT ? model_chunk_output(m, a->chunk, a->slot)
                  : a->kind == ACT_RECV_ACT ? model_chunk_input(m, a->chunk, a->slot) : m->slots[a->slot].dres;
        if (a->peer == c->pp_rank) {
            if (a->kind == ACT_SEND_ACT || a->kind == ACT_SEND_GRAD) {
                if (a->dest_slot < 0) die("internal: a send to this stage itself without the receiving slot");
                void *to = a->kind == ACT_SEND_ACT ? model_chunk_input(m, 0, a->dest_slot) : m->slots[a->dest_slot].dres;
                m->be->copy(to, buf, count * dtype_size(backend_storage(m->be)));
            }
            *handle_of(e, a->kind, a->mb, a->chunk) = -1;
            continue;
        }
        if (n_ops == 64) die("internal: more than 64 sends and receives in one group");
        of[n_ops] = a;
        ops[n_ops++] = (CommP2P){a->kind == ACT_SEND_ACT || a->kind == ACT_SEND_GRAD, comm_world_rank(c, c->dp_rank, a->peer, c->cp_rank, c->tp_rank),
                                 buf, count, backend_storage(m->be)};
    }
    comm_p2p_start(c, ops, n_ops, h);
    for (int j = 0; j < n_ops; j++) *handle_of(e, of[j]->kind, of[j]->mb, of[j]->chunk) = h[j];
    return k;
}

/* ACT_WAIT: the message's handle is done; NCCL's group handle serves every message of its group, so all of them
 * are marked done with it. */
static void wait_message(Executor *e, const Action *a) {
    CommHandle *h = handle_of(e, a->msg, a->mb, a->chunk), x = *h;
    if (x < 0) return;
    comm_wait(e->comm, x);
    size_t total = 4 * (size_t)e->table_mb * e->table_chunks;
    for (size_t q = 0; q < total; q++)
        if (e->handles[q] == x) e->handles[q] = -1;
}

/* The table of this run's message handles: (4 kinds x micro-batches x chunks), every entry -1 (none in flight). */
static void table_open(Executor *e, const Action *actions, int n) {
    int mb = 1, chunks = 1;
    for (int i = 0; i < n; i++) {
        if (actions[i].mb + 1 > mb) mb = actions[i].mb + 1;
        if (actions[i].chunk + 1 > chunks) chunks = actions[i].chunk + 1;
    }
    size_t total = 4 * (size_t)mb * chunks;
    if (total > e->cap_handles) {
        e->handles = realloc(e->handles, total * sizeof(CommHandle));
        if (!e->handles) die("out of host memory for the executor's message handles");
        e->cap_handles = total;
    }
    e->table_mb = mb; e->table_chunks = chunks;
    for (size_t q = 0; q < total; q++) e->handles[q] = -1;
}

/* Whatever the list left unwaited (none, in a list schedule_check passed): finished before the step ends. */
static void table_close(Executor *e) {
    size_t total = 4 * (size_t)e->table_mb * e->table_chunks;
    for (size_t q = 0; q < total; q++)
        if (e->handles[q] >= 0) {
            CommHandle x = e->handles[q];
            comm_wait(e->comm, x);
            for (size_t r = q; r < total; r++) if (e->handles[r] == x) e->handles[r] = -1;
        }
}

/* Two events per action, made once and reused. */
static void ensure_events(Executor *e, int n) {
    if (n <= e->cap_events) return;
    const Backend *be = e->model->be;
    e->events = realloc(e->events, 2 * (size_t)n * sizeof(void *));
    if (!e->events) die("out of host memory for the executor's events");
    for (int k = 2 * e->cap_events; k < 2 * n; k++) e->events[k] = be->event_create();
    e->cap_events = n;
}

double executor_run(Executor *e, const Action *actions, int n, const int *ids, const int *targets, int B, int T, float dloss) {
    Model *m = e->model;
    const Backend *be = m->be;
    size_t BT = (size_t)B * T;
    ensure_events(e, n + 1);
    void **ev = e->events;
    e->n_log = 0;
    table_open(e, actions, n);
    comm_stats_take(e->comm);   /* what ran between steps (an evaluation's tensor-parallel sums) is not this step's */
    for (int i = 0; i < n;) {
        const Action *a = &actions[i];
        if (a->kind <= ACT_RECV_GRAD || a->kind == ACT_WAIT) flight_set_micro_batch(a->mb);   /* the micro-batch a stall names (comm/flight.h) */
        be->event_record(ev[2 * i]);
        int used = 1;
        switch (a->kind) {
        case ACT_FORWARD:
            if (e->ddp && e->ddp->zero >= 2 && a->writes >= 0) ddp_open_grads(e->ddp, a->writes, a->accumulate);
            if (a->to > 0) model_forward_chunk_steps(m, a->chunk, a->slot, ids + a->mb * BT, targets + a->mb * BT, B, T, dloss, a->from, a->to);
            else model_forward_chunk(m, a->chunk, a->slot, ids + a->mb * BT, targets + a->mb * BT, B, T, dloss);
            break;
        case ACT_BACKWARD:
            if (e->ddp && e->ddp->zero >= 2 && a->writes >= 0) ddp_open_grads(e->ddp, a->writes, a->accumulate);
            model_backward_chunk(m, a->chunk, a->slot, a->from, a->to);
            break;
        case ACT_BACKWARD_INPUT: model_backward_input_chunk(m, a->chunk, a->slot, a->keep, a->from, a->to); break;   /* writes no gradient */
        case ACT_BACKWARD_WEIGHT:   /* zb1's W: the only writer of the chunk's weight gradients */
            if (e->ddp && e->ddp->zero >= 2 && a->writes >= 0) ddp_open_grads(e->ddp, a->writes, a->accumulate);
            model_backward_weight_chunk(m, a->chunk, a->slot, a->keep, a->from, a->to);
            break;
        case ACT_SEND_ACT: case ACT_RECV_ACT: case ACT_SEND_GRAD: case ACT_RECV_GRAD: used = run_p2p(e, actions, i, n, B, T); break;
        case ACT_REDUCE: ddp_reduce_start(e->ddp, a->bucket); break;
        case ACT_REDUCE_WAIT: ddp_reduce_wait(e->ddp, a->bucket); break;
        case ACT_OPTIMIZER: e->optimizer(e->ctx); break;
        case ACT_GATHER: ddp_gather_start(e->ddp, a->bucket); break;
        case ACT_GATHER_WAIT: ddp_gather_wait(e->ddp, a->bucket); break;
        case ACT_FREE: ddp_release(e->ddp, a->bucket); break;
        case ACT_WAIT: wait_message(e, a); break;
        default: die("internal: action %d", a->kind);
        }
        be->event_record(ev[2 * i + 1]);
        comm_progress(e->comm);
        i += used;
    }
    table_close(e);
    /* the log and the split, from the events (on a GPU this waits for the step's work) */
    ExecSplit *s = &e->split;
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n;) {
        const Action *a = &actions[i];
        int used = 1;
        while (i + used < n && a->kind >= ACT_SEND_ACT && a->kind <= ACT_RECV_GRAD && actions[i + used].kind >= ACT_SEND_ACT &&
               actions[i + used].kind <= ACT_RECV_GRAD) used++;
        double start = be->event_seconds(ev[0], ev[2 * i]), end = be->event_seconds(ev[0], ev[2 * i + 1]), d = end - start;
        for (int k = 0; k < used; k++) log_event(e, &actions[i + k], start, end);
        switch (a->kind) {
        case ACT_FORWARD: case ACT_BACKWARD: case ACT_BACKWARD_INPUT: case ACT_BACKWARD_WEIGHT: s->compute_s += d; break;
        case ACT_SEND_ACT: case ACT_RECV_ACT: case ACT_SEND_GRAD: case ACT_RECV_GRAD: case ACT_WAIT: s->bubble_s += d; break;
        /* starting a reduction costs the compute too (MPI's staging copies the gradients down first) */
        case ACT_REDUCE: case ACT_GATHER: case ACT_REDUCE_WAIT: case ACT_GATHER_WAIT: case ACT_FREE: s->exposed_s += d; break;
        case ACT_OPTIMIZER: s->optimizer_s += d; break;
        default: s->other_s += d;
        }
        if (end > s->span_s) s->span_s = end;
        i += used;
    }
    CommStats cs = comm_stats_take(e->comm);
    s->compute_s -= cs.blocking_s;   /* the tensor-parallel sums ran inside the forwards and backwards */
    s->exposed_s += cs.blocking_s;
    s->comm_busy_s = cs.busy_s;
    return model_take_losses(m);   /* the forwards' losses, read back while the step ran */
}

void executor_free(Executor *e) {
    for (int k = 0; k < 2 * e->cap_events; k++) e->model->be->event_destroy(e->events[k]);
    free(e->events);
    free(e->log);
    free(e->handles);
    memset(e, 0, sizeof *e);
}
