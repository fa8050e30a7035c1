/* comm/comm.c — the grid (coordinates, groups, the choice of transport)
 * and the one door to the collectives: a group of one rank returns at once,
 * comm_ablate turns device collectives into no-ops, the rest goes to the
 * transport (comm/comm_impl.h) — and into the flight recorder
 * (comm/flight.h), which the watchdog reads for deadlines. */
#include "comm_impl.h"
#include "flight.h"
#include "watchdog.h"
#include "launch.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const comm_group_names[GROUP_COUNT] = {"world", "dp", "tp", "pp", "tp x pp", "cp", "dp x cp"};

int comm_world_rank(const Comm *c, int dp_rank, int pp_rank, int cp_rank, int tp_rank) {
    return ((dp_rank * c->pp + pp_rank) * c->cp + cp_rank) * c->tp + tp_rank;
}

/* The world rank of r's grid point with the coordinates the group runs along set to 0: its members share it. */
int comm_group_colour(const Comm *c, CommGroup g, int r) {
    int t = r % c->tp, k = r / c->tp % c->cp, p = r / (c->tp * c->cp) % c->pp, d = r / (c->tp * c->cp * c->pp);
    switch (g) {
    case GROUP_WORLD: return 0;
    case GROUP_DP: return comm_world_rank(c, 0, p, k, t);
    case GROUP_TP: return comm_world_rank(c, d, p, k, 0);
    case GROUP_PP: return comm_world_rank(c, d, 0, k, t);
    case GROUP_MP: return comm_world_rank(c, d, 0, k, 0);
    case GROUP_CP: return comm_world_rank(c, d, p, 0, t);
    default: return comm_world_rank(c, 0, p, 0, t);   /* GROUP_DPCP */
    }
}

int comm_group_members(const Comm *c, CommGroup g, int r, int *out) {
    int n = 0, colour = comm_group_colour(c, g, r);
    for (int q = 0; q < c->world_size; q++)
        if (comm_group_colour(c, g, q) == colour) out[n++] = q;
    return n;
}

int comm_group_size(const Comm *c, CommGroup g) {
    switch (g) {
    case GROUP_WORLD: return c->world_size;
    case GROUP_DP: return c->dp;
    case GROUP_TP: return c->tp;
    case GROUP_PP: return c->pp;
    case GROUP_MP: return c->tp * c->pp;
    case GROUP_CP: return c->cp;
    default: return c->dp * c->cp;   /* GROUP_DPCP */
    }
}

int comm_group_rank(const Comm *c, CommGroup g) {
    switch (g) {
    case GROUP_WORLD: return c->rank;
    case GROUP_DP: return c->dp_rank;
    case GROUP_TP: return c->tp_rank;
    case GROUP_PP: return c->pp_rank;
    case GROUP_MP: return c->pp_rank * c->tp + c->tp_rank;
    case GROUP_CP: return c->cp_rank;
    default: return c->dp_rank * c->cp + c->cp_rank;   /* GROUP_DPCP */
    }
}

const char *comm_transport_name(const Comm *c) {
    return c->transport == COMM_NCCL ? "nccl" : c->transport == COMM_MPI ? "mpi" : "none";
}

/* LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 (comm/launch.h): refused in words where it cannot work, said once where it runs */
static void hosts_on_one_gpu(const LaunchInfo *li, int comm_backend, int device_cuda) {
    const char *what = LAUNCH_HOSTS_ON_ONE_GPU_ENV "=1 puts every rank on GPU 0 and joins them through NCCL, each rank standing for a host";
    launch_errors_rank0_only(1);   /* the same on every rank: launch_check_same_config compares the switch */
    if (!device_cuda)
        die("%s, but device=cpu\n  hint: use --device=cuda on a machine with a GPU, or unset " LAUNCH_HOSTS_ON_ONE_GPU_ENV
            " for CPU ranks (they talk through MPI)", what);
    if (!nccl_built_in())
        die("%s, but this build of llm3d has no NCCL\n  hint: install NCCL (libnccl-dev, or the one in the CUDA toolkit) and "
            "rebuild with make, or unset " LAUNCH_HOSTS_ON_ONE_GPU_ENV " to let the ranks share the GPU through MPI", what);
    if (comm_backend == COMM_MPI)
        die("%s, but comm_backend=mpi\n  hint: use --comm_backend=auto or nccl with it, or unset it to share the GPU through MPI", what);
    launch_errors_rank0_only(0);
    if (li->rank == 0) {
        printf("comm  | " LAUNCH_HOSTS_ON_ONE_GPU_ENV "=1, a test setup: %d rank(s) on GPU 0, each standing for a host of its own "
               "(NCCL_HOSTID), joined by NCCL's network transport (NCCL_NET=%s, NCCL_SOCKET_IFNAME=%s); every NCCL code path runs, the "
               "multi-node one included, and its speed says nothing about real hosts or NVLink\n", li->world, getenv("NCCL_NET"),
               getenv("NCCL_SOCKET_IFNAME"));
        fflush(stdout);
    }
}

void comm_init(Comm *c, int dp, int pp, int cp, int tp, int comm_backend, int device_cuda) {
    memset(c, 0, sizeof *c);
    const LaunchInfo *li = launch_info();
    int rank0_only = die_get_context().rank0_only;
    if (li->hosts_on_one_gpu) hosts_on_one_gpu(li, comm_backend, device_cuda);
    launch_errors_rank0_only(rank0_only);
    c->world_size = li->world; c->rank = li->rank;
    c->local_rank = li->local_rank; c->local_size = li->local_size;
    c->dp = dp; c->pp = pp; c->cp = cp; c->tp = tp;
    int want = dp * pp * cp * tp;
    if (want != c->world_size) {
        launch_errors_rank0_only(1);
        char layout[96] = "dp*pp*tp", product[96];   /* the layout's product as written, cp named only where it is used */
        if (cp > 1) snprintf(layout, sizeof layout, "dp*pp*cp*tp");
        if (cp > 1) snprintf(product, sizeof product, "%d*%d*%d*%d", dp, pp, cp, tp);
        else snprintf(product, sizeof product, "%d*%d*%d", dp, pp, tp);
        if (c->world_size == 1)
            die("%s = %s = %d ranks asked for, but this process runs alone\n"
                "  hint: start the ranks with `mpirun -np %d build/train ...`, or add --nproc=%d", layout, product, want, want, want);
        die("%s = %s = %d, but %d ranks were launched\n"
            "  hint: launch this layout with `mpirun -np %d build/train ...`, or choose %s whose product is %d",
            layout, product, want, c->world_size, want, cp > 1 ? "dp, pp, cp, tp" : "dp, pp, tp", c->world_size);
    }
    c->tp_rank = c->rank % tp;
    c->cp_rank = (c->rank / tp) % cp;
    c->pp_rank = (c->rank / (tp * cp)) % pp;
    c->dp_rank = c->rank / (tp * cp * pp);
    if (c->world_size > 1) c->impl = callocCheck(1, sizeof(CommImpl));
    if (device_cuda && c->world_size == 1 && comm_backend == COMM_NCCL) {
        /* one rank asking for NCCL: a communicator of one, so the whole NCCL path (comm stream,
         * events, bucketed reductions) runs and can be checked and timed on one GPU */
        if (!nccl_built_in()) die("comm_backend=nccl, but this build of llm3d has no NCCL\n"
                                  "  hint: install NCCL (libnccl-dev, or the one in the CUDA toolkit) and rebuild");
        if (backend_cuda_device_count() > 0) backend_cuda_use_device(0);
        c->impl = callocCheck(1, sizeof(CommImpl));
        c->transport = COMM_NCCL;
        return;
    }
    if (device_cuda) {
        int gpus = backend_cuda_device_count();
        if (gpus > 0) backend_cuda_use_device(c->local_rank % gpus);
        if (c->world_size > 1) {
            int own_gpu = gpus > 0 && c->local_size <= gpus;
            int nccl = comm_backend == COMM_NCCL || (comm_backend == COMM_AUTO && own_gpu && nccl_built_in());
            if (nccl && tp > gpus && c->rank == 0 && !li->hosts_on_one_gpu)   /* tp ranks are neighbours: a group wider than a host's GPUs spans hosts */
                fprintf(stderr, "warning: tp=%d, but this host has %d GPU(s): tensor parallelism across hosts is slow. Its collectives "
                        "(two per layer forward, two backward) wait on the critical path, and across hosts they cross the network, an "
                        "order of magnitude slower than NVLink inside one\n  hint: keep tp within the GPUs of one host and scale across "
                        "hosts with dp or pp\n", tp, gpus);
            if (comm_backend == COMM_NCCL && !nccl_built_in()) {
                launch_errors_rank0_only(1);
                die("comm_backend=nccl, but this build of llm3d has no NCCL\n"
                    "  hint: install NCCL (libnccl-dev, or the one in the CUDA toolkit) and rebuild, or use --comm_backend=mpi");
            }
            if (comm_backend == COMM_NCCL && !own_gpu) {
                launch_errors_rank0_only(1);
                die("comm_backend=nccl needs a GPU per rank, but %d ranks run on this host and it has %d visible GPU(s)\n"
                    "  hint: launch at most %d ranks per host, or --comm_backend=mpi to let ranks share a GPU (slow: for testing)",
                    c->local_size, gpus, gpus);
            }
            c->transport = comm_backend == COMM_MPI || !own_gpu || !nccl_built_in() ? COMM_MPI : COMM_NCCL;
            if (c->transport == COMM_MPI && gpus > 0 && c->local_size > gpus && c->rank == 0)
                printf("comm  | %d ranks share %d GPU(s) on this host: collectives go through MPI and host memory (a test setup, not a fast one)\n",
                       c->local_size, gpus);
        }
    } else if (c->world_size > 1) {
        if (comm_backend == COMM_NCCL) {
            launch_errors_rank0_only(1);
            die("comm_backend=nccl moves GPU memory, but device=cpu\n  hint: use --comm_backend=auto or mpi for CPU ranks");
        }
        c->transport = COMM_MPI;
    }
    if (c->world_size > 1) mpi_create(c);
}

const Comm *comm_one(void) {
    static const Comm one = {.world_size = 1, .local_size = 1, .dp = 1, .pp = 1, .cp = 1, .tp = 1};
    return &one;
}

void comm_init_one(Comm *c) { *c = *comm_one(); }

void comm_attach(Comm *c, const Backend *be) {
    c->be = be;
    if (!c->impl) return;   /* one rank, no transport */
    if (c->world_size > 1) mpi_attach(c);   /* host values always go through MPI: it learns where device buffers live */
    c->impl->device = c->transport == COMM_NCCL ? &comm_nccl_transport : &comm_mpi_transport;
    if (c->impl->device->attach) c->impl->device->attach(c);
}

void comm_free(Comm *c) {
    watchdog_stop(c);
    if (c->impl) {
        if (c->impl->device && c->impl->device->detach) c->impl->device->detach(c);
        if (c->world_size > 1) mpi_free(c);   /* comm_init made MPI's communicators for every run of several ranks */
        free(c->impl);
    }
    memset(c, 0, sizeof *c);
}

/* ---- device buffers */

/* A group of one rank has nothing to do — except the data-parallel and world groups of a one-rank run that asked
 * for a transport even so (comm_backend=nccl under mpirun -np 1, or the doctor): the gradient buckets and the
 * doctor's sweep go through NCCL, so that path runs and is timed on one GPU. The tp and pp groups of one (the tp
 * sums of every layer) cost nothing, in a run of one rank or of many. */
static int alone(const Comm *c, CommGroup g) {
    int exercised = c->impl && c->world_size == 1 && (g == GROUP_DP || g == GROUP_WORLD);
    return comm_group_size(c, g) == 1 && !exercised;
}
static int skip(const Comm *c, CommGroup g) { return alone(c, g) || c->ablate; }

/* The flight recorder's entry of an operation going out, with this communicator's deadline. */
static uint64_t rec(const Comm *c, const char *op, int g, size_t bytes, int peer) { return flight_begin(op, g, bytes, c->timeout_s, peer); }
static CommHandle rec_handle(const Comm *c, CommHandle h, uint64_t id) {
    if (h >= 0) { c->impl->flight[h] = id; c->impl->ended[h] = 0; }
    else flight_end(id);
    return h;
}

void comm_allreduce(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    if (skip(c, g) || n == 0) return;
    uint64_t id = rec(c, "all-reduce", g, n * dtype_size(dt), -1);
    c->impl->device->allreduce(c, g, buf, n, dt);
    flight_end(id);
}

static size_t total(const Comm *c, CommGroup g, const size_t *counts, DType dt);

/* The blocking forms go into the flight recorder too, so the watchdog sees a peer that never comes to one
 * (sequence parallelism's gathers, context parallelism's K/V all-gather and dK/dV reduce-scatter). */
void comm_reduce_scatter(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    if (comm_group_size(c, g) == 1) {   /* my piece is the whole sum */
        if (send != recv && counts[0]) c->be->copy(recv, send, counts[0] * dtype_size(dt));
        return;
    }
    if (c->ablate) return;
    uint64_t id = rec(c, "reduce-scatter", g, total(c, g, counts, dt), -1);
    c->impl->device->reduce_scatter(c, g, send, recv, counts, dt);
    flight_end(id);
}

void comm_allgather(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    if (comm_group_size(c, g) == 1) {
        if (send != recv && counts[0]) c->be->copy(recv, send, counts[0] * dtype_size(dt));
        return;
    }
    if (c->ablate) return;
    uint64_t id = rec(c, "all-gather", g, total(c, g, counts, dt), -1);
    c->impl->device->allgather(c, g, send, recv, counts, dt);
    flight_end(id);
}

CommHandle comm_allreduce_start(const Comm *c, CommGroup g, void *buf, size_t n, DType dt) {
    if (skip(c, g) || n == 0) return -1;
    uint64_t id = rec(c, "all-reduce", g, n * dtype_size(dt), -1);
    return rec_handle(c, c->impl->device->allreduce_start(c, g, buf, n, dt), id);
}

static size_t total(const Comm *c, CommGroup g, const size_t *counts, DType dt) {
    size_t t = 0;
    for (int r = 0; r < comm_group_size(c, g); r++) t += counts[r];
    return t * dtype_size(dt);
}

CommHandle comm_reduce_scatter_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    if (alone(c, g)) {   /* my piece is the whole sum */
        if (send != recv && counts[0]) c->be->copy(recv, send, counts[0] * dtype_size(dt));
        return -1;
    }
    if (c->ablate) return -1;
    uint64_t id = rec(c, "reduce-scatter", g, total(c, g, counts, dt), -1);
    return rec_handle(c, c->impl->device->reduce_scatter_start(c, g, send, recv, counts, dt), id);
}

CommHandle comm_allgather_start(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt) {
    if (alone(c, g)) {
        if (send != recv && counts[0]) c->be->copy(recv, send, counts[0] * dtype_size(dt));
        return -1;
    }
    if (c->ablate) return -1;
    uint64_t id = rec(c, "all-gather", g, total(c, g, counts, dt), -1);
    return rec_handle(c, c->impl->device->allgather_start(c, g, send, recv, counts, dt), id);
}

/* A send/recv group's flight entry is shared by its operations' handles (MPI: one each): it ends with the last wait. */
void comm_wait(const Comm *c, CommHandle h) {
    if (h < 0) return;
    c->impl->device->wait(c, h);
    uint64_t id = c->impl->flight[h];
    c->impl->flight[h] = 0;
    c->impl->ended[h] = 0;
    for (int k = 0; k < COMM_MAX_HANDLES; k++)
        if (id && c->impl->flight[k] == id && !c->impl->ended[k]) return;
    if (id) flight_end(id);   /* (again, harmlessly, if comm_progress ended it) */
}

/* A handle's flight entry (shared by a send/recv group's messages) ends once every handle holding it is done: at
 * their waits, or earlier where the transport sees them complete (MPI), so a send waited for only at the end of the
 * step does not look stalled to the watchdog meanwhile. */
static void end_if_all_done(const Comm *c, uint64_t id) {
    CommImpl *x = c->impl;
    for (int k = 0; k < COMM_MAX_HANDLES; k++)
        if (x->flight[k] == id && !x->ended[k]) return;
    flight_end(id);
}

void comm_progress(const Comm *c) {
    if (!c->impl || !c->impl->device) return;
    CommImpl *x = c->impl;
    x->device->progress(c);
    if (!x->device->done) return;
    for (int h = 0; h < COMM_MAX_HANDLES; h++)
        if (x->flight[h] && !x->ended[h] && x->device->done(c, h)) {
            x->ended[h] = 1;
            end_if_all_done(c, x->flight[h]);
        }
}

void comm_p2p_start(const Comm *c, const CommP2P *ops, int n_ops, CommHandle *handles) {
    for (int i = 0; i < n_ops; i++) handles[i] = -1;
    if (c->world_size == 1 || c->ablate || n_ops == 0) return;
    size_t bytes = 0;
    for (int i = 0; i < n_ops; i++) bytes += ops[i].n * dtype_size(ops[i].dt);
    uint64_t id = rec(c, "pipeline send/recv", FLIGHT_P2P, bytes, ops[0].peer);
    c->impl->device->p2p_start(c, ops, n_ops, handles);
    int any = 0;
    for (int i = 0; i < n_ops; i++)
        if (handles[i] >= 0) { c->impl->flight[handles[i]] = id; c->impl->ended[handles[i]] = 0; any = 1; }
    if (!any) flight_end(id);
}

void comm_p2p(const Comm *c, const CommP2P *ops, int n_ops) {
    CommHandle h[64];
    if (n_ops > 64) die("internal: more than 64 sends and receives in one group");
    comm_p2p_start(c, ops, n_ops, h);
    for (int i = 0; i < n_ops; i++) comm_wait(c, h[i]);
}

CommStats comm_stats_take(const Comm *c) {
    CommStats s = {0};
    if (c->impl && c->impl->device && c->impl->device->stats) c->impl->device->stats(c, &s);
    return s;
}

/* ---- host values */

static double reduce_host(const Comm *c, CommGroup g, double x, int max) {
    if (comm_group_size(c, g) == 1) return x;
    uint64_t id = rec(c, max ? "a host max" : "a host sum", g, sizeof x, -1);
    x = mpi_reduce_host(c, g, x, max);
    flight_end(id);
    return x;
}
double comm_sum(const Comm *c, CommGroup g, double x) { return reduce_host(c, g, x, 0); }
double comm_max(const Comm *c, CommGroup g, double x) { return reduce_host(c, g, x, 1); }

void comm_broadcast_host(const Comm *c, CommGroup g, void *buf, size_t bytes, int root) {
    if (comm_group_size(c, g) == 1) return;
    uint64_t id = rec(c, "a broadcast", g, bytes, -1);
    mpi_broadcast_host(c, g, buf, bytes, root);
    flight_end(id);
}

void comm_allgather_host(const Comm *c, CommGroup g, const void *send, void *recv, size_t bytes) {
    if (comm_group_size(c, g) == 1) { memmove(recv, send, bytes); return; }
    uint64_t id = rec(c, "a host all-gather", g, bytes * comm_group_size(c, g), -1);
    mpi_allgather_host(c, g, send, recv, bytes);
    flight_end(id);
}

static void send_host(const Comm *c, int peer, void *buf, size_t bytes, int is_send) {
    uint64_t id = rec(c, is_send ? "a host send" : "a host receive", FLIGHT_P2P, bytes, peer);
    mpi_send_host(c, peer, buf, bytes, is_send);
    flight_end(id);
}
void comm_send_host(const Comm *c, int peer, const void *buf, size_t bytes) { send_host(c, peer, (void *)buf, bytes, 1); }
void comm_recv_host(const Comm *c, int peer, void *buf, size_t bytes) { send_host(c, peer, buf, bytes, 0); }

void comm_barrier(const Comm *c, CommGroup g) {
    if (comm_group_size(c, g) == 1) return;
    uint64_t id = rec(c, "a barrier", g, 0, -1);
    mpi_barrier(c, g);
    flight_end(id);
}

int comm_fault_hang(const Comm *c) {
    return c->impl && c->impl->device && c->impl->device->fault_hang ? c->impl->device->fault_hang(c) : 0;
}

int comm_nccl_built_in(void) { return nccl_built_in(); }
