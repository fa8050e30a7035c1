/* comm/flight.h — the flight recorder: this rank's last operations on the communicator.
 *
 * The idea: every collective and send/recv that passes comm/comm.c is
 * written into a ring of the last FLIGHT_SLOTS operations — what it was (op,
 * group, bytes), where training was (step, micro-batch), its number among this
 * rank's operations over that group (the same number on every member, since
 * members call the same collectives in the same order), when it began, and
 * when it ended. An operation on the host (MPI) ends when its wait returns; a
 * device operation (NCCL) ends when its completion event has fired on the GPU,
 * which only the watchdog's thread sees (comm/watchdog.h). The watchdog
 * reads the ring to find an operation past its deadline and to tell other
 * ranks how far this one got; on any abort the ring is written to
 * run_dir/flight_rank<R>.txt. A mutex guards it: the training thread writes,
 * the watchdog's thread reads. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define FLIGHT_SLOTS 128
#define FLIGHT_P2P (-1)   /* the group of a send/recv: pairs of ranks, no collective numbering */

typedef struct {
    uint64_t id;              /* 1, 2, ... over this process's run; 0: an empty slot */
    const char *op;           /* "all-reduce", "a host sum", "pipeline send/recv", ... (static text) */
    int group;                /* CommGroup, or FLIGHT_P2P */
    uint64_t group_seq;       /* its number among this rank's operations over that group, from 1 */
    int peer;                 /* send/recv: the (first) world rank at the other end; else -1 */
    size_t bytes;
    int step, micro_batch;    /* where training was: step from 1 (0: before the first), micro-batch (-1: none) */
    double begun, ended;      /* host clock (now_seconds); ended 0 while the host still waits */
    double deadline_s;        /* the communicator's timeout when it began (0: none) */
    void *device_start, *device_done;   /* device events (NCCL); NULL: a host operation */
    int done;                 /* complete: ended on the host, and on the device when it has events */
    int device_started;       /* the device reached it (start event fired); 1 for host operations */
} FlightOp;

/* Where training is, for the operations that follow. */
void flight_set_step(int step);
void flight_set_micro_batch(int micro_batch);
void flight_where(int *step, int *micro_batch);

/* A new operation; returns its id. */
uint64_t flight_begin(const char *op, int group, size_t bytes, double deadline_s, int peer);
/* The id of the operation last begun on this thread (a transport marks it with device events). */
uint64_t flight_last(void);
/* The device events around operation id (NCCL): it is complete when done fires. */
void flight_device(uint64_t id, void *start_event, void *done_event);
/* The host is done with it (its wait returned). */
void flight_end(uint64_t id);
/* How the watchdog asks a device event whether it fired (set by the NCCL transport; NULL: never asked). */
void flight_set_event_query(int (*fired)(void *event));

/* A copy of operation id; 0 when it has left the ring. */
int flight_get(uint64_t id, FlightOp *out);
/* The oldest operation not complete: 1 and a copy, else 0. With overdue, only one past its deadline at now. */
int flight_oldest_pending(double now, int overdue, FlightOp *out);
/* Operations this rank has begun over group g (FLIGHT_P2P: sends/receives). */
uint64_t flight_group_count(int group);
/* The ring, oldest first, as text to path (after a header: rank, host, why). Returns 0; 1 when there
 * is nothing to write (no operation yet); -1 when it cannot write. */
int flight_dump(const char *path, int rank, int world, const char *why);
/* Forget everything (tests). */
void flight_reset(void);
