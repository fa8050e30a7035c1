/* data/shard.h — the token shard file: what the loader reads and `prepare` writes.
 *
 * A shard is a 256 x int32 header followed by the tokens:
 *   header[0] = SHARD_MAGIC, header[1] = SHARD_VERSION,
 *   header[2], header[3] = token count (low, high 32 bits: shards may exceed 2^31 tokens),
 *   header[4] = bytes per token (2 = uint16, 4 = uint32),
 *   header[5] = vocabulary size the ids were made with (0 = unknown),
 *   the rest zero.
 * The file size must equal 1024 + count * width exactly; a reader checks every
 * field and says in words what is wrong. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 0x4452414d  /* "MARD" little-endian: Model-ready tokens */
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

typedef struct {
    char path[1024];
    int64_t n_tokens;
    int width;              /* bytes per token: 2 or 4 */
    int vocab_size;         /* 0 if unknown */
    const uint8_t *map;     /* the whole file, mmap'ed read-only */
    size_t map_bytes;
} Shard;

/* Open and validate; dies with a clear message on any problem. */
void shard_open(Shard *s, const char *path);
void shard_close(Shard *s);
/* Token i of the shard (0 <= i < n_tokens). */
static inline uint32_t shard_token(const Shard *s, int64_t i) {
    const uint8_t *p = s->map + SHARD_HEADER_INTS * 4 + (size_t)i * s->width;
    return s->width == 2 ? (uint32_t)(p[0] | (p[1] << 8)) : (uint32_t)(p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24));
}
/* Write tokens atomically; width 2 if every id < 65536, else 4. */
void shard_write(const char *path, const uint32_t *tokens, int64_t n_tokens, int vocab_size);
