/* comm/comm_mpi.c — the Open MPI transport: a communicator per group,
 * host values, and device buffers for CPU ranks and for ranks that share a GPU.
 *
 * The idea: every operation is MPI's nonblocking form followed by one wait
 * loop, so a deadline (comm->timeout_s) covers all of them alike, and waiting
 * yields the core to the ranks still computing (tests run many ranks on two
 * cores). Device memory that is not host memory is staged: copied down before
 * an operation and up after it, through reused host buffers — unless MPI says
 * it is CUDA-aware (MPIX_Query_cuda_support). bf16 and fp16 travel as 2-byte
 * elements and are summed in fp32 and rounded back, as NCCL does. */
#include "comm_impl.h"
#include "watchdog.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef LLM3D_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#define MAX_OPS COMM_MAX_HANDLES   /* operations in flight at once */
#define MAX_STAGING 512
#define TAG_P2P 1
#define TAG_HOST 2

typedef struct {           /* one nonblocking operation */
    int active;
    MPI_Request req;
    int *counts, *displs;  /* MPI reads them until the operation completes */
    void *up_dev, *up_host;/* staged: copy up_host to up_dev when done */
    size_t up_bytes;
    void *staging[2];      /* staging buffers to give back when done */
    const char *what;
    CommGroup group;
    double started, done;  /* host clock: when it was started, and when it was first seen complete (0: not yet) */
} MpiOp;

typedef struct { void *p; size_t bytes; int in_use; } Staging;

struct MpiState {
    MPI_Comm group[GROUP_COUNT];
    MPI_Comm p2p;          /* the world again, for point to point (pipeline activations, checkpoint pieces) */
    int staged;            /* device buffers are not host memory and MPI is not CUDA-aware */
    int device_sync;       /* device buffers are on a GPU MPI reads directly: wait for the compute stream first */
    MpiOp ops[MAX_OPS];
    Staging staging[MAX_STAGING];
    int n_staging;
    CommStats stats;       /* since the last mpi_stats */
    double span[1024][2];  /* when each operation since then was in flight: their union is the time busy */
    int n_span;
};

static MPI_Datatype t16 = MPI_DATATYPE_NULL;
static MPI_Op op_sum_bf16 = MPI_OP_NULL, op_sum_fp16 = MPI_OP_NULL;

static void sum16(void *in, void *inout, int *len, DType dt) {
    for (int i = 0; i < *len; i++) dtype_from_float(inout, dt, i, dtype_to_float(in, dt, i) + dtype_to_float(inout, dt, i));
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t) { (void)t; sum16(in, inout, len, DTYPE_BF16); }
static void sum_fp16(void *in, void *inout, int *len, MPI_Datatype *t) { (void)t; sum16(in, inout, len, DTYPE_FP16); }
static MPI_Datatype mpi_type(DType dt) { return dt == DTYPE_FP32 ? MPI_FLOAT : t16; }
static MPI_Op mpi_sum(DType dt) { return dt == DTYPE_FP32 ? MPI_SUM : dt == DTYPE_BF16 ? op_sum_bf16 : op_sum_fp16; }

static int as_int(size_t n, const char *what) {
    if (n > INT_MAX) die("internal: %s of %zu elements is more than one MPI call carries; split it", what, n);
    return (int)n;
}

/* The wait loop: spin a little, then yield, then sleep briefly; past the deadline, a stall. The
 * watchdog (comm/watchdog.h) reports a stall first, naming who never came; this is the
 * backstop when it is not running, or WATCHDOG_BACKSTOP_S later should it fail to end the run. */
static void wait_request(const Comm *c, MPI_Request *req, int n, const char *what, CommGroup g) {
    double t0 = now_seconds(), limit = c->timeout_s + (watchdog_running() ? WATCHDOG_BACKSTOP_S : 0);
    for (long spins = 0;; spins++) {
        int done = 0;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (spins > 200000) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
        else if (spins > 1000) sched_yield();
        if (c->timeout_s > 0 && (spins & 255) == 0 && now_seconds() - t0 > limit)
            die("%s over the %s group (%d ranks) did not complete within comm_timeout_s=%.0f s: a rank stopped answering\n"
                "  hint: look for an earlier error from another rank; a rank that died or hangs stalls every collective",
                what, comm_group_names[g], comm_group_size(c, g), c->timeout_s);
    }
}

void mpi_create(Comm *c) {
    struct MpiState *s = callocCheck(1, sizeof *s);
    c->impl->mpi = s;
    if (t16 == MPI_DATATYPE_NULL) {
        MPI_Type_contiguous(2, MPI_BYTE, &t16);
        MPI_Type_commit(&t16);
        MPI_Op_create(sum_bf16, 1, &op_sum_bf16);
        MPI_Op_create(sum_fp16, 1, &op_sum_fp16);
    }
    for (int g = 0; g < GROUP_COUNT; g++) MPI_Comm_split(MPI_COMM_WORLD, comm_group_colour(c, g, c->rank), comm_group_rank(c, g), &s->group[g]);
    MPI_Comm_dup(MPI_COMM_WORLD, &s->p2p);
}

void mpi_attach(Comm *c) {
    struct MpiState *s = c->impl->mpi;
    int host = !strcmp(c->be->name, "cpu"), cuda_aware = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    cuda_aware = MPIX_Query_cuda_support();
#endif
    s->staged = !host && !cuda_aware;
    s->device_sync = !host && cuda_aware;
}

void mpi_free(Comm *c) {
    struct MpiState *s = c->impl->mpi;
    for (int g = 0; g < GROUP_COUNT; g++) MPI_Comm_free(&s->group[g]);
    MPI_Comm_free(&s->p2p);
    for (int i = 0; i < s->n_staging; i++) free(s->staging[i].p);
    free(s);
    c->impl->mpi = NULL;
}

/* ---- staging */

static void *staging_get(struct MpiState *s, size_t bytes) {
    int best = -1;
    for (int i = 0; i < s->n_staging; i++)
        if (!s->staging[i].in_use && s->staging[i].bytes >= bytes && (best < 0 || s->staging[i].bytes < s->staging[best].bytes)) best = i;
    if (best < 0) {
        if (s->n_staging == MAX_STAGING) die("internal: more than %d MPI staging buffers in use", MAX_STAGING);
        best = s->n_staging++;
        s->staging[best] = (Staging){mallocCheck(bytes ? bytes : 1), bytes, 0};
    }
    s->staging[best].in_use = 1;
    return s->staging[best].p;
}

static void staging_put(struct MpiState *s, void *p) {
    for (int i = 0; p && i < s->n_staging; i++)
        if (s->staging[i].p == p) s->staging[i].in_use = 0;
}

/* A host pointer MPI can read dev's bytes at; staged: copied down into a staging buffer. */
static void *readable(const Comm *c, const void *dev, size_t bytes, void **staging) {
    struct MpiState *s = c->impl->mpi;
    *staging = NULL;
    if (s->device_sync) c->be->synchronize();
    if (!s->staged) return (void *)dev;
    *staging = staging_get(s, bytes);
    c->be->download(*staging, dev, bytes);
    return *staging;
}

/* A host pointer MPI can write dev's bytes at; staged: copied up when the operation is done. */
static void *writable(const Comm *c, void *dev, size_t bytes, MpiOp *op, int k) {
    struct MpiState *s = c->impl->mpi;
    if (s->device_sync) c->be->synchronize();
    if (!s->staged) return dev;
    op->staging[k] = staging_get(s, bytes);
    op->up_dev = dev; op->up_host = op->staging[k]; op->up_bytes = bytes;
    return op->staging[k];
}

static MpiOp *op_new(const Comm *c, const char *what, CommGroup g, CommHandle *h) {
    struct MpiState *s = c->impl->mpi;
    for (int i = 0; i < MAX_OPS; i++)
        if (!s->ops[i].active) {
            s->ops[i] = (MpiOp){.active = 1, .what = what, .group = g, .started = now_seconds()};
            s->stats.ops++;
            *h = i;
            return &s->ops[i];
        }
    die("internal: more than %d communication operations in flight", MAX_OPS);
}

static void mpi_wait(const Comm *c, CommHandle h) {
    struct MpiState *s = c->impl->mpi;
    MpiOp *op = &s->ops[h];
    wait_request(c, &op->req, 1, op->what, op->group);
    if (s->n_span < 1024) { s->span[s->n_span][0] = op->started; s->span[s->n_span++][1] = op->done > 0 ? op->done : now_seconds(); }
    if (op->up_dev) c->be->upload(op->up_dev, op->up_host, op->up_bytes);
    staging_put(s, op->staging[0]);
    staging_put(s, op->staging[1]);
    free(op->counts); free(op->displs);
    op->active = 0;
}

static void mpi_progress(const Comm *c) {
    struct MpiState *s = c->impl->mpi;
    for (int i = 0; i < MAX_OPS; i++)
        if (s->ops[i].active) {
            int done;
            MPI_Test(&s->ops[i].req, &done, MPI_STATUS_IGNORE);   /* a completed request stays MPI_REQUEST_NULL for the wait */
            if (done && s->ops[i].done == 0) s->ops[i].done = now_seconds();
        }
}

static int mpi_done(const Comm *c, CommHandle h) { return c->impl->mpi->ops[h].active && c->impl->mpi->ops[h].done > 0; }

/* ---- device collectives */

static CommHandle mpi_allreduce_start(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    CommHandle h;
    MpiOp *op = op_new(c, "all-reduce", g, &h);
    size_t bytes = n * dtype_size(dt);
    void *staged;
    void *x = readable(c, buf, bytes, &staged);
    if (staged) { op->staging[0] = staged; op->up_dev = buf; op->up_host = staged; op->up_bytes = bytes; }
    MPI_Iallreduce(MPI_IN_PLACE, x, as_int(n, "an all-reduce"), mpi_type(dt), mpi_sum(dt), c->impl->mpi->group[g], &op->req);
    return h;
}

static void mpi_allreduce(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    double t0 = now_seconds();
    mpi_wait(c, mpi_allreduce_start(c, g, buf, n, dt));
    c->impl->mpi->stats.blocking_s += now_seconds() - t0;
}

static int by_start(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* Operations in flight at once count once: the busy time is the union of their spans. */
static void mpi_stats(const Comm *c, CommStats *add) {
    struct MpiState *s = c->impl->mpi;
    qsort(s->span, s->n_span, sizeof s->span[0], by_start);
    double busy = 0, lo = 0, hi = -1;
    for (int i = 0; i < s->n_span; i++) {
        if (s->span[i][0] > hi) { if (hi > lo) busy += hi - lo; lo = s->span[i][0]; hi = s->span[i][1]; }
        else if (s->span[i][1] > hi) hi = s->span[i][1];
    }
    if (hi > lo) busy += hi - lo;
    add->busy_s += busy; add->blocking_s += s->stats.blocking_s; add->ops += s->stats.ops;
    memset(&s->stats, 0, sizeof s->stats);
    s->n_span = 0;
}

static void pieces(MpiOp *op, const size_t *counts, int size, size_t *total) {
    op->counts = mallocCheck(size * sizeof(int));
    op->displs = mallocCheck(size * sizeof(int));
    *total = 0;
    for (int r = 0; r < size; r++) {
        op->counts[r] = as_int(counts[r], "a piece");
        op->displs[r] = as_int(*total, "a piece's offset");
        *total += counts[r];
    }
}

static CommHandle mpi_reduce_scatter_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    CommHandle h;
    MpiOp *op = op_new(c, "reduce-scatter", g, &h);
    size_t total, es = dtype_size(dt);
    int me = comm_group_rank(c, g);
    pieces(op, counts, comm_group_size(c, g), &total);
    void *sx = readable(c, send, total * es, &op->staging[0]);
    void *rx = writable(c, recv, counts[me] * es, op, 1);
    MPI_Ireduce_scatter(sx, rx, op->counts, mpi_type(dt), mpi_sum(dt), c->impl->mpi->group[g], &op->req);
    return h;
}

static CommHandle mpi_allgather_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    CommHandle h;
    MpiOp *op = op_new(c, "all-gather", g, &h);
    size_t total, es = dtype_size(dt);
    int me = comm_group_rank(c, g);
    pieces(op, counts, comm_group_size(c, g), &total);
    void *sx = readable(c, send, counts[me] * es, &op->staging[0]);
    void *rx = writable(c, recv, total * es, op, 1);
    if (sx == (char *)rx + (size_t)op->displs[me] * es) sx = MPI_IN_PLACE;   /* in place, and not staged apart: MPI's in-place form */
    MPI_Iallgatherv(sx, op->counts[me], mpi_type(dt), rx, op->counts, op->displs, mpi_type(dt), c->impl->mpi->group[g], &op->req);
    return h;
}

/* blocking, like mpi_allreduce: their time is booked as blocking (the step split's exposed communication) */
static void mpi_reduce_scatter(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    double t0 = now_seconds();
    mpi_wait(c, mpi_reduce_scatter_start(c, g, send, recv, counts, dt));
    c->impl->mpi->stats.blocking_s += now_seconds() - t0;
}
static void mpi_allgather(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    double t0 = now_seconds();
    mpi_wait(c, mpi_allgather_start(c, g, send, recv, counts, dt));
    c->impl->mpi->stats.blocking_s += now_seconds() - t0;
}

/* Every send and receive its own request and handle (comm_p2p_start): receives posted first, so a message that
 * arrives finds its buffer; a staged receive is copied up by its wait (mpi_wait). */
static void mpi_p2p_start(const Comm *c, const CommP2P *ops, int n, CommHandle *handles) {
    struct MpiState *s = c->impl->mpi;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (ops[i].is_send != pass) continue;
            size_t bytes = ops[i].n * dtype_size(ops[i].dt);
            MpiOp *op = op_new(c, "pipeline send/recv", GROUP_PP, &handles[i]);
            if (ops[i].is_send) {
                void *x = readable(c, ops[i].buf, bytes, &op->staging[0]);
                MPI_Isend(x, as_int(bytes, "a message"), MPI_BYTE, ops[i].peer, TAG_P2P, s->p2p, &op->req);
            } else {
                void *x = writable(c, ops[i].buf, bytes, op, 0);
                MPI_Irecv(x, as_int(bytes, "a message"), MPI_BYTE, ops[i].peer, TAG_P2P, s->p2p, &op->req);
            }
        }
}

const CommTransport comm_mpi_transport = {
    .name = "mpi", .allreduce = mpi_allreduce, .reduce_scatter = mpi_reduce_scatter, .allgather = mpi_allgather,
    .allreduce_start = mpi_allreduce_start,
    .reduce_scatter_start = mpi_reduce_scatter_start, .allgather_start = mpi_allgather_start,
    .wait = mpi_wait, .progress = mpi_progress, .done = mpi_done, .p2p_start = mpi_p2p_start, .stats = mpi_stats,
};

/* ---- host values */

double mpi_reduce_host(const Comm *c, CommGroup g, double x, int max) {
    double y = 0;
    MPI_Request req;
    MPI_Iallreduce(&x, &y, 1, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, c->impl->mpi->group[g], &req);
    wait_request(c, &req, 1, max ? "a host max" : "a host sum", g);
    return y;
}

void mpi_broadcast_host(const Comm *c, CommGroup g, void *buf, size_t bytes, int root) {
    MPI_Request req;
    MPI_Ibcast(buf, as_int(bytes, "a broadcast"), MPI_BYTE, root, c->impl->mpi->group[g], &req);
    wait_request(c, &req, 1, "a broadcast", g);
}

void mpi_allgather_host(const Comm *c, CommGroup g, const void *send, void *recv, size_t bytes) {
    MPI_Request req;
    MPI_Iallgather(send, as_int(bytes, "an all-gather"), MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->impl->mpi->group[g], &req);
    wait_request(c, &req, 1, "a host all-gather", g);
}

void mpi_send_host(const Comm *c, int peer, const void *buf, size_t bytes, int is_send) {
    const size_t piece = (size_t)1 << 30;   /* MPI counts are ints: send in pieces of 1 GiB */
    size_t at = 0;
    do {
        int n = (int)(bytes - at < piece ? bytes - at : piece);
        MPI_Request req;
        if (is_send) MPI_Isend((char *)buf + at, n, MPI_BYTE, peer, TAG_HOST, c->impl->mpi->p2p, &req);
        else MPI_Irecv((char *)buf + at, n, MPI_BYTE, peer, TAG_HOST, c->impl->mpi->p2p, &req);
        wait_request(c, &req, 1, is_send ? "a host send" : "a host receive", GROUP_WORLD);
        at += (size_t)n;
    } while (at < bytes);
}

void mpi_barrier(const Comm *c, CommGroup g) {
    MPI_Request req;
    MPI_Ibarrier(c->impl->mpi->group[g], &req);
    wait_request(c, &req, 1, "a barrier", g);
}

#else   /* no MPI in this build: only the one-rank grid exists, so none of these is ever reached */

static void no_mpi(void) { die("internal: a collective over several ranks in a build without MPI"); }
void mpi_create(Comm *c) { (void)c; no_mpi(); }
void mpi_attach(Comm *c) { (void)c; no_mpi(); }
void mpi_free(Comm *c) { (void)c; }
double mpi_reduce_host(const Comm *c, CommGroup g, double x, int max) { (void)c; (void)g; (void)max; no_mpi(); return x; }
void mpi_broadcast_host(const Comm *c, CommGroup g, void *buf, size_t bytes, int root) { (void)c; (void)g; (void)buf; (void)bytes; (void)root; no_mpi(); }
void mpi_allgather_host(const Comm *c, CommGroup g, const void *send, void *recv, size_t bytes) { (void)c; (void)g; (void)send; (void)recv; (void)bytes; no_mpi(); }
void mpi_send_host(const Comm *c, int peer, const void *buf, size_t bytes, int is_send) { (void)c; (void)peer; (void)buf; (void)bytes; (void)is_send; no_mpi(); }
void mpi_barrier(const Comm *c, CommGroup g) { (void)c; (void)g; no_mpi(); }
const CommTransport comm_mpi_transport = {.name = "mpi"};
#endif
