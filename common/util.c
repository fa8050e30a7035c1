/* common/util.c — checked file and memory calls, atomic writes, clock, RNG.
 * Every failure names the file and what to do about it, then exits. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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
    if (many && (!die_ctx.rank0_only || die_ctx.rank != 0)) fprintf(stderr, "error: [rank %d/%d] ", die_ctx.rank, die_ctx.world);
    else fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    va_end(ap);
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

FILE *atomic_open(const char *path, char *tmp_path, size_t tmp_size) {
    snprintf(tmp_path, tmp_size, "%s.tmp", path);
    return fopenCheck(tmp_path, "wb");
}

void atomic_commit(FILE *f, const char *tmp_path, const char *path) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;
        fclose(f);
        unlink(tmp_path);
        die("writing '%s' failed: %s\n  hint: is the disk full? the previous '%s' is untouched", tmp_path, strerror(e), path);
    }
    if (fclose(f) != 0) {
        int e = errno;
        unlink(tmp_path);
        die("closing '%s' failed: %s\n  hint: is the disk full? the previous '%s' is untouched", tmp_path, strerror(e), path);
    }
    if (rename(tmp_path, path) != 0) die("renaming '%s' to '%s' failed: %s", tmp_path, path, strerror(errno));
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

const char *format_bytes(double bytes, char *buf, size_t size) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) { bytes /= 1024; i++; }
    snprintf(buf, size, i ? "%.1f %s" : "%.0f %s", bytes, unit[i]);
    return buf;
}
