/* comm/comm.h — the process grid, its groups, and every collective llm3d uses.
 *
 * The idea: world = dp x pp x cp x tp ranks, tp innermost (neighbouring ranks
 * share the fastest links), then cp (context parallel: its ranks exchange K/V
 * every layer, so they want the next-fastest links), then pp, then dp:
 *     rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank.
 * Every collective names the group it runs over; with one rank in a group it
 * returns at once, so single-device code calls the same functions as a 64-GPU
 * run and the one-rank grid costs nothing. Two transports carry the bytes:
 * NCCL when each rank has its own GPU, Open MPI otherwise (CPU ranks, and
 * ranks sharing a GPU, staged through host memory unless MPI is CUDA-aware).
 * Host-side values (loss sums, norms, checkpoint pieces) always go through MPI,
 * which also launches and bootstraps the ranks (comm/launch.h).
 *
 * Buffers passed to the device collectives live on the Backend the grid was
 * attached to (comm_attach); their dtype is given per call. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../kernels/dtype.h"

struct Backend;

/* GROUP_MP: tp x pp, the ranks that together hold one copy of the weights (one cp rank's);
 * GROUP_CP: the ranks that split one sequence (docs/context-parallel.md);
 * GROUP_DPCP: dp x cp, the ranks holding the same weights: gradients are summed and ZeRO shards over it */
typedef enum { GROUP_WORLD, GROUP_DP, GROUP_TP, GROUP_PP, GROUP_MP, GROUP_CP, GROUP_DPCP, GROUP_COUNT } CommGroup;
enum { COMM_AUTO, COMM_NCCL, COMM_MPI };   /* config key comm_backend: auto|nccl|mpi */
/* The layout keys' largest values: dp's, and pp's, cp's and tp's (train/config.c's rows, and the doctor's same keys) */
#define COMM_MAX_DP 65536
#define COMM_MAX_AXIS 1024
extern const char *const comm_group_names[GROUP_COUNT];

typedef struct CommImpl CommImpl;   /* the transport's state (comm/comm_impl.h) */

typedef struct {
    int world_size, rank;            /* from the launcher */
    int local_rank, local_size;      /* ranks on this host: the GPU of a rank is its local rank */
    int dp, pp, cp, tp;              /* grid sizes: world_size = dp * pp * cp * tp */
    int dp_rank, pp_rank, cp_rank, tp_rank;   /* this rank's coordinates */
    int transport;                   /* COMM_NCCL or COMM_MPI (COMM_AUTO: one rank, no transport) */
    int ablate;                      /* comm_ablate=1: every device collective is a no-op of the same shape (results wrong) */
    double timeout_s;                /* a collective not done within this is a stall (0 = wait for ever) */
    const struct Backend *be;        /* where device buffers live */
    CommImpl *impl;
} Comm;

/* Set up the grid over the ranks the launcher started (launch_init must have
 * run). Dies in words when dp*pp*cp*tp differs from them, naming the launch line
 * that would match. With device_cuda it picks this rank's GPU (its local rank)
 * and the transport: comm_backend nccl needs a GPU per rank (refused in words
 * naming both counts otherwise); auto takes NCCL when each rank has its own
 * GPU and NCCL is built in, else MPI. */
void comm_init(Comm *c, int dp, int pp, int cp, int tp, int comm_backend, int device_cuda);
/* The one-rank grid, whatever launched this process: for tools and tests that run one model alone. */
void comm_init_one(Comm *c);
/* The same grid, shared and read-only: what a model created with no Comm uses (model_create). */
const Comm *comm_one(void);
/* Create the transport's communicators and buffers for device memory of be. */
void comm_attach(Comm *c, const struct Backend *be);
void comm_free(Comm *c);
int comm_group_size(const Comm *c, CommGroup g);
int comm_group_rank(const Comm *c, CommGroup g);
/* The ranks holding the same weights, over which gradients are summed and ZeRO shards: dp x cp, which is the
 * dp group itself when cp = 1 (a run without cp names, splits and records exactly the groups it did before). */
static inline CommGroup comm_replica_group(const Comm *c) { return c->cp > 1 ? GROUP_DPCP : GROUP_DP; }
/* World rank of the grid point (dp_rank, pp_rank, cp_rank, tp_rank). */
int comm_world_rank(const Comm *c, int dp_rank, int pp_rank, int cp_rank, int tp_rank);
/* Which group g world rank r belongs to: equal for the members of one group, different across groups
 * (the transports split their communicators by it). */
int comm_group_colour(const Comm *c, CommGroup g, int r);
/* The world ranks of r's group of g, ascending (the group's own rank order), into out (room for comm_group_size);
 * returns how many: what the watchdog names a stalled group by and the doctor checks a gather against. */
int comm_group_members(const Comm *c, CommGroup g, int r, int *out);
/* "mpi", "nccl" or "none". */
const char *comm_transport_name(const Comm *c);
/* 1 when this build has the NCCL transport. */
int comm_nccl_built_in(void);

/* ---- device buffers, blocking: done when they return (on a GPU: ordered before later work on the compute stream) */
/* In-place sum of n values of dtype dt over the group. */
void comm_allreduce(const Comm *c, CommGroup g, void *buf, size_t n, DType dt);
/* The blocking forms of comm_reduce_scatter_start and comm_allgather_start
 * below: tensor parallelism's sequence-parallel operators, and the
 * cross-entropy's statistics. The reduce-scatter's send and recv are
 * distinct; the all-gather may run in place, with send my own piece of recv. */
void comm_reduce_scatter(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
void comm_allgather(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);

/* ---- device buffers, started now and finished by comm_wait: reductions that overlap the backward */
typedef int CommHandle;
/* In-place sum. */
CommHandle comm_allreduce_start(const Comm *c, CommGroup g, void *buf, size_t n, DType dt);
/* send holds the group's pieces back to back (counts[r] values for group rank r);
 * recv (counts[my rank]) gets the sum of my piece. */
CommHandle comm_reduce_scatter_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
/* send (counts[my rank]) goes to every rank's recv at my piece's place (pieces back to back). */
CommHandle comm_allgather_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
/* Finish an operation: afterwards its results are visible to the compute stream. */
void comm_wait(const Comm *c, CommHandle h);
/* Let operations in flight progress (MPI moves nonblocking collectives only inside MPI calls). */
void comm_progress(const Comm *c);

/* ---- device buffers, point to point: one group of sends and receives posted
 * together (so no order between them can deadlock) */
typedef struct { int is_send, peer /* world rank */; void *buf; size_t n; DType dt; } CommP2P;
/* Finished on return. */
void comm_p2p(const Comm *c, const CommP2P *ops, int n_ops);
/* Posted now, finished by comm_wait(handles[i]) for each operation: the host goes on at once. A send's buffer
 * must not change, and a receive's must not be read, before its wait. MPI gives each operation a handle of its
 * own, done when its partner has posted the other side; NCCL one handle for the operations of the group in one
 * lane (comm_p2p_lane: one launch on that lane's stream, after the lane's groups posted before it, a FIFO), and
 * its wait makes the compute stream wait, never the host. Waiting one handle twice is allowed while no later
 * operation was started on it. */
void comm_p2p_start(const Comm *c, const CommP2P *ops, int n_ops, CommHandle *handles);
/* The lane a message between pipeline stages me and peer travels in on NCCL (a communicator and a stream each,
 * comm/comm_nccl.c): its direction (to the higher stage or the lower) and the parity of the lower of the two, the
 * same at both ends. A stage's four kinds of message (to and from the stage before it, to and from the one after)
 * are in four lanes, so none queues behind another: on one shared stream a zbv stage's gradient going back waits
 * for an activation coming in that its partner has not sent yet (parallel/schedule_check.c simulates both). me and
 * peer number the stages so that neighbours differ by one. */
#define COMM_P2P_LANES 4
static inline int comm_p2p_lane(int me, int peer, int is_send) {
    int up = is_send ? peer > me : peer < me, low = me < peer ? me : peer;
    return 2 * up + low % 2;
}

/* ---- what the transport did since the last call (the step-time split) */
typedef struct {
    double busy_s;          /* seconds any device collective was in flight (operations at once counted once) */
    double blocking_s;      /* seconds in blocking device collectives (the tensor-parallel sums inside the model) */
    int ops;                /* operations started */
} CommStats;
/* The figures since the last call, then zeroed. On a GPU, call after the device finished the step. */
CommStats comm_stats_take(const Comm *c);

/* ---- host values, always through MPI */
double comm_sum(const Comm *c, CommGroup g, double x);
double comm_max(const Comm *c, CommGroup g, double x);
void comm_broadcast_host(const Comm *c, CommGroup g, void *buf, size_t bytes, int root);
/* bytes from every rank of the group, in group-rank order, into recv (group size * bytes) */
void comm_allgather_host(const Comm *c, CommGroup g, const void *send, void *recv, size_t bytes);
void comm_send_host(const Comm *c, int peer, const void *buf, size_t bytes);
void comm_recv_host(const Comm *c, int peer, void *buf, size_t bytes);
void comm_barrier(const Comm *c, CommGroup g);

/* ---- tests only (config key fault=stall on a GPU rank of the NCCL transport): this rank's
 * comm stream stops for ever (a host function that never returns is queued on it), so its
 * device collectives never start — what a collective waiting for a peer that never comes
 * looks like to the watchdog, while the rest of the step runs on.
 * Returns 0, doing nothing, where there is no such stream (MPI transport, CPU). */
int comm_fault_hang(const Comm *c);
