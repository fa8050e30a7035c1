/* doctor/doctor_sweep.c — the doctor's bandwidth sweep and its verdicts
 * (doctor/doctor.h).
 *
 * The idea: measure what training uses, the way nccl-tests reports it. Every
 * operation goes through the comm API (comm_allreduce_start, comm_reduce_
 * scatter_start, comm_allgather_start, comm_p2p — NCCL or MPI, as training
 * would pick) on fp32 buffers of the backend, from 8 B doubling up to the
 * largest size that fits (--max_bytes, memory) and the time budget. For S
 * bytes in t seconds, algbw = S / t and busbw = algbw x 2(n-1)/n for
 * all-reduce, x (n-1)/n for reduce-scatter and all-gather (S: the whole
 * buffer), x 1 for send/recv (a ring: each rank sends S to the next): the
 * busbw of a healthy run approaches the slowest link's rate, so it is set
 * beside the nominal rate of the links between the ranks (doctor_gpu.c,
 * doctor_net.c). Every rank runs the same number of iterations: each count is
 * taken from the slowest rank's warm-up time (comm_max). Then each pair of
 * ranks exchanges one large message both ways alone, for a verdict per pair.
 *
 * Time: the sizes grow while the measured time allows — a row takes about
 * twice the one before it (twice the bytes), so the sweep stops, and says so,
 * before a row that would pass --sweep_seconds. And slow is not stalled: each
 * operation's deadline is --timeout plus ten times what the previous size took,
 * scaled to its bytes, so a 1 GiB all-reduce between CPU ranks on a loaded
 * host is measured, not ended by the watchdog. A row is printed whole, so no
 * message (stderr) ever lands inside one. */
#include "doctor.h"
#include "../comm/launch.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_SENDRECV, N_OPS } Op;
static const char *const op_names[N_OPS] = {"all-reduce", "reduce-scatter", "all-gather", "send/recv"};

static double bus_factor(Op op, int n) {
    if (op == OP_ALLREDUCE) return 2.0 * (n - 1) / n;
    if (op == OP_SENDRECV) return 1.0;
    return (double)(n - 1) / n;
}

/* the bytes an operation of nominal size bytes really moves (whole pieces per rank); 0: it cannot run at that size */
static size_t real_bytes(Op op, size_t bytes, int n) {
    size_t elems = bytes / 4;
    if (op == OP_SENDRECV) return n > 1 ? elems * 4 : 0;
    if (op == OP_ALLREDUCE) return elems * 4;
    return elems / n * n * 4;
}

static void run_once(const Comm *c, Op op, void *a, void *b, size_t bytes, size_t *counts) {
    int n = c->world_size, me = c->rank;
    size_t elems = bytes / 4;
    for (int r = 0; r < n; r++) counts[r] = elems / n;
    if (op == OP_ALLREDUCE) comm_wait(c, comm_allreduce_start(c, GROUP_WORLD, a, elems, DTYPE_FP32));
    else if (op == OP_REDUCE_SCATTER) comm_wait(c, comm_reduce_scatter_start(c, GROUP_WORLD, a, b, counts, DTYPE_FP32));
    else if (op == OP_ALLGATHER) comm_wait(c, comm_allgather_start(c, GROUP_WORLD, a, b, counts, DTYPE_FP32));
    else {
        CommP2P ops[2] = {{1, (me + 1) % n, a, elems, DTYPE_FP32}, {0, (me + n - 1) % n, b, elems, DTYPE_FP32}};
        comm_p2p(c, ops, 2);
    }
}

/* seconds per operation, the slowest rank's */
static double timed(const Comm *c, Op op, void *a, void *b, size_t bytes, size_t *counts, int iters) {
    c->be->synchronize();
    comm_barrier(c, GROUP_WORLD);
    double t0 = now_seconds();
    for (int i = 0; i < iters; i++) run_once(c, op, a, b, bytes, counts);
    c->be->synchronize();
    comm_stats_take(c);   /* the transport's per-operation records, emptied as a training step's report does */
    return comm_max(c, GROUP_WORLD, now_seconds() - t0) / iters;
}

/* LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 (comm/launch.h): what the figures of test hosts on one GPU measured */
static const char *loopback = "loopback sockets (NCCL's network transport on one GPU, each rank a test host): the path works; "
                              "the rate says nothing about NVLink or a real network";

static const char *verdict(double measured, double nominal, LinkKind kind) {
    if (kind == LINK_NET && launch_info()->hosts_on_one_gpu) return loopback;
    if (nominal <= 0) return "no nominal rate to compare with";
    if (kind == LINK_SHM) return "for reference only: CPU ranks share memory, and MPI's sums run on the CPU";
    double r = measured / nominal;
    return r >= 0.6 ? "ok" : r >= 0.25 ? "below what the link should give" : "slow";
}

void doctor_size_text(size_t b, char *buf, size_t size) {
    if (b >= (1u << 30)) snprintf(buf, size, "%zu GiB", b >> 30);
    else if (b >= (1u << 20)) snprintf(buf, size, "%zu MiB", b >> 20);
    else if (b >= 1024) snprintf(buf, size, "%zu KiB", b >> 10);
    else snprintf(buf, size, "%zu B", b);
}

/* Each pair of ranks alone, one message of bytes both ways at once. */
static void pairs(const Comm *c, const DoctorLink *links, void *a, void *b, size_t bytes, DoctorTally *t) {
    int n = c->world_size, me = c->rank, lead = me == 0, count = 0;
    char name[16], sz[32];
    doctor_size_text(bytes, sz, sizeof sz);
    if (lead) printf("\npairs: each pair of ranks alone exchanges %s both ways at once (send/recv), against its link's nominal rate each way\n", sz);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (n > 16 && j != i + 1 && i != 0) continue;   /* many ranks: neighbours and rank 0's pairs */
            double secs = 0;
            const int iters = 3;
            c->be->synchronize();
            comm_barrier(c, GROUP_WORLD);
            if (me == i || me == j) {
                int peer = me == i ? j : i;
                CommP2P ops[2] = {{1, peer, a, bytes / 4, DTYPE_FP32}, {0, peer, b, bytes / 4, DTYPE_FP32}};
                comm_p2p(c, ops, 2);   /* warm-up: connections are made here */
                c->be->synchronize();
                double t0 = now_seconds();
                for (int k = 0; k < iters; k++) comm_p2p(c, ops, 2);
                c->be->synchronize();
                secs = (now_seconds() - t0) / iters;
            }
            comm_stats_take(c);
            secs = comm_max(c, GROUP_WORLD, secs);
            if (!lead) continue;
            const DoctorLink *l = &links[i * n + j];
            double gbs = secs > 0 ? bytes / secs / 1e9 : 0;
            printf("  rank %d <-> rank %d | %-8s | nominal %6.1f GB/s | measured %7.2f GB/s each way", i, j, doctor_link_name(l, name, sizeof name),
                   l->nominal_gbs, gbs);
            if (l->nominal_gbs > 0) printf(" (%3.0f%%)", 100 * gbs / l->nominal_gbs);
            printf(" | verdict: %s\n", l->kind == LINK_SAME_GPU ? "the same GPU: staged through host memory by MPI" : verdict(gbs, l->nominal_gbs, l->kind));
            if (l->nominal_gbs > 0 && l->kind != LINK_SHM && gbs < 0.25 * l->nominal_gbs) count++;
        }
    if (lead && count) doctor_warning(t, "%d pair(s) reach under a quarter of their link's nominal rate: see the pairs above", count);
}

/* The seconds an operation of real bytes should take, from the last size measured (0: none yet). */
static double expected(double last_secs, size_t last_bytes, size_t real) { return last_bytes ? last_secs * real / last_bytes : 0; }

void doctor_sweep(Comm *c, const DoctorLink *links, const SweepOptions *o, DoctorTally *t) {
    int n = c->world_size, lead = c->rank == 0;
    if (n == 1 && !c->impl) {
        if (lead) printf("\nbandwidth sweep: one rank and no transport, so nothing to measure; run it under mpirun -np 2 (or --nproc=2)%s\n",
                         c->be && strcmp(c->be->name, "cpu") ? ", or with --comm_backend=nccl for a one-rank NCCL communicator" : "");
        return;
    }
    size_t max = 8;
    while (max * 2 <= o->max_bytes) max *= 2;
    void *a = c->be->alloc(max, "doctor sweep buffer"), *b = c->be->alloc(max, "doctor sweep buffer");
    size_t *counts = callocCheck(n, sizeof(size_t));
    char sz[32], name[16];
    if (lead) {
        doctor_size_text(max, sz, sizeof sz);
        printf("\nbandwidth sweep: %d rank(s) through %s, fp32 sums, 8 B to %s (--max_bytes, memory) while the next size fits in %g s\n"
               "  (--sweep_seconds); each operation's deadline: --timeout=%g s plus ten times what the size before took\n"
               "  time per operation, then %s in GB/s: algbw = bytes / time; busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n\n"
               "  (reduce-scatter, all-gather), x 1 (send/recv), as nccl-tests reports them\n",
               n, comm_transport_name(c), sz, o->seconds, c->timeout_s, n > 1 ? "busbw" : "algbw (one rank: nothing crosses a link, busbw is 0)");
        printf("  %9s", "bytes");
        for (int k = 0; k < N_OPS; k++) printf(" | %-22s", op_names[k]);
        printf("\n");
    }
    double best[N_OPS] = {0}, last_secs[N_OPS] = {0}, t_start = now_seconds(), base_timeout = c->timeout_s, next_s = 0, spent = 0;
    size_t last_real[N_OPS] = {0}, stopped = 0;
    char row[256];
    for (size_t bytes = 8; bytes <= max; bytes *= 2) {
        double t_row = now_seconds();
        doctor_size_text(bytes, sz, sizeof sz);
        int len = snprintf(row, sizeof row, "  %9s", sz);
        for (int k = 0; k < N_OPS; k++) {
            size_t real = real_bytes((Op)k, bytes, n);
            if (!real) { len += snprintf(row + len, sizeof row - len, " | %-22s", "-"); continue; }
            c->timeout_s = base_timeout + 10 * expected(last_secs[k], last_real[k], real);   /* slow is not stalled */
            double warm = timed(c, (Op)k, a, b, real, counts, 1);
            int iters = warm > 0 ? (int)(0.05 / warm) : 20;
            iters = iters < 1 ? 1 : iters > 20 ? 20 : iters;
            double secs = timed(c, (Op)k, a, b, real, counts, iters);
            last_secs[k] = secs > warm ? secs : warm;
            last_real[k] = real;
            double alg = real / secs / 1e9, shown = n > 1 ? alg * bus_factor((Op)k, n) : alg;
            if (shown > best[k]) best[k] = shown;
            char cell[40];
            snprintf(cell, sizeof cell, "%9.1f us %8.2f", 1e6 * secs, shown);
            len += snprintf(row + len, sizeof row - len, " | %-22s", cell);
        }
        if (lead) { printf("%s\n", row); fflush(stdout); }   /* the whole row at once: an error never lands inside it */
        spent = comm_max(c, GROUP_WORLD, now_seconds() - t_start);
        next_s = 2 * comm_max(c, GROUP_WORLD, now_seconds() - t_row);   /* twice the bytes: about twice the time */
        if (bytes < max && spent + next_s > o->seconds) { stopped = bytes; break; }
    }
    c->timeout_s = base_timeout;
    if (lead && stopped) {
        char next[32];
        doctor_size_text(stopped * 2, next, sizeof next);
        printf("  (stopped after %s: %.1f s spent, and %s would take about %.1f s more, past --sweep_seconds=%g;\n"
               "   a larger --sweep_seconds measures further)\n", sz, spent, next, next_s, o->seconds);
    }
    if (lead) {   /* the slowest link between neighbours bounds a ring */
        double nominal = 0;
        int weakest = -1;
        for (int i = 0; i < n && n > 1; i++) {
            const DoctorLink *l = &links[i * n + (i + 1) % n];
            if (l->nominal_gbs > 0 && (weakest < 0 || l->nominal_gbs < nominal)) { nominal = l->nominal_gbs; weakest = i; }
        }
        if (n == 1) printf("  verdict: one rank: the sweep checks the path works; the algbw above is the device's own copy rate\n");
        else if (launch_info()->hosts_on_one_gpu) printf("  verdict: every collective above measured %s\n", loopback);
        else if (weakest < 0) printf("  verdict: no nominal rate known for these links; the busbw above is what training gets\n");
        else {
            const DoctorLink *l = &links[weakest * n + (weakest + 1) % n];
            printf("  the slowest link between neighbouring ranks: rank %d <-> %d, %s, nominal %.1f GB/s each way%s\n", weakest, (weakest + 1) % n,
                   doctor_link_name(l, name, sizeof name), nominal, l->kind == LINK_SHM ? " (a memcpy on this host)" : "");
            for (int k = 0; k < N_OPS; k++)
                printf("  verdict: %-14s peaks at %8.2f GB/s busbw, %3.0f%% of it: %s\n", op_names[k], best[k], 100 * best[k] / nominal,
                       verdict(best[k], nominal, l->kind));
            if (best[OP_ALLREDUCE] < 0.25 * nominal && l->kind != LINK_SHM)
                doctor_warning(t, "all-reduce reaches %.0f%% of the slowest link's nominal rate: check the pairs below, NCCL_P2P_DISABLE, "
                                  "NCCL_SHM_DISABLE, and that no other job shares the links", 100 * best[OP_ALLREDUCE] / nominal);
        }
    }
    if (o->pairs && n > 1) {   /* as large as the sweep went, at most 64 MiB; its deadline from the sweep's send/recv */
        size_t reached = stopped ? stopped : max, pair = reached < (64u << 20) ? reached : (64u << 20);
        c->timeout_s = base_timeout + 10 * expected(last_secs[OP_SENDRECV], last_real[OP_SENDRECV], pair);
        pairs(c, links, a, b, pair, t);
        c->timeout_s = base_timeout;
    }
    free(counts);
    c->be->free(a);
    c->be->free(b);
}
