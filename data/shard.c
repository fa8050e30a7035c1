/* data/shard.c — read (mmap, validated, checked chunk by chunk) and write
 * (atomic, checksummed) token shards. */
#define _POSIX_C_SOURCE 200809L
#include "shard.h"
#include "../common/util.h"
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- a shard changed under a running job -------------------------------------
 * A shard is mmap'ed whole. If another process truncates it (prepare rewriting it
 * in place, a full copy cut short), reading a page past its new end raises SIGBUS,
 * which would kill the run with no word. The handler below looks the faulting
 * address up among the open shards and ends the process with one line naming the
 * file (write(2) and _exit: async-signal-safe); a SIGBUS anywhere else goes to the
 * handler that was there before (the default: a core with the real stack). */
enum { MAX_MAPPED = 1024 };
static struct { const uint8_t *start, *end; char *path; } mapped[MAX_MAPPED];
static struct sigaction sigbus_before;
static int sigbus_installed;

static void say(const char *s) {
    size_t n = strlen(s);
    while (n) { ssize_t w = write(2, s, n); if (w <= 0) break; s += w; n -= (size_t)w; }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const uint8_t *a = (const uint8_t *)si->si_addr;
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped[i].start && a >= mapped[i].start && a < mapped[i].end) {
            say("error: token shard '");
            say(mapped[i].path);
            say("' changed while this run was reading it: it is shorter than when it was opened\n"
                "  hint: never rewrite or truncate shards a job is reading (write new ones under new names); "
                "restore it and resume from the last checkpoint with --resume=1\n");
            _exit(1);
        }
    sigaction(SIGBUS, &sigbus_before, NULL);   /* not a shard's page: the fault repeats under the old handler */
    (void)sig; (void)uc;
}

static void watch_map(const uint8_t *map, size_t bytes, const char *path) {
    if (!sigbus_installed) {
        struct sigaction sa = {0};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &sigbus_before);
        sigbus_installed = 1;
    }
    for (int i = 0; i < MAX_MAPPED; i++)
        if (!mapped[i].start) {
            mapped[i].path = strdup(path);
            mapped[i].end = map + bytes;
            atomic_signal_fence(memory_order_release);   /* the compiler keeps path and end before start */
            mapped[i].start = map;   /* last: the handler sees a whole entry or none */
            return;
        }
}

static void unwatch_map(const uint8_t *map) {
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped[i].start == map) {
            mapped[i].start = NULL;
            free(mapped[i].path);
            mapped[i].path = NULL;
            return;
        }
}

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)

/* Tokens per chunk: the smallest multiple of 2^20 that needs at most SHARD_MAX_CHUNKS chunks. */
static int64_t chunk_tokens_for(int64_t n) {
    int64_t c = SHARD_MIN_CHUNK_TOKENS;
    while (c * SHARD_MAX_CHUNKS < n) c += SHARD_MIN_CHUNK_TOKENS;
    return c;
}

int shard_open(Shard *s, const char *path, char *err, size_t err_size) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    void *map = MAP_FAILED;
    int64_t file_bytes;
    int fd = open_regular(path, "token shard", &file_bytes, err, err_size);
    if (fd < 0) return -1;
    size_t bytes = (size_t)file_bytes;
    if (bytes < SHARD_HEADER_INTS * 4)
        FAIL("token shard '%s' is %zu bytes, shorter than its 1024-byte header\n  hint: the file is truncated or not a shard; "
             "regenerate it with `build/train prepare`", path, bytes);
    map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) FAIL("cannot map token shard '%s': %s", path, strerror(errno));
    int32_t h[SHARD_HEADER_INTS];
    memcpy(h, map, sizeof h);
    if (h[0] != SHARD_MAGIC)
        FAIL("'%s' is not a token shard (magic 0x%08x, expected 0x%08x)\n  hint: make shards with `build/train prepare`",
             path, (unsigned)h[0], SHARD_MAGIC);
    if (h[1] != 1 && h[1] != SHARD_VERSION)
        FAIL("token shard '%s' has version %d; this build reads versions 1 and %d\n  hint: regenerate it with this build's `prepare`",
             path, h[1], SHARD_VERSION);
    if (h[1] >= 2 && crc32_update(0, h, 4 * (SHARD_HEADER_INTS - 1)) != (uint32_t)h[SHARD_HEADER_INTS - 1])
        FAIL("token shard '%s': header checksum mismatch: the header is damaged\n  hint: regenerate it with `build/train prepare`", path);
    int64_t n = (int64_t)((uint64_t)(uint32_t)h[2] | (uint64_t)(uint32_t)h[3] << 32);
    int width = h[4];
    if (width != 2 && width != 4)
        FAIL("token shard '%s' says %d bytes per token; only 2 and 4 exist\n  hint: the header is corrupt; regenerate the shard",
             path, width);
    int64_t want;
    if (n < 0 || !mul_i64(n, width, &want) || !add_i64(want, SHARD_HEADER_INTS * 4, &want) || want != file_bytes)
        FAIL("token shard '%s' is %zu bytes but its header promises %lld tokens of %d bytes\n  hint: the file is %s; "
             "regenerate it with `build/train prepare`", path, bytes, (long long)n, width,
             n >= 0 && want > file_bytes ? "truncated" : "damaged or longer than its header says");
    if (h[5] < 0 || h[5] > SHARD_MAX_VOCAB)
        FAIL("token shard '%s': vocabulary size %d in its header is not in [0, %d] (the bound --vocab_size has): the header is "
             "corrupt\n  hint: regenerate the shard with `build/train prepare`", path, h[5], SHARD_MAX_VOCAB);
    if (h[1] >= 2) {
        s->chunk_tokens = h[6];
        s->n_chunks = h[7];
        if (s->chunk_tokens < 1 || s->n_chunks != (n + s->chunk_tokens - 1) / s->chunk_tokens || s->n_chunks > SHARD_MAX_CHUNKS)
            FAIL("token shard '%s': %d checksum chunks of %lld tokens do not cover its %lld tokens: the header is corrupt",
                 path, h[7], (long long)h[6], (long long)n);
    } else {
        fprintf(stderr, "note: token shard '%s' is version 1, without checksums: a damaged byte in it cannot be caught; "
                        "regenerate it with `build/train prepare` to add them\n", path);
    }
    close(fd);
    s->version = h[1];
    s->n_tokens = n;
    s->width = width;
    s->vocab_size = h[5];
    s->map = map;
    s->map_bytes = bytes;
    watch_map(s->map, bytes, path);
    return 0;
fail:
    if (map != MAP_FAILED) munmap(map, bytes);
    close(fd);
    return -1;
}

void shard_close(Shard *s) {
    if (s->map) {
        unwatch_map(s->map);
        munmap((void *)s->map, s->map_bytes);
    }
    s->map = NULL;
}

int shard_check(Shard *s, int64_t first, int64_t count, char *err, size_t err_size) {
    if (first < 0 || count < 0 || first > s->n_tokens - count) {
        snprintf(err, err_size, "token shard '%s': tokens %lld..%lld lie outside its %lld tokens", s->path, (long long)first,
                 (long long)(first + count), (long long)s->n_tokens);
        return -1;
    }
    if (s->n_chunks == 0 || count == 0) return 0;
    const uint32_t *stored = (const uint32_t *)(const void *)(s->map + 8 * 4);
    for (int64_t c = first / s->chunk_tokens; c <= (first + count - 1) / s->chunk_tokens; c++) {
        if (s->checked[c]) continue;
        int64_t t0 = c * s->chunk_tokens, t1 = t0 + s->chunk_tokens < s->n_tokens ? t0 + s->chunk_tokens : s->n_tokens;
        uint32_t crc = crc32_update(0, s->map + SHARD_HEADER_INTS * 4 + (size_t)t0 * s->width, (size_t)(t1 - t0) * s->width);
        uint32_t want;
        memcpy(&want, stored + c, 4);
        if (crc != want) {
            snprintf(err, err_size, "token shard '%s': tokens %lld..%lld fail their checksum (stored %08x, computed %08x): "
                     "the file is damaged\n  hint: regenerate it with `build/train prepare`", s->path, (long long)t0,
                     (long long)t1, want, crc);
            return -1;
        }
        s->checked[c] = 1;
    }
    return 0;
}

void shard_write(const char *path, const uint32_t *tokens, int64_t n_tokens, int vocab_size) {
    if (n_tokens < 0 || n_tokens > SHARD_MAX_TOKENS)
        die("a token shard holds at most %lld tokens, not %lld\n  hint: use a smaller --shard-tokens",
            (long long)SHARD_MAX_TOKENS, (long long)n_tokens);
    int width = 2;
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] > 65535) { width = 4; break; }
    int32_t h[SHARD_HEADER_INTS] = {0};
    int64_t chunk = chunk_tokens_for(n_tokens);
    h[0] = SHARD_MAGIC;
    h[1] = SHARD_VERSION;
    h[2] = (int32_t)(uint32_t)(n_tokens & 0xffffffff);
    h[3] = (int32_t)(uint32_t)((uint64_t)n_tokens >> 32);
    h[4] = width;
    h[5] = vocab_size;
    h[6] = (int32_t)chunk;
    h[7] = (int32_t)((n_tokens + chunk - 1) / chunk);
    char tmp[1100];
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    fwriteCheck(h, sizeof h, 1, f, tmp);   /* a zero-CRC header first; the real one once the chunks are summed */
    enum { CHUNK = 1 << 16 };
    static uint8_t buf[CHUNK * 4];
    for (int64_t i = 0; i < n_tokens; i += CHUNK) {   /* CHUNK divides chunk (a multiple of 2^20): no piece straddles two chunks */
        int64_t m = n_tokens - i < CHUNK ? n_tokens - i : CHUNK;
        for (int64_t j = 0; j < m; j++) {
            uint32_t t = tokens[i + j];
            for (int b = 0; b < width; b++) buf[j * width + b] = (uint8_t)(t >> (8 * b));
        }
        uint32_t *crc = (uint32_t *)&h[8 + i / chunk];
        *crc = crc32_update(*crc, buf, (size_t)m * width);
        fwriteCheck(buf, width, (size_t)m, f, tmp);
    }
    h[SHARD_HEADER_INTS - 1] = (int32_t)crc32_update(0, h, 4 * (SHARD_HEADER_INTS - 1));
    if (fseek(f, 0, SEEK_SET) != 0) die("cannot seek in '%s': %s", tmp, strerror(errno));
    fwriteCheck(h, sizeof h, 1, f, tmp);
    atomic_commit(f, tmp, path);
}
