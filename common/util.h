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
/* How die() reports and ends a run of many ranks (parallel/launch.c sets it):
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

/* Write a whole file atomically: data goes to "<path>.tmp", is flushed and
 * fsync'ed, then renamed over <path>. A crash at any moment leaves either the
 * old file or the new one, never a half-written one. */
FILE *atomic_open(const char *path, char *tmp_path, size_t tmp_size);
void atomic_commit(FILE *f, const char *tmp_path, const char *path);

/* Wall-clock seconds from a monotonic clock. */
double now_seconds(void);

/* splitmix64-seeded xorshift random numbers: the only RNG in llm3d, so a run
 * is reproducible from its seed and the state is one 64-bit word to save. */
typedef struct { uint64_t s; } Rng;
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
float rng_uniform(Rng *r);              /* [0, 1) */
float rng_normal(Rng *r);               /* N(0, 1), Box-Muller */

/* Bytes as "12.3 MiB". Returns buf. */
const char *format_bytes(double bytes, char *buf, size_t size);
