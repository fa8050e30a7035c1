/* comm/flight.c — the flight recorder's ring and its dump (comm/flight.h). */
#include "flight.h"
#include "comm.h"
#include "../common/util.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FlightOp ring[FLIGHT_SLOTS];
static uint64_t next_id = 1, group_count[GROUP_COUNT + 1];   /* [GROUP_COUNT]: sends/receives */
static int cur_step, cur_mb = -1;
static int (*event_fired)(void *event);
static _Thread_local uint64_t last_begun;

static int group_index(int g) { return g == FLIGHT_P2P || g < 0 || g >= GROUP_COUNT ? GROUP_COUNT : g; }

void flight_set_step(int step) { pthread_mutex_lock(&lock); cur_step = step; cur_mb = -1; pthread_mutex_unlock(&lock); }
void flight_set_micro_batch(int mb) { pthread_mutex_lock(&lock); cur_mb = mb; pthread_mutex_unlock(&lock); }
void flight_where(int *step, int *mb) { pthread_mutex_lock(&lock); *step = cur_step; *mb = cur_mb; pthread_mutex_unlock(&lock); }
void flight_set_event_query(int (*fired)(void *event)) { pthread_mutex_lock(&lock); event_fired = fired; pthread_mutex_unlock(&lock); }

uint64_t flight_begin(const char *op, int group, size_t bytes, double deadline_s, int peer) {
    pthread_mutex_lock(&lock);
    uint64_t id = next_id++;
    FlightOp *f = &ring[id % FLIGHT_SLOTS];
    *f = (FlightOp){.id = id, .op = op, .group = group, .group_seq = ++group_count[group_index(group)], .peer = peer,
                    .bytes = bytes, .step = cur_step, .micro_batch = cur_mb, .begun = now_seconds(), .deadline_s = deadline_s,
                    .device_started = 1};
    last_begun = id;
    pthread_mutex_unlock(&lock);
    return id;
}

uint64_t flight_last(void) { return last_begun; }

void flight_device(uint64_t id, void *start_event, void *done_event) {
    pthread_mutex_lock(&lock);
    FlightOp *f = &ring[id % FLIGHT_SLOTS];
    if (f->id == id) { f->device_start = start_event; f->device_done = done_event; f->device_started = 0; }
    pthread_mutex_unlock(&lock);
}

void flight_end(uint64_t id) {
    pthread_mutex_lock(&lock);
    FlightOp *f = &ring[id % FLIGHT_SLOTS];
    if (f->id == id) {
        f->ended = now_seconds();
        if (!f->device_done) f->done = 1;
    }
    pthread_mutex_unlock(&lock);
}

int flight_get(uint64_t id, FlightOp *out) {
    pthread_mutex_lock(&lock);
    int ok = id && ring[id % FLIGHT_SLOTS].id == id;
    if (ok) *out = ring[id % FLIGHT_SLOTS];
    pthread_mutex_unlock(&lock);
    return ok;
}

/* With the lock held: ask the device whether f is complete, remembering the answer. */
static int complete(FlightOp *f) {
    if (f->done) return 1;
    if (!f->device_done || !event_fired) return 0;
    if (!f->device_started && event_fired(f->device_start)) f->device_started = 1;
    if (event_fired(f->device_done)) f->done = f->device_started = 1;
    return f->done;
}

int flight_oldest_pending(double now, int overdue, FlightOp *out) {
    pthread_mutex_lock(&lock);
    FlightOp *best = NULL;
    for (int i = 0; i < FLIGHT_SLOTS; i++) {
        FlightOp *f = &ring[i];
        if (!f->id || f->done) continue;
        if (overdue && (f->deadline_s <= 0 || now - f->begun <= f->deadline_s)) continue;
        if (complete(f)) continue;
        if (!best || f->id < best->id) best = f;
    }
    if (best) *out = *best;
    pthread_mutex_unlock(&lock);
    return best != NULL;
}

uint64_t flight_group_count(int group) {
    pthread_mutex_lock(&lock);
    uint64_t n = group_count[group_index(group)];
    pthread_mutex_unlock(&lock);
    return n;
}

int flight_dump(const char *path, int rank, int world, const char *why) {
    pthread_mutex_lock(&lock);
    int empty = next_id == 1;
    pthread_mutex_unlock(&lock);
    if (empty) return 1;
    char tmp[4200], err[4400];
    FILE *f = atomic_try_open(path, tmp, sizeof tmp, err, sizeof err);   /* the output door; no die: the watchdog reports it */
    if (!f) return -1;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    pthread_mutex_lock(&lock);
    double now = now_seconds();
    fprintf(f, "# flight recorder of rank %d of %d (host %s, pid %d): its last %d operations, oldest first\n# written because: %s\n",
            rank, world, host, (int)getpid(), FLIGHT_SLOTS, why);
    fprintf(f, "# %8s  %-22s %-8s %6s %12s %6s %4s %10s %10s  %s\n", "id", "op", "group", "#", "bytes", "step", "mb", "began_ago",
            "took_ms", "state");
    uint64_t first = next_id > FLIGHT_SLOTS ? next_id - FLIGHT_SLOTS : 1;
    for (uint64_t id = first; id < next_id; id++) {
        FlightOp *o = &ring[id % FLIGHT_SLOTS];
        if (o->id != id) continue;
        int ok = complete(o);
        char took[32] = "-", grp[16];
        if (o->ended > 0) snprintf(took, sizeof took, "%.3f", 1e3 * (o->ended - o->begun));
        if (o->group == FLIGHT_P2P) snprintf(grp, sizeof grp, "peer %d", o->peer);
        else snprintf(grp, sizeof grp, "%s", comm_group_names[o->group]);
        /* an NCCL call returns to the host once enqueued (ended > 0): the device's events say where it is */
        const char *state = ok ? "done" : !o->device_started ? "waiting (device not started)" : "IN FLIGHT";
        fprintf(f, "  %8llu  %-22s %-8s %6llu %12zu %6d %4d %9.3fs %10s  %s\n", (unsigned long long)id, o->op, grp,
                (unsigned long long)o->group_seq, o->bytes, o->step, o->micro_batch, now - o->begun, took, state);
    }
    pthread_mutex_unlock(&lock);
    return atomic_try_commit(f, tmp, path, err, sizeof err);
}

void flight_reset(void) {
    pthread_mutex_lock(&lock);
    memset(ring, 0, sizeof ring);
    memset(group_count, 0, sizeof group_count);
    next_id = 1; cur_step = 0; cur_mb = -1;
    pthread_mutex_unlock(&lock);
}
