/* comm/comm_nccl.c — the NCCL transport: one GPU a rank, device buffers
 * moved by NCCL, bootstrapped over MPI.
 *
 * The idea: rank 0 makes an ncclUniqueId, MPI broadcasts it, every rank joins
 * the world communicator and splits it into one per group (the same colours as
 * MPI's). A blocking collective runs on the compute stream itself, so it is
 * ordered with the kernels around it for free. An operation that overlaps the
 * backward runs on a dedicated comm stream: an event recorded on the compute
 * stream makes it wait for the gradients it reads, and comm_wait makes the
 * compute stream wait for its completion event — neither blocks the host.
 * Pipeline messages go in four lanes of their own (comm_p2p_lane: to and from
 * the stage before, to and from the stage after), a communicator and a stream
 * each, so that neither a gradient bucket nor a message the partner has not
 * sent yet holds up a message behind it on a shared stream. */
#include "comm_impl.h"
#include "flight.h"
#include "watchdog.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include "../common/errors.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(LLM3D_NCCL) && defined(LLM3D_MPI)
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#define MAX_OPS COMM_MAX_HANDLES   /* a step's groups and buckets between two stats calls: sends now wait late */
#define MAX_TIMED 4096     /* blocking collectives timed between two stats calls */

struct NcclState {
    ncclComm_t group[GROUP_COUNT];
    ncclComm_t lane[COMM_P2P_LANES];       /* pp > 1: the world again, once a lane (comm_p2p_lane) */
    cudaStream_t compute, comm, lane_stream[COMM_P2P_LANES];
    cudaEvent_t ready[MAX_OPS];            /* compute stream: what the operation waits for */
    cudaEvent_t started[MAX_OPS], done[MAX_OPS];   /* comm stream: when it ran */
    int active[MAX_OPS], next;             /* handles go round, so a finished one is still there for stats */
    int since[MAX_OPS], n_since;           /* handles started since the last stats */
    cudaEvent_t block_start[MAX_TIMED], block_end[MAX_TIMED];
    int n_timed;
    cudaEvent_t flight_start[FLIGHT_SLOTS], flight_done[FLIGHT_SLOTS];   /* the watchdog's view of each operation */
    cudaEvent_t period;                    /* compute stream, at the last stats: the origin of the intervals since */
};

/* Every NCCL and CUDA failure here goes through the error table (common/errors.h):
 * NCCL's own detail (ncclGetLastError: "... No route to host") picks the row when it can. */
static void nccl_fail(const char *what, ncclResult_t r, const char *file, int line) {
    error_fail(file, line, what, ncclGetErrorString(r), ncclGetLastError(NULL), "NCCL_DEBUG=WARN (or INFO) prints NCCL's own account of it");
}
#define ncclCheck(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) nccl_fail(#call, r_, __FILE__, __LINE__); } while (0)
#define cudaOk(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    error_fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_), NULL, "the GPU or driver is in trouble; nvidia-smi tells"); } while (0)

int nccl_built_in(void) { return 1; }

/* ---- the watchdog's hooks (comm/watchdog.h): NCCL never blocks the host, so the watchdog's
 * thread asks the GPU whether each operation's events fired, and on a stall aborts the communicators */
static int event_fired(void *e) { return cudaEventQuery((cudaEvent_t)e) != cudaErrorNotReady; }
static void abort_all(void *ctx) {
    struct NcclState *s = ctx;
    for (int k = 0; k < COMM_P2P_LANES; k++)
        if (s->lane[k]) ncclCommAbort(s->lane[k]);
    for (int g = GROUP_COUNT - 1; g >= 0; g--)
        if (s->group[g]) ncclCommAbort(s->group[g]);
}
/* events on stream st before and after the operation comm.c just recorded */
static void flight_mark(const Comm *c, cudaStream_t st, int after) {
    struct NcclState *s = c->impl->nccl;
    uint64_t id = flight_last();
    int k = (int)(id % FLIGHT_SLOTS);
    cudaOk(cudaEventRecord(after ? s->flight_done[k] : s->flight_start[k], st));
    if (after) flight_device(id, s->flight_start[k], s->flight_done[k]);
}
static void CUDART_CB wait_for_ever(void *arg) { (void)arg; for (;;) pause(); }
static int nccl_fault_hang(const Comm *c) {   /* the comm stream stops: what a collective waiting for a peer that never comes looks like */
    cudaOk(cudaLaunchHostFunc(c->impl->nccl->comm, wait_for_ever, NULL));
    return 1;
}

static ncclDataType_t nccl_type(DType dt) { return dt == DTYPE_FP32 ? ncclFloat32 : dt == DTYPE_BF16 ? ncclBfloat16 : ncclFloat16; }

static void nccl_attach(Comm *c) {
    struct NcclState *s = callocCheck(1, sizeof *s);
    c->impl->nccl = s;
    s->compute = (cudaStream_t)c->be->stream;
    cudaOk(cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking));
    for (int i = 0; i < MAX_OPS; i++) {
        cudaOk(cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming));
        cudaOk(cudaEventCreate(&s->started[i]));
        cudaOk(cudaEventCreate(&s->done[i]));
    }
    for (int i = 0; i < FLIGHT_SLOTS; i++) {
        cudaOk(cudaEventCreateWithFlags(&s->flight_start[i], cudaEventDisableTiming));
        cudaOk(cudaEventCreateWithFlags(&s->flight_done[i], cudaEventDisableTiming));
    }
    cudaOk(cudaEventCreate(&s->period));
    cudaOk(cudaEventRecord(s->period, s->compute));
    uint64_t init = flight_begin("NCCL init", GROUP_WORLD, 0, c->timeout_s, -1);   /* a bootstrap that hangs is a stall too */
    ncclUniqueId id;
    if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    if (c->world_size > 1) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclCheck(ncclCommInitRank(&s->group[GROUP_WORLD], c->world_size, id, c->rank));
    for (int g = 1; g < GROUP_COUNT; g++)
        ncclCheck(ncclCommSplit(s->group[GROUP_WORLD], comm_group_colour(c, g, c->rank), comm_group_rank(c, g), &s->group[g], NULL));
    for (int k = 0; k < COMM_P2P_LANES && c->pp > 1; k++) {   /* every rank, one colour: the world once more a lane */
        ncclCheck(ncclCommSplit(s->group[GROUP_WORLD], 0, c->rank, &s->lane[k], NULL));
        cudaOk(cudaStreamCreateWithFlags(&s->lane_stream[k], cudaStreamNonBlocking));
    }
    flight_end(init);
    flight_set_event_query(event_fired);
    watchdog_on_abort(abort_all, s);
}

static void nccl_free(Comm *c) {
    struct NcclState *s = c->impl->nccl;
    watchdog_on_abort(NULL, NULL);
    flight_set_event_query(NULL);
    cudaStreamSynchronize(s->comm);
    for (int k = 0; k < COMM_P2P_LANES; k++)
        if (s->lane[k]) { cudaStreamSynchronize(s->lane_stream[k]); ncclCommDestroy(s->lane[k]); cudaStreamDestroy(s->lane_stream[k]); }
    for (int g = GROUP_COUNT - 1; g >= 0; g--) ncclCommDestroy(s->group[g]);
    for (int i = 0; i < MAX_OPS; i++) { cudaEventDestroy(s->ready[i]); cudaEventDestroy(s->started[i]); cudaEventDestroy(s->done[i]); }
    for (int i = 0; i < MAX_TIMED; i++)
        if (s->block_start[i]) { cudaEventDestroy(s->block_start[i]); cudaEventDestroy(s->block_end[i]); }
    for (int i = 0; i < FLIGHT_SLOTS; i++) { cudaEventDestroy(s->flight_start[i]); cudaEventDestroy(s->flight_done[i]); }
    cudaEventDestroy(s->period);
    cudaStreamDestroy(s->comm);
    free(s);
    c->impl->nccl = NULL;
}

/* An operation on stream st (the comm stream, or a lane's), after what the compute stream has queued so far. */
static CommHandle begin_on(const Comm *c, cudaStream_t st) {
    struct NcclState *s = c->impl->nccl;
    int h = s->next;
    if (s->active[h] || s->n_since == MAX_OPS) die("internal: more than %d NCCL operations in flight, or between two step-time reports", MAX_OPS);
    s->next = (h + 1) % MAX_OPS;
    s->active[h] = 1;
    s->since[s->n_since++] = h;
    cudaOk(cudaEventRecord(s->ready[h], s->compute));
    cudaOk(cudaStreamWaitEvent(st, s->ready[h], 0));
    cudaOk(cudaEventRecord(s->started[h], st));
    flight_mark(c, st, 0);
    return h;
}
static void end_on(const Comm *c, CommHandle h, cudaStream_t st) {
    cudaOk(cudaEventRecord(c->impl->nccl->done[h], st));
    flight_mark(c, st, 1);
}
static CommHandle begin(const Comm *c) { return begin_on(c, c->impl->nccl->comm); }
static void end(const Comm *c, CommHandle h) { end_on(c, h, c->impl->nccl->comm); }

static int by_start(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}
/* Since the last call: every operation's interval, in ms after `period` (recorded on the compute stream at the
 * last call: every operation since starts after it), blocking ones summed as such, and busy as their union
 * (operations at once — a bucket beside a lane's messages, two lanes — counted once). */
static void nccl_stats(const Comm *c, CommStats *add) {
    struct NcclState *s = c->impl->nccl;
    int n = s->n_since + s->n_timed;
    double *iv = mallocCheck(2 * sizeof(double) * ((size_t)n + 1));
    for (int i = 0; i < n; i++) {
        cudaEvent_t a = i < s->n_since ? s->started[s->since[i]] : s->block_start[i - s->n_since];
        cudaEvent_t b = i < s->n_since ? s->done[s->since[i]] : s->block_end[i - s->n_since];
        float t0 = 0, t1 = 0;
        cudaOk(cudaEventSynchronize(b));
        cudaOk(cudaEventElapsedTime(&t0, s->period, a));
        cudaOk(cudaEventElapsedTime(&t1, s->period, b));
        iv[2 * i] = t0 / 1e3; iv[2 * i + 1] = t1 / 1e3;
        if (i >= s->n_since) add->blocking_s += (t1 - t0) / 1e3;
    }
    qsort(iv, (size_t)n, 2 * sizeof(double), by_start);
    double end = -1e30;
    for (int i = 0; i < n; i++) {   /* the union's length */
        double a = iv[2 * i] > end ? iv[2 * i] : end, b = iv[2 * i + 1];
        if (b > a) add->busy_s += b - a;
        if (b > end) end = b;
    }
    free(iv);
    add->ops += n;
    s->n_since = s->n_timed = 0;
    cudaOk(cudaEventRecord(s->period, s->compute));
}

static void nccl_wait(const Comm *c, CommHandle h) {
    struct NcclState *s = c->impl->nccl;
    cudaOk(cudaStreamWaitEvent(s->compute, s->done[h], 0));
    s->active[h] = 0;
}

static void nccl_progress(const Comm *c) { (void)c; }

/* A blocking collective's time on the compute stream, booked as blocking (the step split's exposed
 * communication) by nccl_stats: events before and after it, while there is room. */
static int block_begin(struct NcclState *s) {
    int k = s->n_timed < MAX_TIMED ? s->n_timed++ : -1;
    if (k >= 0 && !s->block_start[k]) { cudaOk(cudaEventCreate(&s->block_start[k])); cudaOk(cudaEventCreate(&s->block_end[k])); }
    if (k >= 0) cudaOk(cudaEventRecord(s->block_start[k], s->compute));
    return k;
}
static void block_end(struct NcclState *s, int k) {
    if (k >= 0) cudaOk(cudaEventRecord(s->block_end[k], s->compute));
}

static void nccl_allreduce(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    struct NcclState *s = c->impl->nccl;
    int k = block_begin(s);
    flight_mark(c, s->compute, 0);
    ncclCheck(ncclAllReduce(buf, buf, n, nccl_type(dt), ncclSum, s->group[g], s->compute));
    flight_mark(c, s->compute, 1);
    block_end(s, k);
}

static CommHandle nccl_allreduce_start(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    CommHandle h = begin(c);
    ncclCheck(ncclAllReduce(buf, buf, n, nccl_type(dt), ncclSum, c->impl->nccl->group[g], c->impl->nccl->comm));
    end(c, h);
    return h;
}

static int all_equal(const size_t *counts, int n) {
    for (int r = 1; r < n; r++) if (counts[r] != counts[0]) return 0;
    return 1;
}

/* Pieces of unequal size: one reduce (or broadcast) per root, in one NCCL group. On the given stream. */
static void reduce_scatter_on(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt, cudaStream_t st) {
    struct NcclState *s = c->impl->nccl;
    int size = comm_group_size(c, g);
    size_t es = dtype_size(dt), at = 0;
    if (all_equal(counts, size)) {
        ncclCheck(ncclReduceScatter(send, recv, counts[0], nccl_type(dt), ncclSum, s->group[g], st));
        return;
    }
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < size; r++) {
        ncclCheck(ncclReduce((const char *)send + at * es, recv, counts[r], nccl_type(dt), ncclSum, r, s->group[g], st));
        at += counts[r];
    }
    ncclCheck(ncclGroupEnd());
}

static void allgather_on(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt, cudaStream_t st) {
    struct NcclState *s = c->impl->nccl;
    int size = comm_group_size(c, g), me = comm_group_rank(c, g);
    size_t es = dtype_size(dt), at = 0;
    if (all_equal(counts, size)) {
        ncclCheck(ncclAllGather(send, recv, counts[0], nccl_type(dt), s->group[g], st));
        return;
    }
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < size; r++) {
        ncclCheck(ncclBroadcast(r == me ? send : NULL, (char *)recv + at * es, counts[r], nccl_type(dt), r, s->group[g], st));
        at += counts[r];
    }
    ncclCheck(ncclGroupEnd());
}

/* blocking: on the compute stream, like nccl_allreduce (never queued behind a bucket on the comm stream), and timed as it is */
static void nccl_reduce_scatter(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    int k = block_begin(c->impl->nccl);
    reduce_scatter_on(c, g, send, recv, counts, dt, c->impl->nccl->compute);
    block_end(c->impl->nccl, k);
}
static void nccl_allgather(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    int k = block_begin(c->impl->nccl);
    allgather_on(c, g, send, recv, counts, dt, c->impl->nccl->compute);
    block_end(c->impl->nccl, k);
}

static CommHandle nccl_reduce_scatter_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    CommHandle h = begin(c);
    reduce_scatter_on(c, g, send, recv, counts, dt, c->impl->nccl->comm);
    end(c, h);
    return h;
}

static CommHandle nccl_allgather_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    CommHandle h = begin(c);
    allgather_on(c, g, send, recv, counts, dt, c->impl->nccl->comm);
    end(c, h);
    return h;
}

/* The group cut by lane (comm_p2p_lane, of the two ranks' pipeline stages): one NCCL group a lane on the lane's
 * stream, after what the compute stream queued so far (the sends' data); every operation gets its lane's handle,
 * whose wait makes the compute stream wait for that lane's part, and each part is a flight record of its own (the
 * first is comm.c's). With pp = 1 (no lanes) the group goes whole on the comm stream. Peers are world ranks; a
 * pipeline's neighbours are cp*tp world ranks apart. */
static void nccl_p2p_start(const Comm *c, const CommP2P *ops, int n, CommHandle *handles) {
    struct NcclState *s = c->impl->nccl;
    int stride = c->cp * c->tp, me = c->rank / stride, lanes = s->lane[0] ? COMM_P2P_LANES : 1, parts = 0;
    for (int k = 0; k < lanes; k++) {
        cudaStream_t st = s->lane[0] ? s->lane_stream[k] : s->comm;
        ncclComm_t comm = s->lane[0] ? s->lane[k] : s->group[GROUP_WORLD];
        CommHandle h = -1;
        for (int i = 0; i < n; i++) {
            if (lanes > 1 && comm_p2p_lane(me, ops[i].peer / stride, ops[i].is_send) != k) continue;
            if (h < 0) {   /* the lane's part: its own flight record after the first (the watchdog waits for each) */
                if (parts++) flight_begin("pipeline send/recv", FLIGHT_P2P, ops[i].n * dtype_size(ops[i].dt), c->timeout_s, ops[i].peer);
                h = begin_on(c, st);
                ncclCheck(ncclGroupStart());
            }
            if (ops[i].is_send) ncclCheck(ncclSend(ops[i].buf, ops[i].n, nccl_type(ops[i].dt), ops[i].peer, comm, st));
            else ncclCheck(ncclRecv(ops[i].buf, ops[i].n, nccl_type(ops[i].dt), ops[i].peer, comm, st));
            handles[i] = h;
        }
        if (h >= 0) { ncclCheck(ncclGroupEnd()); end_on(c, h, st); }
    }
}

const CommTransport comm_nccl_transport = {
    .name = "nccl", .attach = nccl_attach, .detach = nccl_free, .fault_hang = nccl_fault_hang, .allreduce = nccl_allreduce, .reduce_scatter = nccl_reduce_scatter, .allgather = nccl_allgather,
    .allreduce_start = nccl_allreduce_start,
    .reduce_scatter_start = nccl_reduce_scatter_start, .allgather_start = nccl_allgather_start,
    .wait = nccl_wait, .progress = nccl_progress, .p2p_start = nccl_p2p_start, .stats = nccl_stats,
};

#else   /* no NCCL in this build: MPI carries device buffers too */

int nccl_built_in(void) { return 0; }
static void nccl_attach(Comm *c) { (void)c; die("internal: NCCL asked for in a build without it"); }
const CommTransport comm_nccl_transport = {.name = "nccl", .attach = nccl_attach};
#endif
