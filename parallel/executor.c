/* parallel/executor.c — the one loop that runs a step's actions (parallel/executor.h). */
#include "executor.h"
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

/* The group of sends and receives starting at actions[i]: posted together, done on return. Returns its length. */
static int run_p2p(Executor *e, const Action *actions, int i, int n, int B, int T) {
    Model *m = e->model;
    const Comm *c = e->comm;
    CommP2P ops[64];
    int k = 0;
    size_t count = model_boundary_elements(m, B, T);
    for (; i + k < n && is_p2p(actions[i + k].kind); k++) {
        const Action *a = &actions[i + k];
        if (k == 64) die("internal: more than 64 sends and receives in one group");
        void *buf = a->kind == ACT_SEND_ACT ? model_chunk_output(m, a->chunk, a->slot)
                  : a->kind == ACT_RECV_ACT ? model_chunk_input(m, a->chunk, a->slot) : m->slots[a->slot].dres;
        ops[k] = (CommP2P){a->kind == ACT_SEND_ACT || a->kind == ACT_SEND_GRAD, comm_world_rank(c, c->dp_rank, a->peer, c->tp_rank),
                           buf, count, backend_storage(m->be)};
    }
    comm_p2p(c, ops, k);
    return k;
}

double executor_run(Executor *e, const Action *actions, int n, const int *ids, const int *targets, int B, int T, float dloss) {
    Model *m = e->model;
    double loss = 0, t0 = now_seconds();
    size_t BT = (size_t)B * T;
    e->n_log = 0;
    e->busy_s = e->comm_s = 0;
    for (int i = 0; i < n;) {
        const Action *a = &actions[i];
        double start = now_seconds();
        int used = 1;
        switch (a->kind) {
        case ACT_FORWARD:
            loss += model_forward_chunk(m, a->chunk, a->slot, ids + a->mb * BT, targets + a->mb * BT, B, T, dloss);
            break;
        case ACT_BACKWARD: model_backward_chunk(m, a->chunk, a->slot, a->from, a->to); break;
        case ACT_SEND_ACT: case ACT_RECV_ACT: case ACT_SEND_GRAD: case ACT_RECV_GRAD: used = run_p2p(e, actions, i, n, B, T); break;
        case ACT_REDUCE: ddp_reduce_start(e->ddp, a->bucket); break;
        case ACT_REDUCE_WAIT: ddp_reduce_wait(e->ddp, a->bucket); break;
        case ACT_OPTIMIZER: e->optimizer(e->ctx); break;
        case ACT_GATHER: ddp_gather_start(e->ddp, a->bucket); break;
        case ACT_GATHER_WAIT: ddp_gather_wait(e->ddp, a->bucket); break;
        default: die("internal: action %d", a->kind);
        }
        double end = now_seconds();
        if (a->kind == ACT_FORWARD || a->kind == ACT_BACKWARD) e->busy_s += end - start;
        else if (a->kind != ACT_OPTIMIZER) e->comm_s += end - start;
        for (int k = 0; k < used; k++) log_event(e, &actions[i + k], start - t0, end - t0);
        comm_progress(e->comm);
        i += used;
    }
    return loss;
}

void executor_free(Executor *e) {
    free(e->log);
    memset(e, 0, sizeof *e);
}
