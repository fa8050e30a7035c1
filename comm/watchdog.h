/* comm/watchdog.h — a deadline on every collective, and a stall that says
 * what stalled and who never came.
 *
 * The idea: a thread per rank wakes every 50 ms and looks in the flight
 * recorder (comm/flight.h) for an operation past its deadline (the
 * communicator's timeout_s when it began). It is the only watcher that sees
 * NCCL operations, which never block the host: the host blocks in CUDA, and
 * the thread asks the GPU's events instead. On a stall it asks every other
 * member of the stalled operation's group how far it got, over a communicator
 * of its own (a copy of the world that training never uses, so questions
 * never mix with training's messages); each rank's watchdog thread answers
 * from its own recorder, even while that rank's training thread is stuck. A
 * member that has begun fewer operations over the group than the stalled one's
 * number has not arrived; one that does not answer within WATCHDOG_ASK_S has
 * died or its whole process is frozen (SIGSTOP): it is named as not answering,
 * never as arrived, and while one is silent the members that answered from
 * inside a collective are named as waiting, not in its place. Then it prints
 * the op, group, size, step, micro-batch and those ranks, writes the flight
 * recorder to run_dir/flight_rank<R>.txt, runs the transports' abort hooks
 * (ncclCommAbort, saying whether it returned within 5 s: with a peer stopped or dead it
 * may not, an abort needing every rank) and ends the job
 * (MPI_Abort): every rank exits non-zero
 * within the deadline plus a few seconds. Any other error that ends a rank
 * while the watchdog runs (die()) writes the flight recorder too.
 *
 * Deadlines: the trainer sets timeout_s = comm_timeout_s, and
 * WATCHDOG_FIRST_FACTOR times that for start-up, the first step (NCCL sets up
 * its connections inside the first collectives) and checkpoints. */
#pragma once
#include "comm.h"

#define WATCHDOG_FIRST_FACTOR 5.0   /* start-up, the first step and checkpoints: 5 x comm_timeout_s */
#define WATCHDOG_ASK_S 2.0          /* how long a rank that saw a stall waits for the others' answers */
#define WATCHDOG_BACKSTOP_S 10.0    /* MPI's own wait loop ends the run this long after a deadline the watchdog missed */

/* Starts the thread for this rank of c (collective: every rank of c's world
 * calls it). Nothing to watch — one rank and no transport — starts nothing.
 * run_dir: where the flight recorder goes (created if missing; NULL: none). */
void watchdog_start(const Comm *c, const char *run_dir);
/* Stops and joins the thread when c is the communicator that started it
 * (collective, like start; comm_free calls it). */
void watchdog_stop(const Comm *c);
int watchdog_running(void);
/* What a stall must do before the job ends: ncclCommAbort on the transport's
 * communicators. One hook; NULL removes it. */
void watchdog_on_abort(void (*abort_fn)(void *ctx), void *ctx);
