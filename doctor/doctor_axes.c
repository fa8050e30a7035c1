/* doctor/doctor_axes.c — the doctor's check of the grid's groups, axis by
 * axis (doctor/doctor.h).
 *
 * The idea: training runs most of its collectives over the groups of the grid,
 * not over the world: tensor parallelism's sums in every layer (tp), context
 * parallelism's K/V gathers (cp), the gradients' sum over the replicas (dp, or
 * dp x cp with cp), the loss and norm sums (pp, tp x pp). Each group is a
 * communicator of its own, split by comm_group_colour; a wrong split, a group
 * that cannot form, or a link that only some ranks cross shows there and not
 * in the world's sweep. So with the layout keys the doctor builds the grid as
 * training does (comm_init, the same keys and bounds) and, for every axis whose
 * groups have more than one rank, runs on all of that axis's groups at once,
 * as training does:
 *   - a device all-reduce whose result is known: each rank gives its world
 *     rank + 1, and the sum due is that of the members the grid formula gives;
 *   - a device all-gather of each rank's world rank: the members, in group
 *     order, as the formula has them;
 *   - the host sum (MPI) over the same group;
 *   - timed: the all-reduce at 64 KiB and at the large size, the all-gather at
 *     the large size; the slowest group's busbw (nccl-tests' terms).
 * Rank 0 prints one line per axis (its groups' members, the rates, OK or
 * FAIL); a FAIL is a PROBLEM naming the axis. An operation that never ends is
 * the watchdog's (--timeout): it ends every rank naming the group, and the end
 * hook here adds the axis that was being checked. */
#include "doctor.h"
#include "../comm/launch.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_N 16                     /* values of the checked all-reduce */
#define SMALL_BYTES ((size_t)64 << 10)

typedef struct { CommGroup g; const char *key; } Axis;
static const Axis axes[] = {{GROUP_TP, "tp"}, {GROUP_CP, "cp"}, {GROUP_PP, "pp"}, {GROUP_DP, "dp"}, {GROUP_DPCP, "dpcp"}, {GROUP_MP, "tppp"}};
#define N_AXES (int)(sizeof axes / sizeof axes[0])

/* Checked: groups of more than one rank; dp x cp only with cp (else it is dp's), tp x pp only with both (else tp's or pp's). */
static int checked(const Comm *c, CommGroup g) {
    if (comm_group_size(c, g) < 2) return 0;
    if (g == GROUP_DPCP) return c->cp > 1;
    if (g == GROUP_MP) return c->tp > 1 && c->pp > 1;
    return 1;
}

void doctor_axes_fault(const char *spec, DoctorFault *f) {
    char kind[16] = "", axis[16] = "";
    int rank = -1, used = 0;
    memset(f, 0, sizeof *f);
    if (sscanf(spec, "%15[a-z]:axis=%15[a-z]:rank=%d%n", kind, axis, &rank, &used) == 3 && !spec[used] && rank >= 0) {
        f->kind = !strcmp(kind, "sum") ? DOCTOR_FAULT_SUM : !strcmp(kind, "stall") ? DOCTOR_FAULT_STALL : DOCTOR_FAULT_NONE;
        for (int k = 0; k < N_AXES; k++)
            if (!strcmp(axis, axes[k].key)) { f->group = axes[k].g; f->rank = rank; if (f->kind) return; }
    }
    die("doctor: --fault=%s: use sum|stall:axis=A:rank=R, A one of tp, cp, pp, dp, dpcp, tppp (tests only: rank R gives a wrong "
        "value to axis A's checked sum, or never joins it)", spec);
}

/* ---- the end hook: which axis was being checked when a rank ended */

static struct {
    const char *axis;           /* the axis being checked; NULL outside */
    char group[96];             /* this rank's group of it, "[0 2]" */
    double timeout_s;
    void (*prev)(int code);
} watch;

static void end_during_axis(int code) {
    if (watch.axis) {
        const LaunchInfo *li = launch_info();
        fprintf(stderr, "error: [rank %d/%d] doctor | axis %s: FAIL: this rank (its group %s) ended while the axis was being checked: an "
                        "operation did not complete within --timeout=%g s, or a rank stopped (the messages above name the operation and "
                        "the ranks that never came)\n", li->rank, li->world, watch.axis, watch.group, watch.timeout_s);
        fflush(stderr);
    }
    if (watch.prev) watch.prev(code);
    exit(code);
}

void doctor_axes_watch(void) {
    DieContext d = die_get_context();
    if (d.end == end_during_axis) return;
    watch.prev = d.end;
    d.end = end_during_axis;
    die_set_context(d);
}

/* ---- the checks */

/* "[0 2 4]": the world ranks of r's group of g (the grid formula's), within size */
static void group_text(const Comm *c, CommGroup g, int r, char *buf, size_t size) {
    int *m = mallocCheck(comm_group_size(c, g) * sizeof(int)), n = comm_group_members(c, g, r, m), k = 0;
    int len = snprintf(buf, size, "[");
    for (; k < n && len < (int)size - 8; k++) len += snprintf(buf + len, size - len, "%s%d", k ? " " : "", m[k]);
    snprintf(buf + len, size - len, "%s]", k < n ? " ..." : "");
    free(m);
}

/* "[0 1] [2 3]": every group of g by its first rank, as many as fit in about 60 characters */
static void groups_text(const Comm *c, CommGroup g, char *buf, size_t size) {
    int len = 0, shown = 0, groups = c->world_size / comm_group_size(c, g);
    buf[0] = 0;
    for (int r = 0; r < c->world_size && shown < groups; r++) {
        int first = 1, colour = comm_group_colour(c, g, r);
        for (int q = 0; q < r && first; q++) first = comm_group_colour(c, g, q) != colour;
        if (!first) continue;
        char one[96];
        group_text(c, g, r, one, sizeof one);
        if (shown && len + (int)strlen(one) > 60) { snprintf(buf + len, size - len, " ..."); return; }
        len += snprintf(buf + len, size - len, "%s%s", shown++ ? " " : "", one);
    }
}

typedef struct {
    int ok;
    char why[240];              /* what this rank found wrong */
} Result;

/* The checked all-reduce, all-gather and host sum over this rank's group of g; a wrong one is said in r->why. */
static void check(const Comm *c, CommGroup g, void *a, void *b, const DoctorFault *f, Result *r) {
    int *members = mallocCheck(comm_group_size(c, g) * sizeof(int)), n = comm_group_members(c, g, c->rank, members);
    double due = 0;
    for (int q = 0; q < n; q++) due += members[q] + 1;
    float mine[CHECK_N], got[CHECK_N];
    for (int i = 0; i < CHECK_N; i++) mine[i] = (float)(c->rank + 1);
    if (f->kind == DOCTOR_FAULT_SUM && f->group == g && f->rank == c->rank) mine[CHECK_N - 1] += 1;   /* tests only */
    c->be->upload(a, mine, sizeof mine);
    comm_allreduce(c, g, a, CHECK_N, DTYPE_FP32);
    c->be->download(got, a, sizeof got);
    r->ok = 1;
    for (int i = 0; i < CHECK_N && r->ok; i++)
        if (got[i] != (float)due) {
            r->ok = 0;
            snprintf(r->why, sizeof r->why, "the all-reduce gave %.0f at value %d where %.0f (the sum of world rank + 1 over the group) was due",
                     got[i], i, due);
        }
    float me = (float)c->rank, *all = mallocCheck(n * sizeof(float));
    size_t *counts = callocCheck(n, sizeof(size_t));
    for (int q = 0; q < n; q++) counts[q] = 1;
    c->be->upload(a, &me, sizeof me);
    comm_allgather(c, g, a, b, counts, DTYPE_FP32);
    c->be->download(all, b, n * sizeof(float));
    for (int q = 0; q < n && r->ok; q++)
        if (all[q] != (float)members[q]) {
            r->ok = 0;
            snprintf(r->why, sizeof r->why, "the all-gather put world rank %.0f at group rank %d, where the grid has rank %d", all[q], q, members[q]);
        }
    double host = comm_sum(c, g, c->rank + 1);
    if (r->ok && host != due) {
        r->ok = 0;
        snprintf(r->why, sizeof r->why, "the host sum (MPI) gave %.0f where %.0f was due", host, due);
    }
    free(members); free(all); free(counts);
}

/* Seconds per operation over g (all its groups at once), the slowest rank's: an all-reduce of bytes, or an all-gather of them. */
static double timed(const Comm *c, CommGroup g, int gather, void *a, void *b, size_t bytes, size_t *counts, int iters) {
    int n = comm_group_size(c, g);
    for (int q = 0; q < n; q++) counts[q] = bytes / 4 / n;
    c->be->synchronize();
    comm_barrier(c, GROUP_WORLD);
    double t0 = now_seconds();
    for (int i = 0; i < iters; i++) {
        if (gather) comm_allgather(c, g, a, b, counts, DTYPE_FP32);
        else comm_allreduce(c, g, a, bytes / 4, DTYPE_FP32);
    }
    c->be->synchronize();
    comm_stats_take(c);   /* the transport's records, emptied as the sweep does */
    return comm_max(c, GROUP_WORLD, now_seconds() - t0) / iters;
}

/* busbw in GB/s of an operation over g: a warm-up under the base deadline plus ten times what expect_s says, then
 * as many as fit in about 50 ms (at most 20). *secs: its seconds. */
static double rate(Comm *c, CommGroup g, int gather, void *a, void *b, size_t bytes, size_t *counts, double base, double expect_s, double *secs) {
    int n = comm_group_size(c, g);
    if (gather) bytes = bytes / 4 / n * n * 4;
    c->timeout_s = base + 10 * expect_s;   /* slow is not stalled */
    double warm = timed(c, g, gather, a, b, bytes, counts, 1);
    int iters = warm > 0 ? (int)(0.05 / warm) : 20;
    iters = iters < 1 ? 1 : iters > 20 ? 20 : iters;
    *secs = timed(c, g, gather, a, b, bytes, counts, iters);
    c->timeout_s = base;
    return *secs > 0 ? bytes / *secs / 1e9 * (gather ? (double)(n - 1) / n : 2.0 * (n - 1) / n) : 0;
}

void doctor_axes(Comm *c, size_t large, const DoctorFault *f, DoctorTally *t) {
    int lead = c->rank == 0, any = 0, failed = 0;
    for (int k = 0; k < N_AXES; k++) any |= checked(c, axes[k].g);
    if (lead) printf("\naxes: the grid as training builds it, dp=%d x pp=%d x cp=%d x tp=%d (rank = ((dp_rank*pp + pp_rank)*cp + cp_rank)*tp + tp_rank)\n",
                     c->dp, c->pp, c->cp, c->tp);
    if (!any) {
        if (lead) printf("  every axis has one rank: no group to check\n");
        if (f->kind) { launch_errors_rank0_only(1); die("doctor: --fault names an axis, but no axis of this layout has more than one rank"); }
        return;
    }
    if (f->kind && !checked(c, f->group)) {   /* the same on every rank: said once */
        launch_errors_rank0_only(1);
        die("doctor: --fault: that axis has one rank in this layout, or is another axis's group: nothing to fault");
    }
    size_t small = SMALL_BYTES, max = 8, buf = (size_t)CHECK_N * 4;
    while (max * 2 <= large) max *= 2;
    if (small > max) small = max;
    if (buf < max) buf = max;
    if (buf < (size_t)c->world_size * 4) buf = (size_t)c->world_size * 4;   /* the checked all-gather: a value per member */
    void *a = c->be->alloc(buf, "doctor axes buffer"), *b = c->be->alloc(buf, "doctor axes buffer");
    size_t *counts = callocCheck(c->world_size, sizeof(size_t));
    Result *all = callocCheck(c->world_size, sizeof(Result));
    double base = c->timeout_s;
    char ssz[32], lsz[32];
    doctor_size_text(small, ssz, sizeof ssz);
    doctor_size_text(max, lsz, sizeof lsz);
    if (lead) {
        char sizes[80];
        if (max > small) snprintf(sizes, sizeof sizes, "%s and %s", ssz, lsz);
        else snprintf(sizes, sizeof sizes, "%s", ssz);
        printf("  each axis whose groups have more than one rank, all its groups at once: a device all-reduce whose sum the grid\n"
               "  formula gives, a device all-gather of the members, the host sum (MPI); then busbw (GB/s, the slowest group's) of the\n"
               "  all-reduce at %s and the all-gather at %s (--max_bytes, at most 64 MiB); each operation under --timeout=%g s\n",
               sizes, lsz, base);
        fflush(stdout);
    }
    watch.timeout_s = base;
    for (int k = 0; k < N_AXES; k++) {
        CommGroup g = axes[k].g;
        if (!checked(c, g)) continue;
        watch.axis = comm_group_names[g];
        group_text(c, g, c->rank, watch.group, sizeof watch.group);
        if (f->kind == DOCTOR_FAULT_STALL && f->group == g && f->rank == c->rank)   /* tests only: this rank never comes */
            for (;;) { struct timespec ts = {1, 0}; nanosleep(&ts, NULL); }
        Result mine = {0};
        check(c, g, a, b, f, &mine);
        double s_small, s_large, s_gather;
        double ar_small = rate(c, g, 0, a, b, small, counts, base, 0, &s_small);
        double ar_large = max > small ? rate(c, g, 0, a, b, max, counts, base, s_small * max / small, &s_large) : ar_small;
        double ag = rate(c, g, 1, a, b, max, counts, base, s_small * max / small, &s_gather);
        comm_allgather_host(c, GROUP_WORLD, &mine, all, sizeof mine);
        watch.axis = NULL;
        int bad = -1, n_bad = 0;
        for (int r = 0; r < c->world_size; r++)
            if (!all[r].ok) { n_bad++; if (bad < 0) bad = r; }
        failed += n_bad > 0;
        if (!lead) continue;
        char groups[160], line[512], cell[96];
        groups_text(c, g, groups, sizeof groups);
        int n_groups = c->world_size / comm_group_size(c, g);
        int len = snprintf(line, sizeof line, "  %-7s | %d ranks x %d group%s: %s | ", comm_group_names[g], comm_group_size(c, g), n_groups,
                           n_groups == 1 ? "" : "s", groups);
        len += snprintf(line + len, sizeof line - len, "%s | ", n_bad ? "sum or members WRONG" : "sum, members, host sum right");
        if (max > small) snprintf(cell, sizeof cell, "all-reduce %s %.2f, %s %.2f GB/s", ssz, ar_small, lsz, ar_large);
        else snprintf(cell, sizeof cell, "all-reduce %s %.2f GB/s", ssz, ar_small);
        len += snprintf(line + len, sizeof line - len, "%s | all-gather %s %.2f GB/s | %s", cell, lsz, ag, n_bad ? "FAIL" : "OK");
        printf("%s\n", line);   /* the whole line at once: no message lands inside it */
        if (n_bad) {
            char grp[96];
            group_text(c, g, bad, grp, sizeof grp);
            doctor_problem(t, "axis %s: %d rank(s) got a wrong result; rank %d (group %s): %s. Training over this axis would compute with "
                              "wrong sums", comm_group_names[g], n_bad, bad, grp, all[bad].why);
        }
        fflush(stdout);
    }
    if (lead) {
        if (failed) printf("  verdict: %d axis(es) FAIL: see the PROBLEM line(s) above\n", failed);
        else printf("  verdict: every axis sums right over the members the grid formula gives\n");
    }
    free(all); free(counts);
    c->be->free(a);
    c->be->free(b);
}
