/* common/output.c — the output door (see output.h): refuse what is not a
 * regular file, write a uniquely named temporary beside the target, check
 * every write, flush, fsync and close, rename into place; temporaries still
 * open when the program dies are removed. */
#define _POSIX_C_SOURCE 200809L
#include "output.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the temporaries open now, so die() can remove them -------------------- */
#define OPEN_MAX_TMP 32
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { FILE *f; char tmp[PATH_MAX + 32]; } open_tmp[OPEN_MAX_TMP];

static void remember(FILE *f, const char *tmp) {
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < OPEN_MAX_TMP; i++)
        if (!open_tmp[i].f) { open_tmp[i].f = f; snprintf(open_tmp[i].tmp, sizeof open_tmp[i].tmp, "%s", tmp); break; }
    pthread_mutex_unlock(&open_lock);
}

static void forget(FILE *f) {
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < OPEN_MAX_TMP; i++)
        if (open_tmp[i].f == f) open_tmp[i].f = NULL;
    pthread_mutex_unlock(&open_lock);
}

void atomic_abandon_all(void) {
    for (int i = 0; i < OPEN_MAX_TMP; i++)   /* no lock: die() may run while another thread holds it */
        if (open_tmp[i].f) { unlink(open_tmp[i].tmp); open_tmp[i].f = NULL; }
}

/* ---- what a path is ---------------------------------------------------------- */
static const char *kind_words(mode_t m) {
    return S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO (named pipe)" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int output_target_kind(const char *path, char *what_it_is, size_t size) {
    struct stat ls, st;
    if (lstat(path, &ls) != 0) return 0;   /* absent (or its folder is: the temporary's creation says so) */
    if (S_ISREG(ls.st_mode)) return 0;
    if (!S_ISLNK(ls.st_mode)) { snprintf(what_it_is, size, "%s", kind_words(ls.st_mode)); return -1; }
    if (stat(path, &st) != 0) { snprintf(what_it_is, size, "a symbolic link to nothing (%s)", strerror(errno)); return -1; }
    if (S_ISREG(st.st_mode)) return 0;
    snprintf(what_it_is, size, "a symbolic link to %s", kind_words(st.st_mode));
    return -1;
}

static int refuse(const char *path, char *err, size_t err_size) {
    char kind[128];
    if (output_target_kind(path, kind, sizeof kind) == 0) return 0;
    snprintf(err, err_size, "'%s' is %s, not a regular file: llm3d writes only regular files and replaces nothing else\n"
             "  hint: give the path of a regular file, or of one to create", path, kind);
    return -1;
}

/* ---- the door ------------------------------------------------------------------ */
FILE *atomic_try_open(const char *path, char *tmp_path, size_t tmp_size, char *err, size_t err_size) {
    if (refuse(path, err, err_size) != 0) return NULL;
    char target[PATH_MAX];
    struct stat ls;
    /* a link to a regular file: replace the file it points to, keep the link */
    if (lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode) && realpath(path, target)) path = target;
    static unsigned counter;
    uint64_t seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed ^= (uint64_t)ts.tv_nsec << 20;
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t x = seed + 0x2545F4914F6CDD1Dull * (uint64_t)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        x ^= x >> 29; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 32;
        char suffix[7];
        for (int k = 0; k < 6; k++) { suffix[k] = digits[x % 62]; x /= 62; }
        suffix[6] = 0;
        if ((size_t)snprintf(tmp_path, tmp_size, "%s.tmp.%s", path, suffix) >= tmp_size) {
            snprintf(err, err_size, "'%s': the path is too long for llm3d's buffers\n  hint: give a shorter path", path);
            return NULL;
        }
        int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            snprintf(err, err_size, "cannot write '%s': creating its temporary '%s' failed: %s\n  hint: is its folder there, writable and "
                     "not full?", path, tmp_path, strerror(errno));
            return NULL;
        }
        struct stat old;
        if (stat(path, &old) == 0) fchmod(fd, old.st_mode & 07777);   /* a private file's successor stays private */
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            snprintf(err, err_size, "cannot write '%s': %s", path, strerror(errno));
            close(fd);
            unlink(tmp_path);
            return NULL;
        }
        remember(f, tmp_path);
        return f;
    }
    snprintf(err, err_size, "cannot write '%s': no free temporary name beside it", path);
    return NULL;
}

FILE *atomic_open(const char *path, char *tmp_path, size_t tmp_size) {
    char err[PATH_MAX * 2 + 300];
    FILE *f = atomic_try_open(path, tmp_path, tmp_size, err, sizeof err);
    if (!f) die("%s", err);
    return f;
}

void atomic_abandon(FILE *f, const char *tmp_path) {
    forget(f);
    fclose(f);
    unlink(tmp_path);
}

int atomic_try_commit(FILE *f, const char *tmp_path, const char *path, char *err, size_t err_size) {
    int e = 0;
    const char *step = NULL;
    errno = 0;
    if (ferror(f)) { step = "writing"; fflush(f); e = errno ? errno : EIO; }   /* a write failed earlier: flushing again says why */
    else if (fflush(f) != 0) { step = "writing"; e = errno; }
    else if (fsync(fileno(f)) != 0 && errno != EINVAL) { step = "syncing"; e = errno; }
    forget(f);
    if (fclose(f) != 0 && !step) { step = "closing"; e = errno; }
    /* a link to a regular file: rename onto the file it points to (the temporary lies beside it) */
    char target[PATH_MAX];
    struct stat ls;
    if (!step && lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode) && realpath(path, target)) path = target;
    if (!step && refuse(path, err, err_size) != 0) { unlink(tmp_path); return -1; }   /* became one while we wrote */
    if (!step && rename(tmp_path, path) != 0) { step = "renaming into place"; e = errno; }
    if (!step) return 0;
    unlink(tmp_path);
    snprintf(err, err_size, "%s '%s' failed: %s\n  hint: is the disk full, or the folder read-only? the temporary was removed and "
             "the earlier '%s' (if any) is untouched", step, path, strerror(e), path);
    return -1;
}

void atomic_commit(FILE *f, const char *tmp_path, const char *path) {
    char err[PATH_MAX * 2 + 300];
    if (atomic_try_commit(f, tmp_path, path, err, sizeof err) != 0) die("%s", err);
}

FILE *append_open(const char *path, const char *key, char *err, size_t err_size) {
    char kind[128];
    if (output_target_kind(path, kind, sizeof kind) != 0) {
        snprintf(err, err_size, "%s=%s is %s, not a regular file\n  hint: give %s the path of a regular file, or of one to create",
                 key, path, kind, key);
        return NULL;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {   /* replaced between the look and the open */
        snprintf(err, err_size, "%s=%s is not a regular file\n  hint: give %s the path of a regular file", key, path, key);
        close(fd);
        return NULL;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        snprintf(err, err_size, "cannot open %s=%s for appending: %s\n  hint: is its folder there and writable?", key, path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return f;
}

int output_copy_file(const char *from, const char *to, char *err, size_t err_size) {
    FILE *in = fopen_regular(from, "file", err, err_size);
    if (!in) return -1;
    char tmp[PATH_MAX + 32], buf[1 << 16];
    FILE *out = atomic_try_open(to, tmp, sizeof tmp, err, err_size);
    if (!out) { fclose(in); return -1; }
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) break;   /* the commit sees the stream's error and says it */
    int bad = ferror(in);
    fclose(in);
    if (bad) { atomic_abandon(out, tmp); snprintf(err, err_size, "reading '%s' failed", from); return -1; }
    return atomic_try_commit(out, tmp, to, err, err_size);
}
