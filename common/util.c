/* common/util.c — checked file and memory calls, atomic writes, reading
 * untrusted files (regular files only, bounded), clock, RNG.
 * Every failure names the file and what to do about it. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static DieContext die_ctx = {0, 1, 0, NULL};
void die_set_context(DieContext ctx) { die_ctx = ctx; }
DieContext die_get_context(void) { return die_ctx; }

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    int many = die_ctx.world > 1;
    if (many && die_ctx.rank0_only && die_ctx.rank != 0) {
        /* rank 0 meets the same error and ends the job (die_ctx.end) while this one waits; a
         * rank still alive after that met an error of its own, and says it */
        struct timespec ts = {3, 0};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}   /* a signal (mpirun's SIGTERM) does not cut the wait short */
    }
    char prefix[64] = "error: ", *message = NULL;
    if (many && (!die_ctx.rank0_only || die_ctx.rank != 0)) snprintf(prefix, sizeof prefix, "error: [rank %d/%d] ", die_ctx.rank, die_ctx.world);
    if (vasprintf(&message, fmt, ap) >= 0) fprintf(stderr, "%s%s\n", prefix, message);   /* one write: a reader gets the whole line */
    else fprintf(stderr, "%s(out of memory formatting the message: %s)\n", prefix, fmt);
    free(message);
    fflush(stderr);
    va_end(ap);
    atomic_abandon_all();   /* no temporary of the output door is left behind */
    if (die_ctx.end) die_ctx.end(1);
    exit(1);
}

FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f)
        die("cannot open '%s' (mode %s): %s (%s:%d)\n  hint: check that the path exists and is %s",
            path, mode, strerror(errno), file, line, mode[0] == 'r' ? "readable" : "in a writable folder");
    return f;
}

void fread_check(void *dst, size_t size, size_t count, FILE *f, const char *path, const char *file, int line) {
    size_t got = fread(dst, size, count, f);
    if (got != count) {
        if (feof(f))
            die("'%s' ended early: wanted %zu items of %zu bytes, got %zu (%s:%d)\n  hint: the file is truncated; "
                "regenerate it or use an earlier copy", path, count, size, got, file, line);
        die("read error on '%s': %s (%s:%d)", path, strerror(errno), file, line);
    }
}

void fwrite_check(const void *src, size_t size, size_t count, FILE *f, const char *path, const char *file, int line) {
    if (fwrite(src, size, count, f) != count)
        die("write to '%s' failed: %s (%s:%d)\n  hint: is the disk full?", path, strerror(errno), file, line);
}

void fclose_check(FILE *f, const char *path, const char *file, int line) {
    if (fclose(f) != 0)
        die("closing '%s' failed: %s (%s:%d)\n  hint: is the disk full?", path, strerror(errno), file, line);
}

void *malloc_check(size_t bytes, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of host memory asking for %zu bytes (%s:%d)\n  hint: use a smaller model or batch", bytes, file, line);
    return p;
}

void *calloc_check(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die("out of host memory asking for %zu x %zu bytes (%s:%d)\n  hint: use a smaller model or batch", count, size, file, line);
    return p;
}

int open_regular(const char *path, const char *what, int64_t *size, char *err, size_t err_size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* O_NONBLOCK: a FIFO must not hang the open */
    if (fd < 0) {
        snprintf(err, err_size, "cannot open %s '%s': %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "%s '%s' is not a regular file (a folder, device, FIFO or socket)\n  hint: give the path of the file itself",
                 what, path);
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (int64_t)st.st_size;
    return fd;
}

FILE *fopen_regular(const char *path, const char *what, char *err, size_t err_size) {
    int64_t n;
    int fd = open_regular(path, what, &n, err, err_size);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (fd >= 0 && !f) {
        snprintf(err, err_size, "cannot open %s '%s': %s", what, path, strerror(errno));
        close(fd);
    }
    return f;
}

/* 0 when a file can be created in folder dir: one is made and removed at once (access() alone
 * says yes to root on a read-only NFS export or procfs); else errno. */
static int probe_folder(const char *dir) {
    char probe[4200];
    char host[64] = "";
    gethostname(host, sizeof host - 1);   /* ranks of several hosts may probe one shared folder with the same pid */
    snprintf(probe, sizeof probe, "%s/.llm3d_write_probe_%.63s_%d", dir, host, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    close(fd);
    unlink(probe);
    return 0;
}

int check_writable(const char *path, int folder, const char *what, char *err, size_t err_size) {
    char p[4096];
    snprintf(p, sizeof p, "%s", *path ? path : ".");
    struct stat st;
    char kind[128];
    if (!folder && output_target_kind(p, kind, sizeof kind) != 0) {   /* the output door's rule, said before the work starts */
        snprintf(err, err_size, "%s=%s is %s, not a regular file\n  hint: give %s the path of a regular file, or of one to create",
                 what, path, kind, what);
        return -1;
    }
    if (stat(p, &st) == 0) {
        if (folder && !S_ISDIR(st.st_mode)) {
            snprintf(err, err_size, "%s=%s is %s, not a folder\n  hint: give %s a folder path", what, path,
                     S_ISREG(st.st_mode) ? "a file" : "a special file", what);
            return -1;
        }
        if (!folder) {   /* the door writes a temporary beside it and renames: the folder must take new entries */
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", p);
            char *slash = strrchr(dir, '/');
            if (!slash) snprintf(dir, sizeof dir, ".");
            else if (slash == dir) dir[1] = 0;
            else *slash = 0;
            int e = probe_folder(dir);
            if (e) {
                snprintf(err, err_size, "%s=%s cannot be replaced: its folder '%s': %s\n  hint: choose a file in a writable folder",
                         what, path, dir, strerror(e));
                return -1;
            }
        }
        int e = folder ? probe_folder(p) : access(p, W_OK) != 0 ? errno : 0;
        if (e) {
            snprintf(err, err_size, "%s=%s cannot be written: %s\n  hint: choose a %s on a writable filesystem", what, path,
                     strerror(e), folder ? "folder" : "file");
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT && errno != ENOTDIR) { snprintf(err, err_size, "%s=%s: %s", what, path, strerror(errno)); return -1; }
    /* absent: the nearest existing ancestor must be a folder this process may create entries in */
    for (;;) {
        char *slash = strrchr(p, '/');
        if (!slash) snprintf(p, sizeof p, ".");
        else if (slash == p) p[1] = 0;
        else *slash = 0;
        if (stat(p, &st) == 0) break;
        if ((errno != ENOENT && errno != ENOTDIR) || !strcmp(p, ".") || !strcmp(p, "/")) { snprintf(err, err_size, "%s=%s: %s", what, path, strerror(errno)); return -1; }
        if (!folder) { snprintf(err, err_size, "%s=%s: its folder '%s' does not exist\n  hint: create it first", what, path, p); return -1; }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "%s=%s cannot be made: '%s' is a file, not a folder\n  hint: choose another %s", what, path, p, what);
        return -1;
    }
    int e = probe_folder(p);
    if (e) {
        snprintf(err, err_size, "%s=%s cannot be made in '%s': %s\n  hint: choose a %s on a writable filesystem", what, path, p,
                 strerror(e), folder ? "folder" : "file");
        return -1;
    }
    return 0;
}

char *read_regular(const char *path, const char *what, size_t max_bytes, size_t *size, char *err, size_t err_size) {
    int64_t n;
    int fd = open_regular(path, what, &n, err, err_size);
    if (fd < 0) return NULL;
    if ((uint64_t)n > max_bytes) {
        snprintf(err, err_size, "%s '%s' is %lld bytes, more than the %zu a %s may have\n  hint: is it the right file?",
                 what, path, (long long)n, max_bytes, what);
        close(fd);
        return NULL;
    }
    char *buf = mallocCheck((size_t)n + 1);
    size_t got = 0;
    while (got < (size_t)n) {
        ssize_t r = read(fd, buf + got, (size_t)n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(err, err_size, "reading %s '%s' failed after %zu of %lld bytes: %s", what, path, got, (long long)n,
                     r < 0 ? strerror(errno) : "it shrank while being read");
            free(buf);
            close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *size = got;
    return buf;
}

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t bytes) {
    if (!crc_table[0][1]) crc_init();
    const uint8_t *p = data;
    crc = ~crc;
    while (bytes >= 8) {    /* slicing-by-8: eight table look-ups per 8 bytes */
        uint32_t a = crc ^ (uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)(p[4] | p[5] << 8 | p[6] << 16 | (uint32_t)p[7] << 24);
        crc = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^ crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^
              crc_table[3][b & 0xff] ^ crc_table[2][(b >> 8) & 0xff] ^ crc_table[1][(b >> 16) & 0xff] ^ crc_table[0][b >> 24];
        p += 8; bytes -= 8;
    }
    while (bytes--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

size_t utf8_invalid_bytes(const uint8_t *s, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        int ok = k > 0 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = (s[i + j] & 0xc0) == 0x80;
        if (ok && k == 3) ok = !(c == 0xe0 && s[i + 1] < 0xa0) && !(c == 0xed && s[i + 1] >= 0xa0);   /* overlong, surrogate */
        if (ok && k == 4) ok = !(c == 0xf0 && s[i + 1] < 0x90) && !(c == 0xf4 && s[i + 1] >= 0x90);   /* overlong, > U+10FFFF */
        if (ok) i += k;
        else bad++, i++;
    }
    return bad;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;   /* splitmix64 so nearby seeds give unrelated streams */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t rng_u64(Rng *r) {                       /* xorshift64* */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

float rng_uniform(Rng *r) { return (rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(Rng *r) {
    float u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

double json_number(const char *text, const char *key, const char *file, int line) {
    size_t n = strlen(key);
    for (const char *p = strchr(text, '"'); p; p = strchr(p + 1, '"')) {
        if (strncmp(p + 1, key, n) || p[1 + n] != '"') continue;
        const char *v = p + 2 + n;
        while (*v == ' ') v++;
        if (*v != ':') continue;   /* a string value equal to the key, not the key */
        v++;
        while (*v == ' ') v++;
        if (!strncmp(v, "null", 4) && strchr(",}] \n", v[4] ? v[4] : ' ')) return NAN;   /* a value the writer had none for (a nan loss) */
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || !isfinite(x) || !(*end == ',' || *end == '}' || *end == ']' || *end == ' ' || *end == '\n' || *end == 0) ||
            (*v != '-' && (*v < '0' || *v > '9')))
            die("'%s'%s%.0d: \"%s\" is %.*s, not a finite number\n  hint: is this file an llm3d log or profile, whole and unedited?",
                file, line ? " line " : "", line, key, (int)strcspn(v, ",}\n"), v);
        return x;
    }
    return NAN;
}

const char *json_real(char *buf, size_t size, const char *fmt, double v) {
    if (isfinite(v)) snprintf(buf, size, fmt, v);
    else snprintf(buf, size, "null");
    return buf;
}

const char *format_bytes(double bytes, char *buf, size_t size) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) { bytes /= 1024; i++; }
    snprintf(buf, size, i ? "%.1f %s" : "%.0f %s", bytes, unit[i]);
    return buf;
}
