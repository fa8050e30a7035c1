/* comm/comm_impl.h — what comm/comm.c asks of a transport, and the
 * state each keeps. Only comm/comm*.c include it.
 *
 * The idea: comm.c owns the grid and the cases every transport shares (a
 * group of one rank, comm_ablate); a transport only moves bytes over a group
 * of several ranks. MPI always exists when there are several ranks: it
 * carries host values and, when NCCL is not used, device buffers too.
 *
 * comm.c knows a device transport only through its table: it picks one
 * (comm_mpi_transport or comm_nccl_transport), attaches it, calls it and
 * detaches it, and never reads a transport's state (struct MpiState, struct
 * NcclState), which only its own file sees. The one circle between files is
 * the table's: comm.c names the tables and MPI's host functions declared
 * here, and comm_mpi.c / comm_nccl.c fill them with functions that take
 * comm.c's Comm and call back into comm.c (comm_group_size, comm_group_rank)
 * and the flight recorder — a table of functions over a shared type cannot
 * be had without it. The watchdog (watchdog.h) stands beside them: the
 * transports ask it whether it runs and hand it their abort; it never calls
 * a transport. */
#pragma once
#include "comm.h"

typedef struct {
    const char *name;
    void (*attach)(Comm *c);      /* make this transport's state for device buffers of c->be; NULL: nothing to make */
    void (*detach)(Comm *c);      /* give back what attach made (comm_free); NULL: nothing */
    int (*fault_hang)(const Comm *c);   /* comm_fault_hang; NULL: no stream to stop (returns 0) */
    void (*allreduce)(const Comm *c, CommGroup g, void *buf, size_t n, DType dt);
    void (*reduce_scatter)(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
    void (*allgather)(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
    CommHandle (*allreduce_start)(const Comm *c, CommGroup g, void *buf, size_t n, DType dt);
    CommHandle (*reduce_scatter_start)(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
    CommHandle (*allgather_start)(const Comm *c, CommGroup g, const void *send, void *recv, const size_t *counts, DType dt);
    void (*wait)(const Comm *c, CommHandle h);
    void (*progress)(const Comm *c);
    int (*done)(const Comm *c, CommHandle h);   /* seen complete by progress, not yet waited; NULL: the device's events tell (NCCL) */
    void (*p2p_start)(const Comm *c, const CommP2P *ops, int n_ops, CommHandle *handles);   /* comm_p2p_start */
    void (*stats)(const Comm *c, CommStats *add);   /* add what was measured since the last call, reset */
} CommTransport;

struct MpiState;
struct NcclState;
#define COMM_MAX_HANDLES 1024       /* operations in flight at once: handles are below this (a step's sends wait late) */
struct CommImpl {
    const CommTransport *device;   /* moves device buffers: comm_mpi_transport or comm_nccl_transport */
    uint64_t flight[COMM_MAX_HANDLES];   /* the flight recorder's id of each handle's operation (comm/flight.h) */
    char ended[COMM_MAX_HANDLES];        /* its entry was ended by comm_progress (done before its wait) */
    struct MpiState *mpi;          /* communicators of every group, host values (comm_mpi.c) */
    struct NcclState *nccl;        /* comm_nccl.c; NULL when MPI carries device buffers */
};

/* comm_mpi.c */
void mpi_create(Comm *c);                  /* a communicator per group */
void mpi_attach(Comm *c);                  /* device buffers through MPI: staged through host memory unless CUDA-aware */
void mpi_free(Comm *c);
double mpi_reduce_host(const Comm *c, CommGroup g, double x, int max);
void mpi_broadcast_host(const Comm *c, CommGroup g, void *buf, size_t bytes, int root);
void mpi_allgather_host(const Comm *c, CommGroup g, const void *send, void *recv, size_t bytes);
void mpi_send_host(const Comm *c, int peer, const void *buf, size_t bytes, int is_send);
void mpi_barrier(const Comm *c, CommGroup g);
extern const CommTransport comm_mpi_transport;

/* comm_nccl.c */
int nccl_built_in(void);
extern const CommTransport comm_nccl_transport;
