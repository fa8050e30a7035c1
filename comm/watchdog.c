/* comm/watchdog.c — the watchdog's thread: answering how far this rank
 * got, finding an operation past its deadline, asking the others, and ending
 * the job with a message that names what stalled and who never came
 * (comm/watchdog.h). */
#include "watchdog.h"
#include "flight.h"
#include "../common/util.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef LLM3D_MPI
#include <mpi.h>
#endif

#define TAG_QUERY 11
#define TAG_ANSWER 12
#define TICK_NS 50000000L   /* the thread wakes every 50 ms */

typedef struct { int asker, group; } Query;
typedef struct {
    int rank, step, micro_batch;
    int pending;                     /* it has an operation not complete; then its oldest: */
    char op[32];
    int group, peer, device_started;
    unsigned long long group_seq, group_count;   /* group_count: operations it has begun over the asked group */
    double age_s;
    char host[64];
} Answer;

static struct {
    int running, use_mpi;
    volatile int stopping;
    pthread_t thread;
    const Comm *owner;               /* the communicator that started it */
    Comm grid;                       /* a copy of its sizes and coordinates */
    char run_dir[1024], dump_path[1100];
    void (*abort_fn)(void *);
    void *abort_ctx;
    volatile int aborted;            /* abort_fn returned */
    void (*prev_end)(int);
#ifdef LLM3D_MPI
    MPI_Comm hb;                     /* the watchdog's own copy of the world (have_hb) */
    int have_hb;
    MPI_Request query_req;
    Query query_in;
#endif
} wd;

int watchdog_running(void) { return wd.running; }
void watchdog_on_abort(void (*abort_fn)(void *), void *ctx) { wd.abort_fn = abort_fn; wd.abort_ctx = ctx; }

static void sleep_ns(long ns) { struct timespec ts = {ns / 1000000000L, ns % 1000000000L}; nanosleep(&ts, NULL); }

static const char *group_name(int g) { return g == FLIGHT_P2P ? "send/recv" : comm_group_names[g]; }

#ifdef LLM3D_MPI
static void my_answer(int group, Answer *a) {
    memset(a, 0, sizeof *a);
    a->rank = wd.grid.rank;
    flight_where(&a->step, &a->micro_batch);
    a->group_count = flight_group_count(group);
    FlightOp op;
    double now = now_seconds();
    if (flight_oldest_pending(now, 0, &op)) {
        a->pending = 1;
        snprintf(a->op, sizeof a->op, "%s", op.op);
        a->group = op.group; a->peer = op.peer; a->device_started = op.device_started;
        a->group_seq = op.group_seq; a->age_s = now - op.begun;
    }
    gethostname(a->host, sizeof a->host - 1);
}

/* Answer every question that has come in. */
static void serve(void) {
    for (;;) {
        int done = 0;
        if (MPI_Test(&wd.query_req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return;
        Answer a;
        my_answer(wd.query_in.group, &a);
        MPI_Send(&a, sizeof a, MPI_BYTE, wd.query_in.asker, TAG_ANSWER, wd.hb);   /* small: sent eagerly */
        MPI_Irecv(&wd.query_in, sizeof(Query), MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, wd.hb, &wd.query_req);
    }
}
#endif

/* Ask members[0..n) (not me) how far they got; got[k] = 1 for those who answered within WATCHDOG_ASK_S. */
static void ask(int group, const int *m, int n, Answer *ans, int *got) {
#ifdef LLM3D_MPI
    MPI_Request *rq = callocCheck(n, sizeof(MPI_Request));
    static Query q;   /* static: a send to a dead rank may still read it after this returns */
    q = (Query){wd.grid.rank, group};
    for (int k = 0; k < n; k++) {
        rq[k] = MPI_REQUEST_NULL;
        if (m[k] == wd.grid.rank) continue;
        MPI_Irecv(&ans[k], sizeof(Answer), MPI_BYTE, m[k], TAG_ANSWER, wd.hb, &rq[k]);
        MPI_Request s;
        if (MPI_Isend(&q, sizeof q, MPI_BYTE, m[k], TAG_QUERY, wd.hb, &s) == MPI_SUCCESS) MPI_Request_free(&s);
    }
    for (double t0 = now_seconds(); now_seconds() - t0 < WATCHDOG_ASK_S;) {
        serve();
        int all = 1;
        for (int k = 0; k < n; k++) {
            if (m[k] == wd.grid.rank || got[k]) continue;
            int done = 0;
            if (MPI_Test(&rq[k], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) got[k] = 1;
            all &= got[k];
        }
        if (all) break;
        sleep_ns(5000000L);
    }
    free(rq);   /* requests still open are abandoned: the job ends now */
#else
    (void)group; (void)m; (void)n; (void)ans; (void)got;
#endif
}

/* "rank 1 (host a: step 3, micro-batch 0, outside any collective; it has begun 6 operations over dp, this one is #7)" */
static int describe(char *b, size_t size, const Answer *a, const FlightOp *op) {
    int n = snprintf(b, size, "rank %d (host %s: step %d", a->rank, a->host, a->step);
    if (a->micro_batch >= 0) n += snprintf(b + n, size - n, ", micro-batch %d", a->micro_batch);
    if (!a->pending) n += snprintf(b + n, size - n, ", busy outside any collective");
    else if (a->group == FLIGHT_P2P)
        n += snprintf(b + n, size - n, ", waiting %.1f s in %s with rank %d", a->age_s, a->op, a->peer);
    else
        n += snprintf(b + n, size - n, ", waiting %.1f s in %s #%llu over %s%s", a->age_s, a->op, a->group_seq, group_name(a->group),
                      a->device_started ? "" : ", which its GPU has not started");
    if (op->group != FLIGHT_P2P)
        n += snprintf(b + n, size - n, "; it has begun %llu operations over %s, the stalled one is #%llu", a->group_count,
                      group_name(op->group), (unsigned long long)op->group_seq);
    return n + snprintf(b + n, size - n, ")");
}

/* Whether the member answering a has reached the stalled operation. */
static int arrived(const Answer *a, const FlightOp *op) {
    if (op->group == FLIGHT_P2P) return a->pending && a->group == FLIGHT_P2P && a->peer == wd.grid.rank;
    if (a->group_count < op->group_seq) return 0;
    /* NCCL: begun on its host but not on its GPU, when it is the one it is stuck on */
    return !(a->pending && a->group == op->group && a->group_seq == op->group_seq && !a->device_started);
}

#define ABORT_WAIT_S 5.0   /* how long the end waits for ncclCommAbort before it goes without it */
static void *run_abort(void *arg) { (void)arg; wd.abort_fn(wd.abort_ctx); wd.aborted = 1; return NULL; }

static void mkdirs(const char *dir) {
    char buf[1100];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(buf, 0755); *p = '/'; }
    mkdir(buf, 0755);
}

/* Write the flight recorder; a line saying where (or why not) into b. */
static int dump(char *b, size_t size, const char *why) {
    if (!wd.dump_path[0]) return snprintf(b, size, "  flight recorder: not written (no run_dir)\n");
    mkdirs(wd.run_dir);
    int r = flight_dump(wd.dump_path, wd.grid.rank, wd.grid.world_size, why);
    if (r > 0) return snprintf(b, size, "  flight recorder: empty (no operation yet)\n");
    if (r < 0) return snprintf(b, size, "  flight recorder: could not write %s: %s\n", wd.dump_path, strerror(errno));
    return snprintf(b, size, "  flight recorder: %s (this rank's last %d operations; the other ranks' are beside it)\n",
                    wd.dump_path, FLIGHT_SLOTS);
}

static void stall(const FlightOp *op) __attribute__((noreturn));
static void stall(const FlightOp *op) {
    const Comm *c = &wd.grid;
    int world = c->world_size, me = c->rank;
    int *m = callocCheck(world, sizeof(int)), *got = callocCheck(world, sizeof(int));
    Answer *ans = callocCheck(world, sizeof(Answer));
    int n = op->group == FLIGHT_P2P ? (m[0] = op->peer, 1) : comm_group_members(c, (CommGroup)op->group, c->rank, m);
    if (wd.use_mpi) ask(op->group, m, n, ans, got);
    size_t size = 16384 + 400 * (size_t)n;
    char *msg = mallocCheck(size), bytes[32], line[1024];
    int len = 0;
    format_bytes((double)op->bytes, bytes, sizeof bytes);
    if (op->group == FLIGHT_P2P)
        len += snprintf(msg + len, size - len, "watchdog: %s with rank %d (%s)", op->op, op->peer, bytes);
    else
        len += snprintf(msg + len, size - len, "watchdog: %s over the %s group (%d rank%s, %s), its operation #%llu there", op->op,
                        group_name(op->group), comm_group_size(c, op->group), comm_group_size(c, op->group) == 1 ? "" : "s", bytes,
                        (unsigned long long)op->group_seq);
    len += snprintf(msg + len, size - len, ", at step %d", op->step);
    if (op->micro_batch >= 0) len += snprintf(msg + len, size - len, ", micro-batch %d", op->micro_batch);
    len += snprintf(msg + len, size - len, ", did not complete within its deadline of %.0f s (comm_timeout_s)%s\n", op->deadline_s,
                    op->device_started ? "" : "; on this rank the GPU never started it (its stream is blocked by earlier work)");
    if (!wd.use_mpi && world > 1)
        len += snprintf(msg + len, size - len, "  which ranks had not arrived is unknown: MPI runs without thread support here\n");
    if (world == 1)
        len += snprintf(msg + len, size - len, "  this is the only rank: its device never finished the operation (a hung kernel, "
                                                "or a stream that waits for ever)\n");
    /* Who kept the others waiting. A member that did not answer is frozen (SIGSTOP, a debugger) or dead: it is named as
     * not answering, never as arrived. While one is silent, a member that answered from inside a collective is waiting
     * on it: named as waiting, not as the culprit (on NCCL its GPU may not have started the stalled operation yet,
     * blocked behind an earlier one that the frozen rank never joined). */
    int silent = 0, arrived_n = 0;
    for (int k = 0; k < n; k++)
        if (m[k] != me && got[k] && ans[k].rank != m[k]) got[k] = 0;   /* not a reply from that rank */
    for (int k = 0; k < n && wd.use_mpi; k++) silent += m[k] != me && !got[k];
    for (int pass = 0; pass < 3 && wd.use_mpi; pass++)   /* not answering, then not arrived, then waiting */
        for (int k = 0; k < n; k++) {
            if (m[k] == me) continue;
            int kind = !got[k] ? 0 : arrived(&ans[k], op) ? 3 : silent && ans[k].pending ? 2 : 1;
            if (kind == 3) { arrived_n += pass == 0; continue; }
            if (kind != pass) continue;
            if (kind == 0)
                snprintf(line, sizeof line, "  not answering: rank %d did not answer the watchdog within %.0f s: its whole process is "
                                            "frozen (stopped, e.g. SIGSTOP or a debugger) or dead\n", m[k], WATCHDOG_ASK_S);
            else {
                int at = snprintf(line, sizeof line, kind == 1 ? "  not arrived: " : "  waiting (on the rank(s) not answering): ");
                describe(line + at, sizeof line - at - 2, &ans[k], op);
                strcat(line, "\n");
            }
            if (len + 1200 < (int)size) len += snprintf(msg + len, size - len, "%s", line);
        }
    if (arrived_n) {
        len += snprintf(msg + len, size - len, "  arrived: %d rank(s):", arrived_n);
        for (int k = 0, shown = 0; k < n; k++)
            if (m[k] != me && got[k] && arrived(&ans[k], op) && shown++ < 32) len += snprintf(msg + len, size - len, " %d", m[k]);
        len += snprintf(msg + len, size - len, "%s\n", arrived_n > 32 ? " ..." : "");
    }
    int others = 0;
    for (int k = 0; k < n; k++) others += m[k] != me;
    if (wd.use_mpi && others && arrived_n == others)   /* nobody missing: the operation is slow, not stalled */
        len += snprintf(msg + len, size - len, "  every rank of it arrived, so none is missing: the operation itself is slow (%s in over %.3g s) "
                                                "- a loaded host or slow links; give it a longer deadline (comm_timeout_s, the doctor's --timeout)\n",
                        bytes, op->deadline_s);
    char why[300];
    snprintf(why, sizeof why, "the watchdog: %s at step %d did not complete within %.0f s", op->op, op->step, op->deadline_s);
    len += dump(msg + len, size - len, why);
    snprintf(msg + len, size - len, "  hint: read the output of the ranks named above first (the rank that stopped says why, if it "
                                    "could); a rank busy outside any collective is hung in its own work or stalled; a rank not answering is frozen or dead "
                                    "(ps shows state T for a stopped process); see docs/nccl-errors.md");
    fflush(stdout);
    if (world > 1) fprintf(stderr, "error: [rank %d/%d] %s\n", me, world, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    if (wd.abort_fn) {   /* ncclCommAbort, in a thread of its own: it must not hold up the end */
        pthread_t t;
        double t0 = now_seconds();
        if (pthread_create(&t, NULL, run_abort, NULL) == 0) {
            pthread_detach(t);
            /* ranks sharing one GPU (test hosts) abort one after another: allow a few seconds, not one */
            while (!wd.aborted && now_seconds() - t0 < ABORT_WAIT_S) sleep_ns(10000000L);
            if (wd.aborted) fprintf(stderr, "watchdog: [rank %d] its NCCL communicators aborted (ncclCommAbort) in %.2f s\n", me, now_seconds() - t0);
            else fprintf(stderr, "watchdog: [rank %d] ncclCommAbort had not returned after %.0f s: the job ends without it\n", me, ABORT_WAIT_S);
        }
    }
    sleep_ns(500000000L);   /* the other ranks that saw the same stall say so too before the job ends */
    if (wd.prev_end) wd.prev_end(1);
    _exit(1);   /* not exit(): the training thread may be inside CUDA, whose teardown would wait for it */
}

static void *run(void *arg) {
    (void)arg;
    while (!wd.stopping) {
#ifdef LLM3D_MPI
        if (wd.use_mpi) serve();
#endif
        FlightOp op;
        if (flight_oldest_pending(now_seconds(), 1, &op)) stall(&op);
        sleep_ns(TICK_NS);
    }
    return NULL;
}

/* die() while the watchdog runs: the flight recorder first, then the job ends as before */
static void end_with_dump(int code) {
    char b[1300];
    if (dump(b, sizeof b, "an error on this rank (its message is above)") > 0 && !strstr(b, "empty")) fprintf(stderr, "%s", b);
    if (wd.prev_end) wd.prev_end(code);
    exit(code);
}

void watchdog_start(const Comm *c, const char *run_dir) {
    if (wd.running || (c->world_size == 1 && !c->impl)) return;
    memset(&wd, 0, sizeof wd);
    wd.owner = c;
    wd.grid = *c;
    if (run_dir && run_dir[0]) {   /* created when the recorder is written, not before */
        snprintf(wd.run_dir, sizeof wd.run_dir, "%s", run_dir);
        snprintf(wd.dump_path, sizeof wd.dump_path, "%s/flight_rank%d.txt", run_dir, c->rank);
    }
#ifdef LLM3D_MPI
    int started = 0, provided = 0;
    MPI_Initialized(&started);
    if (started && c->world_size > 1) {
        MPI_Query_thread(&provided);
        wd.use_mpi = provided == MPI_THREAD_MULTIPLE;
        MPI_Comm_dup(MPI_COMM_WORLD, &wd.hb);   /* collective on every rank, even without thread support */
        MPI_Comm_set_errhandler(wd.hb, MPI_ERRORS_RETURN);   /* a dead peer must not turn the stall into another error */
        MPI_Irecv(&wd.query_in, sizeof(Query), MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, wd.hb, &wd.query_req);
        wd.have_hb = 1;
    }
#endif
    DieContext d = die_get_context();
    wd.prev_end = d.end;
    d.end = end_with_dump;
    die_set_context(d);
    if (pthread_create(&wd.thread, NULL, run, NULL) != 0) die("cannot start the watchdog's thread: %s", strerror(errno));
    wd.running = 1;
}

void watchdog_stop(const Comm *c) {
    if (!wd.running || c != wd.owner) return;
    wd.stopping = 1;
    pthread_join(wd.thread, NULL);
    DieContext d = die_get_context();
    d.end = wd.prev_end;
    die_set_context(d);
#ifdef LLM3D_MPI
    if (wd.have_hb) {
        MPI_Cancel(&wd.query_req);
        MPI_Wait(&wd.query_req, MPI_STATUS_IGNORE);
        MPI_Comm_free(&wd.hb);
    }
#endif
    memset(&wd, 0, sizeof wd);
}
