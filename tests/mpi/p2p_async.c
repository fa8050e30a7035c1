/* tests/mpi/p2p_async.c — run under `mpirun -np 2` (tests/test_mpi.sh): the
 * pipeline's sends and receives are posted and finished one by one
 * (comm_p2p_start, comm_wait), as the zero-bubble schedules need.
 *
 * Rank 0 posts one group: a 4 MiB send to rank 1 (past MPI's eager limit, so
 * it completes only once rank 1 posts its receive) and a small receive from
 * rank 1. After a barrier, rank 1 sends at once but posts its receive 500 ms late. Rank 0's
 * post returns at once, its receive's wait returns before rank 1's receive
 * exists while the send is still open, and the send's flight entry (what
 * the watchdog reads) ends at the comm_progress that sees it complete, before
 * its wait; the bytes arrive whole. */
#include "../test.h"
#include "../../common/util.h"
#include "../../comm/comm.h"
#include "../../comm/flight.h"
#include "../../comm/launch.h"
#include "../../kernels/backend.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    launch_init(&argc, &argv);
    const LaunchInfo *li = launch_info();
    if (li->world != 2) die("run me under mpirun -np 2");
    Comm c;
    comm_init(&c, 1, 2, 1, 1, COMM_MPI, 0);
    comm_attach(&c, backend_cpu());
    c.timeout_s = 60;
    const size_t big = 1 << 20, small = 16;   /* floats: 4 MiB and 64 bytes */
    float *a = mallocCheck(big * sizeof(float)), *b = mallocCheck(small * sizeof(float));
    int me = c.rank, peer = 1 - me;
    comm_barrier(&c, GROUP_WORLD);   /* both start the clock together (within a launch's skew) */
    if (me == 0) {
        for (size_t i = 0; i < big; i++) a[i] = (float)i;
        memset(b, 0, small * sizeof(float));
        CommP2P ops[2] = {{1, peer, a, big, DTYPE_FP32}, {0, peer, b, small, DTYPE_FP32}};
        CommHandle h[2];
        double t0 = now_seconds();
        comm_p2p_start(&c, ops, 2, h);
        uint64_t id = flight_last();
        double posted = now_seconds() - t0;
        comm_wait(&c, h[1]);   /* the receive alone */
        double got = now_seconds() - t0;
        FlightOp f;
        int open = flight_get(id, &f) && !f.done;
        CHECK(posted < 0.2, "posting the group returns at once, not when the peer takes the send: %.3f s", posted);
        CHECK(got < 0.4 && b[0] == 1.0f && b[small - 1] == 16.0f, "the receive's wait returns before the peer takes the send (%.3f s), its data there", got);
        CHECK(open, "the group's flight entry stays open while its send waits for the peer");
        int ended = 0;
        for (int k = 0; k < 2000000 && !ended; k++) {   /* the peer posts its receive at 0.5 s */
            comm_progress(&c);
            ended = flight_get(id, &f) && f.done;
            if (!ended) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
        }
        CHECK(ended && now_seconds() - t0 >= 0.4, "comm_progress ends the entry once the send completed, before its wait (%.3f s)",
              now_seconds() - t0);
        comm_wait(&c, h[0]);
    } else {
        for (size_t i = 0; i < small; i++) b[i] = (float)(i + 1);
        CommP2P send = {1, peer, b, small, DTYPE_FP32}, recv = {0, peer, a, big, DTYPE_FP32};
        CommHandle hs, hr;
        comm_p2p_start(&c, &send, 1, &hs);
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
        comm_p2p_start(&c, &recv, 1, &hr);
        comm_wait(&c, hr);
        comm_wait(&c, hs);
        int whole = 1;
        for (size_t i = 0; i < big; i++) whole &= a[i] == (float)i;
        CHECK(whole, "the 4 MiB arrive whole");
    }
    free(a); free(b);
    comm_free(&c);
    return test_summary();
}
