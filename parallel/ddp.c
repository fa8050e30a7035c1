/* parallel/ddp.c — gradient buckets, their reduction as the backward completes
 * them, and ZeRO-1's pieces, shards and all-gather (parallel/ddp.h). */
#include "ddp.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static size_t act_size(const Backend *be) { return dtype_size(backend_storage(be)); }

void ddp_plan(Ddp *d, const Model *m, const Comm *comm, const DdpOptions *o) {
    memset(d, 0, sizeof *d);
    d->comm = comm;
    int dp = comm->dp, me = comm->dp_rank;
    int active = dp > 1 || comm->impl;   /* one rank through a transport (comm_backend=nccl) still runs its buckets */
    d->zero = o->zero && dp > 1;
    d->wire = o->compute_dtype_wire && active;
    d->shard_n = d->n_params = m->n_params;
    if (!active) return;
    /* whole units from the end of the buffer backwards, until a bucket holds bucket_mb of fp32 gradients */
    size_t want = (size_t)(o->bucket_mb * 1048576.0 / sizeof(float));
    if (want < 1) want = 1;
    d->buckets = callocCheck(m->n_units + 1, sizeof(Bucket));
    Bucket *open = NULL;
    for (int u = m->n_units - 1; u >= 0; u--) {
        const ModelUnit *unit = &m->units[u];
        if (!unit->count) continue;
        if (!open) { open = &d->buckets[d->n_buckets++]; open->offset = unit->offset + unit->count; }
        open->offset = unit->offset;
        open->count += unit->count;
        open->ready = (BucketReady){unit->chunk, unit->step};   /* the lowest unit of a bucket completes last */
        if (open->count >= want) open = NULL;
    }
    if (!d->zero) return;
    /* zero=1: dp pieces a bucket, cut near count/dp where the optimizer allows; my pieces, in buffer order, are the shard */
    d->shard_n = 0;
    for (int b = d->n_buckets - 1; b >= 0; b--) {
        Bucket *k = &d->buckets[b];
        k->counts = callocCheck(dp, sizeof(size_t));
        size_t share = (k->count + dp - 1) / dp, prev = k->offset, end = k->offset + k->count;
        for (int r = 0; r < dp; r++) {
            size_t nominal = k->offset + (size_t)(r + 1) * share < end ? k->offset + (size_t)(r + 1) * share : end;
            size_t next = r == dp - 1 ? end : o->cut ? o->cut(o->cut_ctx, nominal) : nominal;
            if (next < prev) next = prev;
            if (next > end) next = end;
            k->counts[r] = next - prev;
            if (r == me) k->piece_offset = prev;
            prev = next;
        }
        k->shard_at = d->shard_n;
        d->shard_n += k->counts[me];
    }
}

void ddp_create(Ddp *d, Model *m, const Comm *comm, const DdpOptions *o) {
    ddp_plan(d, m, comm, o);
    d->model = m;
    const Backend *be = m->be;
    if (d->wire) d->wire_buf = be->alloc(m->n_params * act_size(be), "gradients cast for the data-parallel reduction");
    if (!d->zero) return;
    d->grad_shard = be->alloc(d->shard_n * sizeof(float), "ZeRO-1 gradient shard");
    d->master_shard = be->alloc(d->shard_n * sizeof(float), "ZeRO-1 fp32 master weights shard");
    if (be->act != DTYPE_FP32) d->compute_shard = be->alloc(d->shard_n * act_size(be), "ZeRO-1 updated compute-dtype weights shard");
    if (d->wire) d->wire_shard = be->alloc(d->shard_n * act_size(be), "ZeRO-1 reduced gradient shard, compute dtype");
}

size_t ddp_buffer_bytes(const Ddp *d, const Backend *be) {
    size_t a = act_size(be), n = d->wire ? d->n_params * a : 0;
    if (d->zero) n += d->shard_n * (2 * sizeof(float) + (be->act != DTYPE_FP32 ? a : 0) + (d->wire ? a : 0));
    return n;
}

void ddp_free(Ddp *d) {
    if (d->model) {
        const Backend *be = d->model->be;
        if (d->grad_shard) be->free(d->grad_shard);
        if (d->master_shard) be->free(d->master_shard);
        if (d->compute_shard) be->free(d->compute_shard);
        if (d->wire_buf) be->free(d->wire_buf);
        if (d->wire_shard) be->free(d->wire_shard);
    }
    for (int b = 0; b < d->n_buckets; b++) free(d->buckets[b].counts);
    free(d->buckets);
    memset(d, 0, sizeof *d);
}

void ddp_reduce_start(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    const Backend *be = d->model->be;
    void *g = d->model->grads + k->offset, *shard = d->grad_shard ? d->grad_shard + k->shard_at : NULL;   /* NULL without ZeRO-1 */
    DType dt = DTYPE_FP32;
    if (d->wire) {   /* the gradients go out in the compute dtype: cast down first */
        dt = backend_storage(be);
        void *w = (char *)d->wire_buf + k->offset * act_size(be);
        be->cast_from_fp32(w, g, k->count);
        g = w;
        shard = d->wire_shard ? (char *)d->wire_shard + k->shard_at * act_size(be) : NULL;
    }
    if (d->zero) k->reduce = comm_reduce_scatter_start(d->comm, GROUP_DP, g, shard, k->counts, dt);
    else k->reduce = comm_allreduce_start(d->comm, GROUP_DP, g, k->count, dt);
}

void ddp_reduce_wait(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    comm_wait(d->comm, k->reduce);
    if (!d->wire) return;
    const Backend *be = d->model->be;   /* back up into the fp32 gradients the optimizer reads */
    if (d->zero) be->cast_to_fp32(d->grad_shard + k->shard_at, (char *)d->wire_shard + k->shard_at * act_size(be), k->counts[d->comm->dp_rank]);
    else be->cast_to_fp32(d->model->grads + k->offset, (char *)d->wire_buf + k->offset * act_size(be), k->count);
}

/* zero=1: every rank's updated piece into every rank's compute-dtype weights */
void ddp_gather_start(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    const Backend *be = d->model->be;
    size_t a = act_size(be);
    const void *mine = d->compute_shard ? (const void *)((char *)d->compute_shard + k->shard_at * a) : (const void *)(d->master_shard + k->shard_at);
    void *all = (char *)d->model->params_compute + k->offset * a;
    k->gather = comm_allgather_start(d->comm, GROUP_DP, mine, all, k->counts, backend_storage(be));
}

void ddp_gather_wait(Ddp *d, int b) { comm_wait(d->comm, d->buckets[b].gather); }

size_t ddp_view_size(const Ddp *d, int r) {
    size_t n = 0;
    for (int b = 0; b < d->n_buckets; b++) n += d->buckets[b].counts[r];
    return n;
}

/* Rank r's pieces in buffer order (the buckets run backwards through the buffer). */
static void walk_pieces(const Ddp *d, int r, float *view, float *full, int to_full) {
    size_t at = 0;
    for (int b = d->n_buckets - 1; b >= 0; b--) {
        const Bucket *k = &d->buckets[b];
        size_t offset = k->offset;
        for (int q = 0; q < r; q++) offset += k->counts[q];
        if (to_full) memcpy(full + offset, view + at, k->counts[r] * sizeof(float));
        else memmove(view + at, full + offset, k->counts[r] * sizeof(float));   /* in place too: at <= offset */
        at += k->counts[r];
    }
}
void ddp_view_to_full(const Ddp *d, int r, const float *view, float *full) { walk_pieces(d, r, (float *)view, full, 1); }
void ddp_full_to_view(const Ddp *d, int r, const float *full, float *view) { walk_pieces(d, r, view, (float *)full, 0); }

void ddp_load_master(Ddp *d, const float *host) {
    if (!d->zero) return;
    const Backend *be = d->model->be;
    float *view = mallocCheck((d->shard_n + 1) * sizeof(float));
    ddp_full_to_view(d, d->comm->dp_rank, host, view);
    be->upload(d->master_shard, view, d->shard_n * sizeof(float));
    if (d->compute_shard) be->cast_from_fp32(d->compute_shard, d->master_shard, d->shard_n);
    free(view);
}
