/* train/run_dir.c — who may write into a run's folder and its log: the run_dir lock, a fresh start's
 * rules for the checkpoints it finds there, and the same rules for log_jsonl.
 *
 * The idea: one run at a time owns a run_dir. Rank 0 (the rank that writes checkpoints) takes an
 * exclusive flock() on run_dir/LOCK before it changes anything there, writes its pid, host and start
 * time into it, and holds it for the life of the process; a second run is refused naming the holder.
 * The kernel drops a flock when its holder dies, however it dies (a SIGKILL too), so a lock left by a
 * dead run is simply taken over: its text only says who held it last. A fresh start finds either
 * nothing, this same run's checkpoints (model, seed and data: checkpoint_same_run), which move into
 * run_dir/replaced_<UTC time>[-N]/, or another run's, which it refuses before it writes anything. The
 * log follows the same rule by the run_id in its first line: another run's records are refused, this
 * run's own are continued by a resume and moved to <log>.replaced_<UTC time>[-N] by a fresh start;
 * the log is flocked too, and a live run's folder is refused before the log is touched. */
#include "trainer.h"
#include "../checkpoint/checkpoint.h"
#include "../comm/launch.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CONFIG_TEXT_BYTES 65536
#define LOCK_TEXT_BYTES 512

/* "<prefix><UTC time>" for k = 1, "<prefix><UTC time>-<k>" after: a name for the k-th try at a free one. */
static void aside_name(const char *prefix, int k, char *out, size_t size) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if (k == 1) snprintf(out, size, "%s%s", prefix, stamp);
    else snprintf(out, size, "%s%s-%d", prefix, stamp, k);
}

/* ------------------------------------------------------------------- the lock */

static int lock_fd = -1;   /* held open (O_CLOEXEC: no child program inherits it) until the process ends */

/* At a normal exit (a one-process die() included) the holder's text is emptied, so a LOCK that still names a holder
 * when it is next taken was left by a run that was killed. The flock itself goes with the process. */
static void lock_release_at_exit(void) {
    if (lock_fd >= 0 && ftruncate(lock_fd, 0) != 0) { /* nothing more to do at exit */ }
}

/* The holder's "pid=P\nhost=H\nstarted=T\n" from fd (empty when none is written yet), and its fields. */
typedef struct { char text[LOCK_TEXT_BYTES], pid[32], host[256], started[64]; } Holder;

static void lock_holder(int fd, Holder *h) {
    ssize_t n = pread(fd, h->text, sizeof h->text - 1, 0);
    h->text[n > 0 ? n : 0] = 0;
    snprintf(h->pid, sizeof h->pid, "?"); snprintf(h->host, sizeof h->host, "?"); snprintf(h->started, sizeof h->started, "?");
    checkpoint_config_value(h->text, "pid", h->pid, sizeof h->pid);
    checkpoint_config_value(h->text, "host", h->host, sizeof h->host);
    checkpoint_config_value(h->text, "started", h->started, sizeof h->started);
}

/* After flock(fd) failed: die naming the run that holds the lock (or why it could not be taken). */
static void refuse_held(const char *run_dir, int fd, const char *path) {
    if (errno != EWOULDBLOCK)
        die("cannot lock run_dir '%s' (flock of %s): %s\n  hint: the filesystem must support flock (local disks and NFS do); "
            "give another --run_dir", run_dir, path, strerror(errno));
    Holder h;
    lock_holder(fd, &h);
    if (!h.text[0])
        die("run_dir=%s is in use by another run (it is starting: its pid and host are not written yet); "
            "give another --run_dir or stop that run", run_dir);
    die("run_dir=%s is in use by pid %s on host %s (started %s); give another --run_dir or stop that run", run_dir, h.pid, h.host, h.started);
}

/* Rank 0, before anything else is touched (the log): dies as above when a live run holds run_dir's lock; takes nothing. */
static void refuse_if_in_use(const char *run_dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/LOCK", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return;   /* no lock file (or none we can read): lock_run_dir says what is wrong, later */
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) refuse_held(run_dir, fd, path);
    close(fd);   /* releases the probe's shared lock */
}

/* 1 when name is the output door's temporary of some file: "<name>.tmp.XXXXXX" (common/output.h) */
static int door_temporary(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name || strlen(t) != 11) return 0;
    for (const char *c = t + 5; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) return 0;
    return 1;
}
/* Rank 0, holding the lock a killed run left: the door's temporaries that run left in run_dir (a plot or a
 * flight record it was writing when killed: die() removes them, a SIGKILL cannot) go, said. Only regular
 * files of exactly that name shape; nothing else of the folder is touched (a half-written checkpoint is
 * ckpt_N.tmp/, removed as such when checkpoints are listed). */
static void remove_killed_temporaries(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (!d) return;
    char path[1600], said[512] = "";
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        if (!door_temporary(e->d_name) || lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || unlink(path) != 0) continue;
        if (removed++ < 3) snprintf(said + strlen(said), sizeof said - strlen(said), "%s%s", removed > 1 ? ", " : "", e->d_name);
    }
    closedir(d);
    if (removed)
        printf("note  | run_dir '%s': removed %d unfinished temporar%s the killed run left (%s%s)\n", run_dir, removed,
               removed > 1 ? "ies" : "y", said, removed > 3 ? ", ..." : "");
}

/* Rank 0: flock run_dir/LOCK or die naming the run that holds it. */
static void lock_run_dir(const char *run_dir) {
    if (lock_fd >= 0) return;
    char path[1200];
    checkpoint_make_folder(run_dir);
    snprintf(path, sizeof path, "%s/LOCK", run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        die("cannot open the lock file '%s' of run_dir: %s\n  hint: it must be a regular file (or absent) in a writable folder; "
            "give another --run_dir", path, fd < 0 ? strerror(errno) : "not a regular file");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) refuse_held(run_dir, fd, path);
    Holder h;
    lock_holder(fd, &h);
    if (h.text[0])   /* emptied at every normal exit: its holder was killed, and the kernel released its flock */
        printf("note  | run_dir '%s': its lock names pid %s on host %s (started %s), which ended without releasing it "
               "(killed?); taking it over\n", run_dir, h.pid, h.host, h.started);
    if (h.text[0]) remove_killed_temporaries(run_dir);
    char me[256] = "?", now[64];
    if (gethostname(me, sizeof me) != 0) snprintf(me, sizeof me, "?");
    me[sizeof me - 1] = 0;
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int n = snprintf(h.text, sizeof h.text, "pid=%ld\nhost=%s\nstarted=%s\n", (long)getpid(), me, now);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, h.text, (size_t)n, 0) != n)
        die("cannot write the lock file '%s': %s\n  hint: is the disk full?", path, strerror(errno));
    lock_fd = fd;
    atexit(lock_release_at_exit);
}

/* ------------------------------------------------------ a fresh start's rules */

/* Rank 0, a fresh start of the same run in a run_dir holding its checkpoints (up to step `found`): they go
 * into run_dir/replaced_<UTC time>[-N]/ (a new folder each time, so two restarts in one second never meet),
 * said, so that the new run's checkpoints never mix with them (keeping the last N would delete the new ones
 * as older steps, and --resume or sample would take the old run's newest). */
static void move_aside(const char *run_dir, long long found) {
    char prefix[1200], aside[1300], from[1600], to[1600];
    snprintf(prefix, sizeof prefix, "%s/replaced_", run_dir);
    int k = 1;
    for (aside_name(prefix, k, aside, sizeof aside); mkdir(aside, 0777) != 0; aside_name(prefix, ++k, aside, sizeof aside))
        if (errno != EEXIST || k >= 1000)
            die("run_dir '%s' holds this run's checkpoints up to step %lld, and %s cannot be made to keep them: %s\n"
                "  hint: continue with --resume=1, or move them away yourself", run_dir, found, aside, strerror(errno));
    DIR *d = opendir(run_dir);
    if (!d) die("cannot list run_dir '%s': %s", run_dir, strerror(errno));
    int moved = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "ckpt_", 5)) continue;
        snprintf(from, sizeof from, "%s/%s", run_dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", aside, e->d_name);
        if (rename(from, to) != 0)
            die("cannot move '%s' aside to %s: %s\n  hint: continue with --resume=1, or move the checkpoints away yourself", from, aside,
                strerror(errno));
        moved++;
    }
    closedir(d);
    printf("note  | '%s' held this run's checkpoints up to step %lld; starting over from step 0, its %d checkpoint folder(s) moved "
           "to %s (--resume=1 would have continued from them)\n", run_dir, found, moved, aside);
}

void trainer_claim_run_dir(Trainer *tr, const char *text) {
    const Config *c = &tr->cfg;
    const Comm *comm = &tr->comm;
    if (c->max_steps == 0 || c->checkpoint_every < 0) return;   /* writes no checkpoint */
    int lead = comm->rank == 0;
    char path[1200] = "", why[2048] = "";
    long long found = lead ? checkpoint_find_latest(c->run_dir, path, sizeof path) : -1;
    if (c->resume) {   /* a run already at max_steps writes nothing: it only says so (train/main.c) */
        if (lead && found < c->max_steps) lock_run_dir(c->run_dir);   /* refused: die() ends every rank (MPI_Abort) */
        return;
    }
    /* refused before the lock, so that a run that stops here leaves the other run's folder exactly as it was */
    int other = found >= 0 && !checkpoint_same_run(path, text, why, sizeof why);
    if (comm_max(comm, GROUP_WORLD, (double)other) != 0) {
        launch_errors_rank0_only(1);
        die("run_dir '%s' holds another run's checkpoints (%s: %s); starting this run there would write over them\n"
            "  hint: give this run its own folder (--run_dir=runs/NAME), or continue that run with --resume=1 and its own settings",
            c->run_dir, path, why);
    }
    if (!lead) return;
    lock_run_dir(c->run_dir);
    if (found >= 0) move_aside(c->run_dir, found);
}

/* ------------------------------------------------------------------- the log */

uint32_t trainer_run_id(const Config *c) {
    char *text = mallocCheck(CONFIG_TEXT_BYTES), value[1100], line[1200];
    config_write_text(c, text, CONFIG_TEXT_BYTES);
    uint32_t crc = 0;
    for (int k = 0; ; k++) {   /* the keys checkpoint_same_run compares: checkpoint_fixed_keys, then train_data */
        const char *key = checkpoint_fixed_keys[k] ? checkpoint_fixed_keys[k] : "train_data";
        if (checkpoint_config_value(text, key, value, sizeof value) != 0) value[0] = 0;
        int n = snprintf(line, sizeof line, "%s=%s\n", key, value);
        crc = crc32_update(crc, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        if (!checkpoint_fixed_keys[k]) break;
    }
    free(text);
    return crc;
}

/* Rank 0: flock(LOCK_EX) on the log, held open for the process's life (O_CLOEXEC), so that a second run never
 * moves or mixes a live run's log; created empty when absent (the log is opened for appending next). A lock
 * left by a killed run goes with it, as run_dir's does. */
static int log_fd = -1;

static void lock_log(const char *path) {
    if (log_fd >= 0) close(log_fd);   /* the lock of a log just moved aside: the new one is locked instead */
    log_fd = -1;
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return;   /* the open for writing that follows says what is wrong */
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return; }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
        die("log_jsonl=%s is being written by another run that is still going; give this run its own --log_jsonl or stop that run", path);
    log_fd = fd;
}

void trainer_claim_log(Trainer *tr) {
    const Config *c = &tr->cfg;
    struct stat st;
    if (!c->log_jsonl[0] || tr->comm.rank != 0) return;
    /* a second start of a live run: refused here, naming the run, before its log is touched */
    if (c->max_steps > 0 && c->checkpoint_every >= 0 && !c->memory_report) refuse_if_in_use(c->run_dir);
    if (stat(c->log_jsonl, &st) != 0 || !S_ISREG(st.st_mode)) { lock_log(c->log_jsonl); return; }   /* new, or a device */
    lock_log(c->log_jsonl);
    if (st.st_size == 0) return;
    char err[1400], line[4096] = "", first[4096] = "";
    FILE *f = fopen_regular(c->log_jsonl, "log_jsonl", err, sizeof err);
    if (!f) die("%s", err);
    int records = 0;   /* a log of only header lines (runs refused before step 1) holds nothing to keep apart */
    for (int n = 0; fgets(line, sizeof line, f); n++) {
        if (n == 0) snprintf(first, sizeof first, "%s", line);
        if (strncmp(line, "{\"run\": \"llm3d\"", 15)) { records = 1; break; }
    }
    fclose(f);
    if (strncmp(first, "{\"run\": \"llm3d\"", 15)) {   /* no run's records to keep apart: appended after, never lost */
        printf("note  | log_jsonl=%s already holds something that is not an llm3d log; this run's records follow it\n",
               c->log_jsonl);
        return;
    }
    const char *at = strstr(first, "\"run_id\": \"");
    unsigned theirs = 0;
    int known = at && sscanf(at + 11, "%8x", &theirs) == 1;
    uint32_t ours = trainer_run_id(c);
    if (records && (!known || theirs != ours)) {
        char whose[128];
        if (known) snprintf(whose, sizeof whose, "its run_id is %08x, this run's %08x: the model, seed or train_data differ", theirs, ours);
        else snprintf(whose, sizeof whose, "written by an llm3d without run ids, so whose they are cannot be told");
        die("log_jsonl=%s holds another run's records (%s); appending would mix the two runs\n"
            "  hint: give this run its own --log_jsonl, or move that file away", c->log_jsonl, whose);
    }
    if (c->resume && known && theirs == ours) return;   /* this run continued: its records go on after its own */
    char prefix[1100], aside[1200];
    snprintf(prefix, sizeof prefix, "%s.replaced_", c->log_jsonl);
    int k = 1;
    for (aside_name(prefix, k, aside, sizeof aside); link(c->log_jsonl, aside) != 0; aside_name(prefix, ++k, aside, sizeof aside))
        if (errno != EEXIST || k >= 1000)
            die("log_jsonl=%s holds earlier records, and they cannot be kept as %s: %s\n  hint: move that file away, or give "
                "another --log_jsonl", c->log_jsonl, aside, strerror(errno));
    if (unlink(c->log_jsonl) != 0) die("cannot move log_jsonl=%s aside to %s: %s", c->log_jsonl, aside, strerror(errno));
    lock_log(c->log_jsonl);
    printf("note  | log_jsonl=%s held %s; this run starts the log anew, the earlier one moved to %s\n", c->log_jsonl,
           records ? "this run's records from an earlier start" : "only the header lines of starts that wrote no step", aside);
}
