/* parallel/comm.c — the one-rank grid. Collectives over a group of one rank
 * are the identity; asking for more ranks than were launched is an error that
 * says how to launch them. */
#include "comm.h"
#include "../common/util.h"
#include <string.h>

void comm_init(Comm *c, int dp, int pp, int tp) {
    memset(c, 0, sizeof *c);
    c->dp = dp; c->pp = pp; c->tp = tp;
    c->world_size = 1;
    if (dp * pp * tp != 1)
        die("dp*pp*tp = %d*%d*%d = %d ranks asked for, but this build runs one rank\n"
            "  hint: multi-rank training is not in this build yet; use dp=1 pp=1 tp=1", dp, pp, tp, dp * pp * tp);
}

void comm_free(Comm *c) { (void)c; }

void comm_allreduce_sum(const Comm *c, CommGroup g, float *buf, size_t n) {
    (void)buf; (void)n;
    if (comm_group_size(c, g) > 1) die("internal: multi-rank all-reduce without a transport");
}

double comm_allreduce_scalar(const Comm *c, CommGroup g, double x) {
    if (comm_group_size(c, g) > 1) die("internal: multi-rank all-reduce without a transport");
    return x;
}
