/* data/shard.c — read (mmap, validated) and write (atomic) token shards. */
#define _POSIX_C_SOURCE 200809L
#include "shard.h"
#include "../common/util.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void shard_open(Shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open token shard '%s': %s\n  hint: run `build/train prepare` to make shards, or fix train_data/val_data",
            path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("cannot stat '%s': %s", path, strerror(errno));
    size_t bytes = (size_t)st.st_size;
    if (bytes < SHARD_HEADER_INTS * 4) {
        close(fd);
        die("token shard '%s' is %zu bytes, shorter than its 1024-byte header\n  hint: the file is truncated or not a shard; "
            "regenerate it with `build/train prepare`", path, bytes);
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) die("cannot map '%s': %s", path, strerror(errno));
    int32_t h[8];                       /* a copy: the messages below outlive the mapping */
    memcpy(h, map, sizeof h);
    if (h[0] != SHARD_MAGIC) {
        munmap(map, bytes);
        die("'%s' is not a token shard (magic 0x%08x, expected 0x%08x)\n  hint: make shards with `build/train prepare`",
            path, (unsigned)h[0], SHARD_MAGIC);
    }
    if (h[1] != SHARD_VERSION) {
        munmap(map, bytes);
        die("token shard '%s' has version %d; this build reads version %d\n  hint: regenerate it with this build's `prepare`",
            path, h[1], SHARD_VERSION);
    }
    int64_t n = (int64_t)(uint32_t)h[2] | ((int64_t)(uint32_t)h[3] << 32);
    int width = h[4];
    if (width != 2 && width != 4) {
        munmap(map, bytes);
        die("token shard '%s' says %d bytes per token; only 2 and 4 exist\n  hint: the header is corrupt; regenerate the shard",
            path, width);
    }
    size_t want = SHARD_HEADER_INTS * 4 + (size_t)n * width;
    if (n < 0 || want != bytes) {
        munmap(map, bytes);
        die("token shard '%s' is %zu bytes but its header promises %lld tokens (%zu bytes)\n  hint: the file is %s; "
            "regenerate it with `build/train prepare`", path, bytes, (long long)n, want,
            bytes < want ? "truncated" : "longer than its header says");
    }
    s->n_tokens = n;
    s->width = width;
    s->vocab_size = h[5];
    s->map = map;
    s->map_bytes = bytes;
}

void shard_close(Shard *s) {
    if (s->map) munmap((void *)s->map, s->map_bytes);
    s->map = NULL;
}

void shard_write(const char *path, const uint32_t *tokens, int64_t n_tokens, int vocab_size) {
    int width = 2;
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] > 65535) { width = 4; break; }
    int32_t h[SHARD_HEADER_INTS] = {0};
    h[0] = SHARD_MAGIC;
    h[1] = SHARD_VERSION;
    h[2] = (int32_t)(uint32_t)(n_tokens & 0xffffffff);
    h[3] = (int32_t)(uint32_t)((uint64_t)n_tokens >> 32);
    h[4] = width;
    h[5] = vocab_size;
    char tmp[1100];
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    fwriteCheck(h, sizeof h, 1, f, tmp);
    enum { CHUNK = 1 << 16 };
    static uint8_t buf[CHUNK * 4];
    for (int64_t i = 0; i < n_tokens; i += CHUNK) {
        int64_t m = n_tokens - i < CHUNK ? n_tokens - i : CHUNK;
        for (int64_t j = 0; j < m; j++) {
            uint32_t t = tokens[i + j];
            for (int b = 0; b < width; b++) buf[j * width + b] = (uint8_t)(t >> (8 * b));
        }
        fwriteCheck(buf, width, (size_t)m, f, tmp);
    }
    atomic_commit(f, tmp, path);
}
