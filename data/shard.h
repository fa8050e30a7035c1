/* data/shard.h — the token shard file: what the loader reads and `prepare` writes.
 *
 * A shard is a 256 x int32 header followed by the tokens:
 *   header[0] = SHARD_MAGIC, header[1] = SHARD_VERSION,
 *   header[2], header[3] = token count (low, high 32 bits: shards may exceed 2^31 tokens),
 *   header[4] = bytes per token (2 = uint16, 4 = uint32),
 *   header[5] = vocabulary size the ids were made with (0 = unknown),
 *   header[6] = tokens per checksum chunk, header[7] = number of chunks,
 *   header[8 ...] = CRC32 of each chunk's token bytes (at most SHARD_MAX_CHUNKS),
 *   header[255] = CRC32 of header[0..254]; the rest zero.
 * The file size must equal 1024 + count * width exactly; a reader checks every
 * field and says in words what is wrong.
 *
 * The idea of the chunks: a flipped byte must be caught before anything trains
 * on it, but a shard can be gigabytes and opening it must stay instant. So the
 * tokens are checksummed in at most SHARD_MAX_CHUNKS chunks (multiples of 2^20
 * tokens), and a chunk is checked the first time a sample touches it
 * (shard_check): each byte is read once more in a whole run, spread over it.
 * Version 1 shards (no checksums) are still read, with a note. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 0x4452414d  /* "MARD" little-endian: Model-ready tokens */
#define SHARD_VERSION 2
#define SHARD_HEADER_INTS 256
#define SHARD_MAX_CHUNKS 240
#define SHARD_MAX_VOCAB (1 << 24)      /* = the most vocab_size may be (train/config.c) */
#define SHARD_MIN_CHUNK_TOKENS (1 << 20)
#define SHARD_MAX_TOKENS ((int64_t)SHARD_MAX_CHUNKS << 30)   /* chunks of at most 2^30 tokens: header ints */

typedef struct {
    char path[1024];
    int version;
    int64_t n_tokens;
    int width;              /* bytes per token: 2 or 4 */
    int vocab_size;         /* 0 if unknown */
    int64_t chunk_tokens;   /* tokens per checksum chunk (version 2) */
    int n_chunks;           /* 0 for version 1: nothing to check */
    uint8_t checked[SHARD_MAX_CHUNKS];   /* chunk c has passed its checksum */
    const uint8_t *map;     /* the whole file, mmap'ed read-only */
    size_t map_bytes;
} Shard;

/* Open and validate the header; returns 0, or -1 with one line in err. */
int shard_open(Shard *s, const char *path, char *err, size_t err_size);
void shard_close(Shard *s);
/* Checks the chunks holding tokens [first, first + count) that were not checked
 * yet; returns 0, or -1 with a message naming the file and the tokens. */
int shard_check(Shard *s, int64_t first, int64_t count, char *err, size_t err_size);
/* Token i of the shard (0 <= i < n_tokens). */
static inline uint32_t shard_token(const Shard *s, int64_t i) {
    const uint8_t *p = s->map + SHARD_HEADER_INTS * 4 + (size_t)i * s->width;
    return s->width == 2 ? (uint32_t)(p[0] | (p[1] << 8)) : (uint32_t)(p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24));
}
/* Write tokens atomically; width 2 if every id < 65536, else 4. */
void shard_write(const char *path, const uint32_t *tokens, int64_t n_tokens, int vocab_size);
