/* parallel/ddp.c — gradient buckets, their reduction as the backward completes
 * them, ZeRO-1's pieces, shards and all-gather, and ZeRO-2/3's places
 * (parallel/ddp.h, docs/zero.md). */
#include "ddp.h"
#include "../common/util.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>

static size_t act_size(const Backend *be) { return dtype_size(backend_storage(be)); }
static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

int ddp_unit_place(const Model *m, int u) {
    if (m->part.has_embedding && u == 0) return DDP_PLACE_EMBEDDING;
    if (m->part.has_head && u == m->n_units - 1) return DDP_PLACE_HEAD;
    return DDP_PLACE_LAYER_EVEN + (u - m->part.has_embedding) % 2;
}

/* zero=2/3: how big each place must be, for the units that take it. */
static void plan_places(Ddp *d, const Model *m, const Backend *be) {
    for (int b = 0; b < d->n_buckets; b++) {
        Bucket *k = &d->buckets[b];
        const ModelUnit *unit = &m->units[k->unit];
        size_t skew = unit->offset * act_size(be) % 256, span = align256(skew + unit->count * act_size(be));
        k->place = ddp_unit_place(m, k->unit);
        if (unit->count > d->place_count[k->place]) d->place_count[k->place] = unit->count;
        if (d->zero == 3 && span > d->place_span[k->place]) d->place_span[k->place] = span;
    }
}

/* The places as views of one allocation at base (or only its size, base NULL). */
static size_t layout_places(Ddp *d, char *base) {
    size_t at = 0;
    for (int p = 0; p < DDP_PLACES; p++) {
        d->grad_place[p] = base ? (float *)(base + at) : NULL;
        at += align256(d->place_count[p] * sizeof(float));
    }
    for (int p = 0; p < DDP_PLACES; p++) {
        d->weight_place[p] = base ? base + at : NULL;
        at += d->place_span[p];
    }
    return at;
}

void ddp_plan(Ddp *d, const Model *m, const Comm *comm, const DdpOptions *o) {
    memset(d, 0, sizeof *d);
    d->comm = comm;
    int dp = comm_group_size(comm, comm_replica_group(comm)), me = comm_group_rank(comm, comm_replica_group(comm));   /* the ranks holding the same weights */
    int active = dp > 1 || comm->impl;   /* one rank through a transport (comm_backend=nccl) still runs its buckets */
    d->zero = dp > 1 ? o->zero : 0;
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
        open->unit = u;
        if (open->count >= want || d->zero >= 2) open = NULL;   /* zero=2/3: a unit a bucket */
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
    if (d->zero < 2) return;
    d->bucket_of_unit = callocCheck(m->n_units + 1, sizeof(int));
    for (int b = 0; b < d->n_buckets; b++) d->bucket_of_unit[d->buckets[b].unit] = b;
    plan_places(d, m, m->be);
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
    if (d->zero < 2) return;
    d->place_memory = be->alloc(layout_places(d, NULL), d->zero == 3 ? "ZeRO-3 places: units' gradients and gathered weights"
                                                                        : "ZeRO-2 places: units' gradients");
    layout_places(d, d->place_memory);
    d->poison = !strcmp(be->name, "cpu");
    m->grads_at = callocCheck(m->n_units + 1, sizeof(float *));
    if (d->zero == 3) m->weights_at = callocCheck(m->n_units + 1, sizeof(void *));
    for (int b = 0; b < d->n_buckets; b++) {
        const Bucket *k = &d->buckets[b];
        m->grads_at[k->unit] = d->grad_place[k->place];
        if (d->zero == 3) m->weights_at[k->unit] = d->weight_place[k->place] + m->units[k->unit].offset * act_size(be) % 256;
        if (d->zero == 3) ddp_release(d, b);   /* nothing gathered yet */
    }
}

size_t ddp_buffer_bytes(const Ddp *d, const Backend *be) {
    size_t a = act_size(be), n = d->wire ? d->n_params * a : 0;
    if (d->zero) n += d->shard_n * (2 * sizeof(float) + (be->act != DTYPE_FP32 ? a : 0) + (d->wire ? a : 0));
    return n + ddp_place_bytes(d);
}

size_t ddp_place_bytes(const Ddp *d) {
    Ddp sizes = *d;   /* layout_places sets the views: measure on a copy */
    return d->zero >= 2 ? layout_places(&sizes, NULL) : 0;
}

void ddp_free(Ddp *d) {
    if (d->model) {
        const Backend *be = d->model->be;
        if (d->grad_shard) be->free(d->grad_shard);
        if (d->master_shard) be->free(d->master_shard);
        if (d->compute_shard) be->free(d->compute_shard);
        if (d->wire_buf) be->free(d->wire_buf);
        if (d->wire_shard) be->free(d->wire_shard);
        if (d->place_memory) be->free(d->place_memory);
    }
    free(d->bucket_of_unit);
    for (int b = 0; b < d->n_buckets; b++) free(d->buckets[b].counts);
    free(d->buckets);
    memset(d, 0, sizeof *d);
}

void ddp_reduce_start(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    const Backend *be = d->model->be;
    if (d->zero >= 2) {   /* the unit's place into my shard (the sum so far is in my piece of the place: ddp_open_grads) */
        k->reduce = comm_reduce_scatter_start(d->comm, comm_replica_group(d->comm), d->grad_place[k->place], d->grad_shard + k->shard_at, k->counts, DTYPE_FP32);
        return;
    }
    void *g = d->model->grads + k->offset, *shard = d->grad_shard ? d->grad_shard + k->shard_at : NULL;   /* NULL without ZeRO-1 */
    DType dt = DTYPE_FP32;
    if (d->wire) {   /* the gradients go out in the compute dtype: cast down first */
        dt = backend_storage(be);
        void *w = (char *)d->wire_buf + k->offset * act_size(be);
        be->cast_from_fp32(w, g, k->count);
        g = w;
        shard = d->wire_shard ? (char *)d->wire_shard + k->shard_at * act_size(be) : NULL;
    }
    if (d->zero) k->reduce = comm_reduce_scatter_start(d->comm, comm_replica_group(d->comm), g, shard, k->counts, dt);
    else k->reduce = comm_allreduce_start(d->comm, comm_replica_group(d->comm), g, k->count, dt);
}

void ddp_reduce_wait(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    comm_wait(d->comm, k->reduce);
    if (!d->wire) return;
    const Backend *be = d->model->be;   /* back up into the fp32 gradients the optimizer reads */
    if (d->zero) be->cast_to_fp32(d->grad_shard + k->shard_at, (char *)d->wire_shard + k->shard_at * act_size(be), k->counts[comm_group_rank(d->comm, comm_replica_group(d->comm))]);
    else be->cast_to_fp32(d->model->grads + k->offset, (char *)d->wire_buf + k->offset * act_size(be), k->count);
}

/* zero=1/2: every rank's updated piece into every rank's compute-dtype weights;
 * zero=3: into the unit's weights place, where the model reads them (weights_at) */
void ddp_gather_start(Ddp *d, int b) {
    Bucket *k = &d->buckets[b];
    const Backend *be = d->model->be;
    size_t a = act_size(be);
    const void *mine = d->compute_shard ? (const void *)((char *)d->compute_shard + k->shard_at * a) : (const void *)(d->master_shard + k->shard_at);
    void *all = d->zero == 3 ? d->model->weights_at[k->unit] : (char *)d->model->params_compute + k->offset * a;
    k->gather = comm_allgather_start(d->comm, comm_replica_group(d->comm), mine, all, k->counts, backend_storage(be));
}

void ddp_gather_wait(Ddp *d, int b) { comm_wait(d->comm, d->buckets[b].gather); }

void ddp_open_grads(Ddp *d, int b, int accumulate) {
    const Bucket *k = &d->buckets[b];
    const Backend *be = d->model->be;
    float *place = d->grad_place[k->place];
    be->zero(place, k->count * sizeof(float));
    if (accumulate) be->copy(place + (k->piece_offset - k->offset), d->grad_shard + k->shard_at, k->counts[comm_group_rank(d->comm, comm_replica_group(d->comm))] * sizeof(float));
}

void ddp_release(Ddp *d, int b) {
    if (!d->poison) return;   /* the GPU: nothing to do, the place is simply overwritten by the next gather */
    const Bucket *k = &d->buckets[b];
    float *nan = d->model->weights_at[k->unit];   /* the CPU backends store every act dtype as fp32 (emulated) */
    for (size_t i = 0; i < k->count; i++) nan[i] = NAN;
}

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
    ddp_full_to_view(d, comm_group_rank(d->comm, comm_replica_group(d->comm)), host, view);
    be->upload(d->master_shard, view, d->shard_n * sizeof(float));
    if (d->compute_shard) be->cast_from_fp32(d->compute_shard, d->master_shard, d->shard_n);
    free(view);
}
