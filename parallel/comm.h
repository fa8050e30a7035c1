/* parallel/comm.h — the process grid and its collectives.
 *
 * The idea: world = dp x pp x tp ranks, tp innermost (neighbouring ranks share
 * the fastest links), then pp, then dp. Every collective names the group it
 * runs over; with one rank in a group it returns at once, so single-device code
 * calls the same functions as a 64-GPU run. Today only the one-rank grid exists;
 * the multi-rank transports (NCCL on GPUs, Open MPI on CPUs) plug in here. */
#pragma once
#include <stddef.h>

typedef enum { GROUP_WORLD, GROUP_DP, GROUP_TP, GROUP_PP } CommGroup;

typedef struct {
    int world_size, rank;
    int dp, pp, tp;                 /* grid sizes: world_size = dp * pp * tp */
    int dp_rank, pp_rank, tp_rank;  /* this rank's coordinates */
} Comm;

/* Set up the grid. Dies in words when dp*pp*tp does not match the ranks launched. */
void comm_init(Comm *c, int dp, int pp, int tp);
void comm_free(Comm *c);
/* In-place sum over a group of fp32 values living on the backend's device. */
void comm_allreduce_sum(const Comm *c, CommGroup g, float *buf, size_t n);
/* Sum of one double over a group (host value): loss and grad-norm totals. */
double comm_allreduce_scalar(const Comm *c, CommGroup g, double x);
static inline int comm_group_size(const Comm *c, CommGroup g) {
    return g == GROUP_WORLD ? c->world_size : g == GROUP_DP ? c->dp : g == GROUP_TP ? c->tp : c->pp;
}
