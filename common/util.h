/* common/util.h — checked calls and small helpers shared by every layer.
 *
 * The idea: a failure is reported once, where it happens, with the file and
 * line, what failed and a hint for the person at the keyboard, then the
 * program exits non-zero. Nothing below returns an error code to ignore. */
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* Print "error: <message>" (printf-style) and exit(1). */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* How die() reports and ends a run of many ranks (comm/launch.c sets it):
 * rank and world for a "[rank r/N]" prefix; with rank0_only, an error every
 * rank meets alike (a bad config) is printed by rank 0 alone while the others
 * wait a moment and exit quietly; end (MPI_Abort) replaces exit(1), so every
 * rank of the job stops and none waits for ever on a peer that died. */
typedef struct { int rank, world, rank0_only; void (*end)(int code); } DieContext;
void die_set_context(DieContext ctx);
DieContext die_get_context(void);

FILE *fopen_check(const char *path, const char *mode, const char *file, int line);
void fread_check(void *dst, size_t size, size_t count, FILE *f, const char *path, const char *file, int line);
void fwrite_check(const void *src, size_t size, size_t count, FILE *f, const char *path, const char *file, int line);
void fclose_check(FILE *f, const char *path, const char *file, int line);
void *malloc_check(size_t bytes, const char *file, int line);
void *calloc_check(size_t count, size_t size, const char *file, int line);

#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)
#define freadCheck(dst, size, count, f, path) fread_check(dst, size, count, f, path, __FILE__, __LINE__)
#define fwriteCheck(src, size, count, f, path) fwrite_check(src, size, count, f, path, __FILE__, __LINE__)
#define fcloseCheck(f, path) fclose_check(f, path, __FILE__, __LINE__)
#define mallocCheck(bytes) malloc_check(bytes, __FILE__, __LINE__)
#define callocCheck(count, size) calloc_check(count, size, __FILE__, __LINE__)

/* Writing files: atomic_open / atomic_commit, the one output door (output.h). */
#include "output.h"

/* Wall-clock seconds from a monotonic clock. */
double now_seconds(void);

/* splitmix64-seeded xorshift random numbers: the only RNG in llm3d, so a run
 * is reproducible from its seed and the state is one 64-bit word to save. */
typedef struct { uint64_t s; } Rng;
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
float rng_uniform(Rng *r);              /* [0, 1) */
float rng_normal(Rng *r);               /* N(0, 1), Box-Muller */

/* ---- reading untrusted files ------------------------------------------------
 * Every size computed from a field of a file goes through these: each returns
 * 1 and stores the result when it fits, 0 when it would overflow. */
static inline int add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline int mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline int mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* Readers of files come in pairs: x_try_y(..., char *err, size_t err_size)
 * returns -1 (or NULL) with one line in err naming the file, the field and what
 * is wrong, and leaves nothing allocated; x_y calls it and dies with that line.
 * Programs call x_y; tests and the fuzz harnesses (tests/fuzz/) call x_try_y. */

/* Opens path for reading if it is a regular file (never blocks on a FIFO, never
 * reads a device); returns the fd and its size, or -1 with a message in err. */
int open_regular(const char *path, const char *what, int64_t *size, char *err, size_t err_size);
/* open_regular as a stdio stream for reading; NULL with the message in err. */
FILE *fopen_regular(const char *path, const char *what, char *err, size_t err_size);
/* Whether an output can be written, asked before the work that makes it starts
 * (at most a probe file is made and removed): with folder, path is a folder made on demand (mkdir -p),
 * so it must be a writable folder or its nearest existing ancestor must be; else
 * path is a file: a regular file (never a device, FIFO, socket or folder, nor a link
 * to one: the output door replaces only regular files) in a writable folder, or absent
 * in a writable folder. 0, or
 * -1 with one line naming what (the key) and path in err. */
int check_writable(const char *path, int folder, const char *what, char *err, size_t err_size);
/* A whole regular file of at most max_bytes, NUL-terminated; NULL with a message
 * in err. what names the kind of file in messages ("config file"). */
char *read_regular(const char *path, const char *what, size_t max_bytes, size_t *size, char *err, size_t err_size);
/* CRC32 (the zlib / IEEE polynomial, so Python's zlib.crc32 agrees), slicing-by-8,
 * about 1.5 GB/s a core. Pass 0 to start; chain calls to checksum in pieces. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t bytes);
/* Bytes of s[0..n) that are not part of valid UTF-8 (overlong forms, surrogates,
 * code points past U+10FFFF and cut-short sequences count). */
size_t utf8_invalid_bytes(const uint8_t *s, size_t n);

/* The number after "key": in one JSON object of llm3d's own logs (a JSONL line, a profile); NAN when the
 * key is absent or null (what a diverged step's nan loss is written as). Strict: a value that is not a whole finite number (strtod to a ',', '}', ']', space or end)
 * dies naming the file, the line (0: the file is one object) and the key. The one reader of plot, scale
 * and plan. */
double json_number(const char *text, const char *key, const char *file, int line);

/* v written with fmt into buf, or "null" when v is nan or infinite (JSON has no word for them). Returns buf. */
const char *json_real(char *buf, size_t size, const char *fmt, double v);

/* Bytes as "12.3 MiB". Returns buf. */
const char *format_bytes(double bytes, char *buf, size_t size);
