/* tests/fuzz/fuzz.h — what every libFuzzer harness in tests/fuzz/ shares.
 *
 * The idea: a harness hands the fuzzer's bytes to a reader exactly as a user
 * would, as a file on disk (readers take paths), through the reader's _try_
 * form (common/util.h), which returns an error instead of dying. So the only
 * outcomes are "accepted" and "refused in words"; anything else — a sanitizer
 * report, a leak, a hang, an exit, an assertion in the harness — is a bug.
 * Files go to a private folder under /dev/shm (memory, not disk), removed at exit. */
#pragma once
#include "../../common/util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static inline void fuzz_remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (fuzz_dir[0] && system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* Makes the private folder once (call from LLVMFuzzerInitialize). */
static inline void fuzz_init(void) {
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/llm3d_fuzz_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(fuzz_dir)) { perror("fuzz: mkdtemp"); abort(); }
    atexit(fuzz_remove_dir);
}

/* The path of name in the private folder (a static buffer per call site is enough: names are fixed). */
static inline const char *fuzz_path(const char *name, char *buf, size_t size) {
    snprintf(buf, size, "%s/%s", fuzz_dir, name);
    return buf;
}

/* Writes data to name in the private folder; returns its path in buf. */
static inline const char *fuzz_write(const char *name, const void *data, size_t n, char *buf, size_t size) {
    fuzz_path(name, buf, size);
    FILE *f = fopen(buf, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) { perror("fuzz: write"); abort(); }
    return buf;
}

/* Splits an input into two files' bytes: a 2-byte little-endian length of the
 * first part, the first part, then the rest. */
static inline void fuzz_split(const uint8_t *data, size_t size, const uint8_t **a, size_t *na, const uint8_t **b, size_t *nb) {
    size_t len = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
    data += size >= 2 ? 2 : size, size -= size >= 2 ? 2 : size;
    if (len > size) len = size;
    *a = data, *na = len, *b = data + len, *nb = size - len;
}

/* Where readers' printed tables go. */
static inline FILE *fuzz_devnull(void) {
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    return f;
}

/* A harness's own check failing: print and abort, so libFuzzer saves the input. */
#define FUZZ_ASSERT(cond, ...) do { if (!(cond)) { fprintf(stderr, "fuzz assertion failed: " __VA_ARGS__); fprintf(stderr, "\n"); abort(); } } while (0)
