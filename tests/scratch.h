/* tests/scratch.h — the scratch files of a reader test (test_readers, test_hostile):
 * path_of names a file in the test's scratch folder, write_file and read_file move
 * whole files, REFUSED checks that a reader said no with the words expected,
 * scratch_save_checkpoint saves a small model's checkpoint under any config text,
 * scratch_remove removes the folder at the end (nftw: the path never reaches a shell).
 * The including test defines `dir` (its folder, a mkdtemp template) and `err` (the
 * readers' message buffer) before including this file. */
#pragma once
#include "test.h"
#include "../checkpoint/checkpoint.h"
#include "../common/util.h"
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* dir/name, in one of 64 rotating buffers: copy it to keep it long. */
static inline const char *path_of(const char *name) {
    static char p[64][512];
    static int k;
    k = (k + 1) % 64;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static inline void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopenCheck(path, "wb");
    if (n) fwriteCheck(data, 1, n, f, path);
    fcloseCheck(f, path);
}

static inline uint8_t *read_file(const char *path, size_t *n) {
    uint8_t *b = (uint8_t *)read_regular(path, "test file", (size_t)1 << 30, n, err, sizeof err);
    if (!b) die("%s", err);
    return b;
}

/* rc: what the reader returned, non-zero meaning refused (for pointers: pass ptr == NULL) */
#define REFUSED(rc, needle, what) CHECK((rc) != 0 && strstr(err, needle), "%s: want an error with '%s', got rc %d: %s", what, needle, (int)(rc), err)

/* A checkpoint (step 1, no optimizer state) of the model model_text describes, its random
 * weights saved under the config text `text`: the two disagree where a test makes them. */
static inline void scratch_save_checkpoint(const char *run, const char *model_text, const char *text, char *ckpt, size_t size) {
    ModelConfig mc;
    CHECK(checkpoint_model_config(model_text, &mc, err, sizeof err) == 0, "fixture config: %s", err);
    Comm comm;
    comm_init_one(&comm);
    Model m;
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 4, RECOMPUTE_NONE);
    model_init_weights(&m, 7, 0.02f);
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = 1, .loss_scale = 1, .optimizer = CKPT_OPT_NONE};
    checkpoint_save(run, 0, &m, NULL, 0, &s, text, ckpt, size);
    model_free(&m);
}

static int scratch_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}
/* Removes folder path and everything in it, children first, links not followed. */
static inline void scratch_remove(const char *path) {
    if (nftw(path, scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) printf("note: could not remove %s\n", path);
}
