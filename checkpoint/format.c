/* checkpoint/format.c — writing and validating llm3d tensor files, CRC32, slice reads,
 * and the fp32 <-> bf16 / fp16 conversions that safetensors import and export need. */
#define _POSIX_C_SOURCE 200809L
#include "format.h"
#include "../common/util.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

size_t ckpt_dtype_size(int dtype) {
    static const size_t size[CKPT_N_DTYPES] = {4, 2, 2, 1, 4, 8};
    return dtype >= 0 && dtype < CKPT_N_DTYPES ? size[dtype] : 0;
}

const char *ckpt_dtype_name(int dtype) {
    static const char *name[CKPT_N_DTYPES] = {"f32", "bf16", "f16", "u8", "i32", "i64"};
    return dtype >= 0 && dtype < CKPT_N_DTYPES ? name[dtype] : "?";
}

/* ----------------------------------------------------------- conversions */

float ckpt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float ckpt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);                 /* inf / nan */
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);             /* normal: rebias 15 -> 127 */
    else if (!man) u = sign;                                               /* zero */
    else {                                                                 /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t ckpt_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* quiet nan */
    u += 0x7fff + ((u >> 16) & 1);                                              /* round to nearest even */
    return (uint16_t)(u >> 16);
}

uint16_t ckpt_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);                  /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                 /* rounds past 65504: inf */
    if (a < 0x38800000u) {                                                 /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;                        /* below half the smallest subnormal */
        uint32_t man = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(a >> 23);                                  /* 14..24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfff + ((a >> 13) & 1) - (112u << 23);               /* rebias, round to nearest even */
    return (uint16_t)(sign | (r >> 13));
}

const char *ckpt_shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim; d++) {
        int k = snprintf(buf + o, size - o, d ? "x%lld" : "%lld", (long long)shape[d]);
        if (k < 0 || (size_t)k >= size - o) {   /* cut: end with "..." where it fits */
            if (size >= 4) memcpy(buf + size - 4, "...", 4);
            break;
        }
        o += (size_t)k;
    }
    return buf;
}

/* ------------------------------------------------------------------ writing */

static void put64(int32_t *h, int at, int64_t v) {
    h[at] = (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu);
    h[at + 1] = (int32_t)(uint32_t)((uint64_t)v >> 32);
}
static int64_t get64(const int32_t *h, int at) { return (int64_t)((uint64_t)(uint32_t)h[at] | (uint64_t)(uint32_t)h[at + 1] << 32); }

static void writer_fail(CkptWriter *w, int e) {
    atomic_abandon(w->f, w->tmp);
    die("writing checkpoint file '%s' failed after %lld bytes: %s\n  hint: is the disk full? the temporary file was "
        "removed; '%s' and every earlier checkpoint are untouched", w->tmp, (long long)w->pos, strerror(e), w->path);
}

void ckpt_write_bytes(CkptWriter *w, const void *data, size_t bytes) {
    const char *p = data;
    while (bytes) {   /* in pieces, so the hooks fire at an exact byte */
        size_t n = bytes;
        if (w->hooks.kill_after >= 0 && w->pos + (int64_t)n > w->hooks.kill_after) {
            n = (size_t)(w->hooks.kill_after - w->pos);
            if (n == 0) {
                fflush(w->f);
                fprintf(stderr, "test hook: SIGKILL while writing '%s' at byte %lld\n", w->tmp, (long long)w->pos);
                kill(getpid(), SIGKILL);
            }
        }
        if (w->hooks.fail_after >= 0 && w->pos + (int64_t)n > w->hooks.fail_after) {
            n = (size_t)(w->hooks.fail_after - w->pos);
            if (n == 0) writer_fail(w, ENOSPC);
        }
        if (fwrite(p, 1, n, w->f) != n) writer_fail(w, errno);
        p += n; bytes -= n; w->pos += (int64_t)n;
    }
}

static void write_pad(CkptWriter *w, int64_t align) {
    static const char zeros[64];
    int64_t pad = (align - w->pos % align) % align;
    ckpt_write_bytes(w, zeros, (size_t)pad);
}

void ckpt_writer_open(CkptWriter *w, const char *path, const CkptState *s, const char *config_text, CkptWriteHooks hooks) {
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->hooks = hooks;
    w->f = atomic_open(path, w->tmp, sizeof w->tmp);
    int32_t *h = w->header;
    size_t config_bytes = config_text ? strlen(config_text) : 0;
    h[CKPT_H_MAGIC] = CKPT_MAGIC;
    h[CKPT_H_VERSION] = CKPT_VERSION;
    h[CKPT_H_KIND] = s->kind;
    put64(h, CKPT_H_CONFIG_BYTES, (int64_t)config_bytes);
    put64(h, CKPT_H_STEP, s->step);
    put64(h, CKPT_H_LOADER_EPOCH, s->loader_epoch);
    put64(h, CKPT_H_LOADER_CURSOR, s->loader_cursor);
    put64(h, CKPT_H_RNG_STATE, (int64_t)s->rng_state);
    h[CKPT_H_HAS_RNG] = s->has_rng;
    memcpy(&h[CKPT_H_LOSS_SCALE], &s->loss_scale, 4);
    h[CKPT_H_CLEAN_STEPS] = s->clean_steps;
    h[CKPT_H_OPTIMIZER] = s->optimizer;
    put64(h, CKPT_H_OPTIMIZER_STEP, s->optimizer_step);
    h[CKPT_H_CONFIG_CRC] = (int32_t)ckpt_crc32(0, config_text ? config_text : "", config_bytes);
    /* a zero header first: a file cut short anywhere before the end reads as "not a checkpoint" */
    int32_t zero[CKPT_HEADER_INTS] = {0};
    ckpt_write_bytes(w, zero, sizeof zero);
    ckpt_write_bytes(w, config_text ? config_text : "", config_bytes);
}

void ckpt_writer_add(CkptWriter *w, const char *name, int dtype, int ndim, const int64_t *shape, const void *data) {
    if (strlen(name) >= CKPT_NAME_BYTES) die("internal: tensor name '%s' is longer than %d bytes", name, CKPT_NAME_BYTES - 1);
    if (ndim < 1 || ndim > CKPT_MAX_DIMS || !ckpt_dtype_size(dtype)) die("internal: tensor '%s' has ndim %d dtype %d", name, ndim, dtype);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->entries = realloc(w->entries, (size_t)w->cap * sizeof(CkptEntry));
        if (!w->entries) die("out of host memory for the checkpoint table");
    }
    CkptEntry *e = &w->entries[w->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = dtype;
    e->ndim = ndim;
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) { e->shape[i] = shape[i]; count *= shape[i]; }
    e->bytes = count * (int64_t)ckpt_dtype_size(dtype);
    write_pad(w, 64);
    e->offset = w->pos;
    e->crc = ckpt_crc32(0, data, (size_t)e->bytes);
    ckpt_write_bytes(w, data, (size_t)e->bytes);
}

void ckpt_writer_finish(CkptWriter *w) {
    int32_t *h = w->header;
    write_pad(w, 64);
    int64_t table_offset = w->pos;
    size_t table_bytes = (size_t)w->n * sizeof(CkptEntry);
    ckpt_write_bytes(w, w->entries, table_bytes);
    h[CKPT_H_N_TENSORS] = w->n;
    put64(h, CKPT_H_TABLE_OFFSET, table_offset);
    put64(h, CKPT_H_FILE_BYTES, w->pos);
    h[CKPT_H_TABLE_CRC] = (int32_t)ckpt_crc32(0, w->entries, table_bytes);
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    if (fseeko(w->f, 0, SEEK_SET) != 0) writer_fail(w, errno);
    int64_t end = w->pos;
    w->pos = 0;
    ckpt_write_bytes(w, h, sizeof w->header);   /* the header last: it is what makes the file valid */
    w->pos = end;
    atomic_commit(w->f, w->tmp, w->path);
    free(w->entries);
    w->entries = NULL;
}

/* ------------------------------------------------------------------ reading */

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); return -1; } while (0)

/* The run state is checked for what a run will do with it, not only for what fits
 * its field: a run takes at most 2^31-1 steps, an optimizer step at most once a
 * step, the fp16 clean-step count restarts at CKPT_MAX_CLEAN_STEPS, and the data
 * position moves by at most one epoch a step, so none of them may overflow later. */
int ckpt_check_state(const CkptState *s, const char *path, char *err, size_t err_size) {
    const char *bad = NULL, *why = "";
    if (s->kind != CKPT_KIND_TRAIN) bad = "kind", why = "not 1 (a training checkpoint, the only kind llm3d writes)";
    else if (s->step < 0 || s->step > INT32_MAX) bad = "step", why = "not in [0, 2^31-1]";
    else if (s->loader_epoch < 0 || s->loader_epoch > CKPT_MAX_POSITION) bad = "loader epoch", why = "not in [0, 2^62)";
    else if (s->loader_cursor < 0 || s->loader_cursor > CKPT_MAX_POSITION) bad = "loader cursor", why = "not in [0, 2^62)";
    else if (s->has_rng != 0 && s->has_rng != 1) bad = "has_rng", why = "neither 0 nor 1";
    else if (!(s->loss_scale > 0 && s->loss_scale <= 3.4e38f)) bad = "loss scale", why = "not a positive finite float";
    else if (s->clean_steps < 0 || s->clean_steps >= CKPT_MAX_CLEAN_STEPS)
        bad = "clean steps", why = "not in [0, 1999] (the count restarts when the fp16 loss scale doubles)";
    else if (s->optimizer < CKPT_OPT_NONE || s->optimizer > CKPT_OPT_ADAMW8BIT_SQRT)
        bad = "optimizer", why = "not 0 (none), 1 (adamw), 2 (8-bit AdamW, whole-tensor blocks) or 3 (8-bit AdamW, sqrt(v))";
    else if (s->optimizer_step < 0 || s->optimizer_step > s->step)
        bad = "optimizer step", why = "not in [0, step] (the optimizer steps at most once a training step)";
    if (!bad) return 0;
    snprintf(err, err_size, "'%s': the run state's %s is out of range, %s (kind %d, step %lld, epoch %lld, cursor %lld, loss scale %g, "
             "clean steps %d, optimizer %d at step %lld): the file is damaged\n  hint: move this checkpoint's folder aside to "
             "resume from an earlier one", path, bad, why, s->kind, (long long)s->step, (long long)s->loader_epoch,
             (long long)s->loader_cursor, (double)s->loss_scale, s->clean_steps, s->optimizer, (long long)s->optimizer_step);
    return -1;
}

static int by_text(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first string given twice among s[0..n) (sorted in place); NULL when each is once. */
static const char *first_twice(const char **s, int n) {
    qsort(s, (size_t)n, sizeof *s, by_text);
    for (int i = 1; i < n; i++) if (!strcmp(s[i - 1], s[i])) return s[i];
    return NULL;
}

/* A checkpoint names each tensor once and gives each config key once: a reader that
 * takes the first of two (ckpt_find, checkpoint_config_value) and a writer that copies
 * both (export) would otherwise disagree about what the file holds. */
static int check_unique(const CkptReader *r, char *err, size_t err_size) {
    const char **names = mallocCheck(((size_t)r->n + 1) * sizeof *names);
    for (int i = 0; i < r->n; i++) names[i] = r->entries[i].name;
    const char *twice = first_twice(names, r->n);
    if (twice) {
        snprintf(err, err_size, "'%s': the tensor table holds '%s' twice: the file was altered or damaged\n  hint: move this "
                 "checkpoint's folder aside to use an earlier one", r->path, twice);
        free(names);
        return -1;
    }
    free(names);
    size_t n = 0;
    for (const char *p = r->config_text; *p; p++) n += *p == '\n';
    char *copy = mallocCheck(strlen(r->config_text) + 1);
    strcpy(copy, r->config_text);
    const char **keys = mallocCheck((n + 2) * sizeof *keys);
    int k = 0;
    for (char *line = copy; line && *line;) {
        char *nl = strchr(line, '\n'), *eq = strchr(line, '=');
        if (nl) *nl = 0;
        if (eq) { *eq = 0; keys[k++] = line; }
        line = nl ? nl + 1 : NULL;
    }
    twice = first_twice(keys, k);
    if (twice)
        snprintf(err, err_size, "'%s': the config text gives '%s' twice: the file was altered or damaged\n  hint: move this "
                 "checkpoint's folder aside to use an earlier one", r->path, twice);
    free(keys);
    free(copy);
    return twice ? -1 : 0;
}

static int by_offset(const void *a, const void *b) {
    const CkptEntry *x = *(const CkptEntry *const *)a, *y = *(const CkptEntry *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two tensors share a byte: a table whose entries overlap (k_proj pointing at q_proj's data) would
 * load one tensor's values as another's, each with a valid checksum. Empty tensors hold no byte. */
static int check_disjoint(const CkptReader *r, char *err, size_t err_size) {
    const CkptEntry **sorted = mallocCheck(((size_t)r->n + 1) * sizeof *sorted);
    int n = 0;
    for (int i = 0; i < r->n; i++) if (r->entries[i].bytes > 0) sorted[n++] = &r->entries[i];
    qsort(sorted, (size_t)n, sizeof *sorted, by_offset);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++) {
        const CkptEntry *a = sorted[i - 1], *b = sorted[i];
        if (a->offset + a->bytes > b->offset) {
            snprintf(err, err_size, "'%s': the tensor table's entries '%s' (bytes %lld..%lld) and '%s' (bytes %lld..%lld) overlap: the file "
                     "was altered or damaged\n  hint: move this checkpoint's folder aside to use an earlier one", r->path, a->name,
                     (long long)a->offset, (long long)(a->offset + a->bytes), b->name, (long long)b->offset, (long long)(b->offset + b->bytes));
            rc = -1;
        }
    }
    free(sorted);
    return rc;
}

int ckpt_open(CkptReader *r, const char *path, char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    int fd = open_regular(path, "checkpoint file", &r->file_bytes, err, err_size);
    if (fd < 0) return -1;
    r->f = fdopen(fd, "rb");
    if (!r->f) { close(fd); FAIL("cannot open checkpoint file '%s': %s", path, strerror(errno)); }
    int rc = -1;
    int32_t *h = r->header;
    if (r->file_bytes < (int64_t)sizeof r->header || fread(h, sizeof r->header, 1, r->f) != 1) {
        snprintf(err, err_size, "'%s' is %lld bytes, shorter than the 1024-byte checkpoint header (truncated?)", path, (long long)r->file_bytes);
        goto out;
    }
    if (h[CKPT_H_MAGIC] != CKPT_MAGIC) {
        snprintf(err, err_size, "'%s' is not an llm3d checkpoint (magic 0x%08x, expected 0x%08x)%s", path,
                 (unsigned)h[CKPT_H_MAGIC], CKPT_MAGIC, h[CKPT_H_MAGIC] == 0 ? "; a zero header means the write never finished" : "");
        goto out;
    }
    if (h[CKPT_H_VERSION] != CKPT_VERSION) {
        snprintf(err, err_size, "'%s' is checkpoint version %d; this build reads version %d", path, h[CKPT_H_VERSION], CKPT_VERSION);
        goto out;
    }
    uint32_t hcrc = ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    if ((uint32_t)h[CKPT_H_CRC] != hcrc) {
        snprintf(err, err_size, "'%s': header checksum mismatch (stored %08x, computed %08x): the header is damaged",
                 path, (unsigned)h[CKPT_H_CRC], hcrc);
        goto out;
    }
    for (int i = CKPT_H_TABLE_CRC + 1; i < CKPT_H_CRC; i++)   /* the reserved ints: 0 as written, so a field added later is never misread */
        if (h[i]) {
            snprintf(err, err_size, "'%s': header int %d is %d, and ints %d..%d are reserved and written as 0: the file is damaged or "
                     "from a newer llm3d", path, i, h[i], CKPT_H_TABLE_CRC + 1, CKPT_H_CRC - 1);
            goto out;
        }
    int64_t want = get64(h, CKPT_H_FILE_BYTES), config_bytes = get64(h, CKPT_H_CONFIG_BYTES), table = get64(h, CKPT_H_TABLE_OFFSET);
    int n = h[CKPT_H_N_TENSORS];
    if (r->file_bytes != want) {
        snprintf(err, err_size, "'%s' is %lld bytes but its header says %lld: the file is %s", path, (long long)r->file_bytes,
                 (long long)want, r->file_bytes < want ? "truncated" : "longer than written (appended to?)");
        goto out;
    }
    int64_t data_start, table_end;
    if (n < 0 || config_bytes < 0 || table < 0 || !add_i64(1024, config_bytes, &data_start) || data_start > table ||
        !mul_i64(n, (int64_t)sizeof(CkptEntry), &table_end) || !add_i64(table, table_end, &table_end) || table_end != want) {
        snprintf(err, err_size, "'%s': header layout is inconsistent (config %lld bytes, table at %lld, %d tensors, %lld bytes)",
                 path, (long long)config_bytes, (long long)table, n, (long long)want);
        goto out;
    }
    r->state = (CkptState){.kind = h[CKPT_H_KIND], .step = get64(h, CKPT_H_STEP), .loader_epoch = get64(h, CKPT_H_LOADER_EPOCH),
                           .loader_cursor = get64(h, CKPT_H_LOADER_CURSOR), .rng_state = (uint64_t)get64(h, CKPT_H_RNG_STATE),
                           .has_rng = h[CKPT_H_HAS_RNG], .clean_steps = h[CKPT_H_CLEAN_STEPS], .optimizer = h[CKPT_H_OPTIMIZER],
                           .optimizer_step = get64(h, CKPT_H_OPTIMIZER_STEP)};
    memcpy(&r->state.loss_scale, &h[CKPT_H_LOSS_SCALE], 4);
    if (ckpt_check_state(&r->state, path, err, err_size) != 0) goto out;
    r->config_text = mallocCheck((size_t)config_bytes + 1);
    r->entries = mallocCheck((size_t)n * sizeof(CkptEntry) + 1);
    if (fread(r->config_text, 1, (size_t)config_bytes, r->f) != (size_t)config_bytes) {
        snprintf(err, err_size, "'%s': cannot read the config text: %s", path, strerror(errno));
        goto out;
    }
    r->config_text[config_bytes] = 0;
    if (ckpt_crc32(0, r->config_text, (size_t)config_bytes) != (uint32_t)h[CKPT_H_CONFIG_CRC]) {
        snprintf(err, err_size, "'%s': config text checksum mismatch: the file is damaged", path);
        goto out;
    }
    if (fseeko(r->f, table, SEEK_SET) != 0 || fread(r->entries, sizeof(CkptEntry), (size_t)n, r->f) != (size_t)n) {
        snprintf(err, err_size, "'%s': cannot read the tensor table", path);
        goto out;
    }
    if (ckpt_crc32(0, r->entries, (size_t)n * sizeof(CkptEntry)) != (uint32_t)h[CKPT_H_TABLE_CRC]) {
        snprintf(err, err_size, "'%s': tensor table checksum mismatch: the file is damaged", path);
        goto out;
    }
    r->n = n;
    for (int i = 0; i < n; i++) {
        CkptEntry *e = &r->entries[i];
        e->name[CKPT_NAME_BYTES - 1] = 0;
        int64_t count = 1, end;
        int ok = e->ndim >= 1 && e->ndim <= CKPT_MAX_DIMS && ckpt_dtype_size(e->dtype);
        for (int d = 0; ok && d < e->ndim; d++) ok = e->shape[d] >= 0 && mul_i64(count, e->shape[d], &count);
        ok = ok && mul_i64(count, (int64_t)ckpt_dtype_size(e->dtype), &count) && e->bytes == count &&
             e->offset >= data_start && add_i64(e->offset, e->bytes, &end) && end <= table;
        if (!ok) { snprintf(err, err_size, "'%s': tensor table entry %d ('%s') is malformed or lies outside the data", path, i, e->name); goto out; }
    }
    if (check_unique(r, err, err_size) != 0 || check_disjoint(r, err, err_size) != 0) goto out;
    return 0;
out:
    ckpt_close(r);
    return rc;
}

void ckpt_close(CkptReader *r) {
    if (r->f) fclose(r->f);
    free(r->config_text);
    free(r->entries);
    r->f = NULL; r->config_text = NULL; r->entries = NULL; r->n = 0;
}

const CkptEntry *ckpt_find(const CkptReader *r, const char *name) {
    for (int i = 0; i < r->n; i++) if (!strcmp(r->entries[i].name, name)) return &r->entries[i];
    return NULL;
}

void ckpt_entry_dims(const CkptEntry *e, int64_t *rows, int64_t *cols) {
    *rows = 1;
    for (int d = 0; d < e->ndim - 1; d++) *rows *= e->shape[d];
    *cols = e->shape[e->ndim - 1];
}

int ckpt_read_region(FILE *f, const char *path, const char *name, int64_t file_offset, int dtype, int64_t grows,
                     int64_t gcols, int64_t row0, int64_t rows, int64_t col0, int64_t cols, float *dst,
                     const uint32_t *crc_want, char *err, size_t err_size) {
    if (dtype != CKPT_F32 && dtype != CKPT_BF16 && dtype != CKPT_F16)
        FAIL("'%s': tensor '%s' is %s; only f32, bf16 and f16 tensors load as weights", path, name, ckpt_dtype_name(dtype));
    if (row0 < 0 || col0 < 0 || rows < 0 || cols < 0 || row0 + rows > grows || col0 + cols > gcols)
        FAIL("'%s': slice rows %lld+%lld cols %lld+%lld lies outside tensor '%s' (%lld x %lld)", path, (long long)row0,
             (long long)rows, (long long)col0, (long long)cols, name, (long long)grows, (long long)gcols);
    if (grows == 0 || gcols == 0) {   /* no bytes: nothing to read, and a row of an empty tensor may still be huge */
        if (crc_want && *crc_want != 0) FAIL("'%s': empty tensor '%s' has checksum %08x, not 0: the table is damaged", path, name, *crc_want);
        return 0;
    }
    size_t es = ckpt_dtype_size(dtype), row_bytes = (size_t)gcols * es;
    /* without a CRC to check, read only the rows of the slice */
    int64_t first = crc_want ? 0 : row0, last = crc_want ? grows : row0 + rows;
    if (fseeko(f, file_offset + first * (int64_t)row_bytes, SEEK_SET) != 0) FAIL("'%s': cannot seek to tensor '%s'", path, name);
    uint8_t *row = mallocCheck(row_bytes);
    uint32_t crc = 0;
    int64_t bad = -1;   /* the first non-finite element of the rows read, tensor-wide */
    for (int64_t r = first; r < last; r++) {
        if (fread(row, 1, row_bytes, f) != row_bytes) {
            free(row);
            FAIL("'%s': tensor '%s' ends early at row %lld of %lld (truncated file?)", path, name, (long long)r, (long long)grows);
        }
        if (crc_want) crc = ckpt_crc32(crc, row, row_bytes);
        int64_t at;
        if (bad < 0 && ckpt_count_nonfinite(row, dtype, gcols, &at) > 0) bad = r * gcols + at;
        if (r < row0 || r >= row0 + rows) continue;
        float *out = dst + (size_t)(r - row0) * (size_t)cols;
        const uint8_t *in = row + (size_t)col0 * es;
        if (dtype == CKPT_F32) memcpy(out, in, (size_t)cols * 4);
        else
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h = (uint16_t)(in[2 * c] | in[2 * c + 1] << 8);
                out[c] = dtype == CKPT_BF16 ? ckpt_bf16_to_f32(h) : ckpt_f16_to_f32(h);
            }
    }
    free(row);
    if (crc_want && crc != *crc_want)
        FAIL("'%s': tensor '%s' checksum mismatch (stored %08x, computed %08x): the data is damaged", path, name, *crc_want, crc);
    if (bad >= 0) {   /* read again for its value: a rare path */
        uint8_t value[4] = {0};
        if (fseeko(f, file_offset + bad * (int64_t)es, SEEK_SET) != 0 || fread(value, 1, es, f) != es) memset(value, 0xff, sizeof value);
        ckpt_nonfinite_message(path, name, dtype, value, bad, grows, gcols, err, err_size);
        return -1;
    }
    return 0;
}

int64_t ckpt_count_nonfinite(const void *data, int dtype, int64_t count, int64_t *first) {
    int64_t n = 0;
    *first = -1;
    if (dtype == CKPT_F32) {   /* all exponent bits set: inf or NaN */
        const uint8_t *p = data;
        for (int64_t i = 0; i < count; i++, p += 4)
            if ((p[3] & 0x7f) == 0x7f && (p[2] & 0x80)) { if (!n++) *first = i; }
    } else if (dtype == CKPT_BF16 || dtype == CKPT_F16) {
        const uint8_t *p = data;
        for (int64_t i = 0; i < count; i++, p += 2) {
            uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            int nonfinite = dtype == CKPT_BF16 ? (h & 0x7f80) == 0x7f80 : (h & 0x7c00) == 0x7c00;
            if (nonfinite && !n++) *first = i;
        }
    }
    return n;
}

void ckpt_nonfinite_message(const char *path, const char *name, int dtype, const void *value, int64_t index, int64_t rows,
                            int64_t cols, char *err, size_t err_size) {
    const uint8_t *v = value;
    float x = dtype == CKPT_F32 ? 0 : dtype == CKPT_BF16 ? ckpt_bf16_to_f32((uint16_t)(v[0] | v[1] << 8)) : ckpt_f16_to_f32((uint16_t)(v[0] | v[1] << 8));
    if (dtype == CKPT_F32) memcpy(&x, v, 4);
    const char *what = isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
    char where[128];
    if (rows > 1) snprintf(where, sizeof where, "element %lld (row %lld, col %lld of %lld x %lld)", (long long)index,
                           (long long)(index / cols), (long long)(index % cols), (long long)rows, (long long)cols);
    else snprintf(where, sizeof where, "element %lld of %lld", (long long)index, (long long)cols);
    snprintf(err, err_size, "'%s': tensor '%s' holds a non-finite value (%s) at %s: a run that diverged saved it, or the file was "
             "altered; llm3d loads only finite weights and optimizer state\n  hint: load an earlier checkpoint (move this one's folder "
             "aside) or a good copy; `build/train inspect --allow_nonfinite=1 PATH` counts the bad values of every tensor",
             path, name, what, where);
}

int ckpt_read_f32(CkptReader *r, const CkptEntry *e, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                  float *dst, char *err, size_t err_size) {
    int64_t grows, gcols;
    ckpt_entry_dims(e, &grows, &gcols);
    return ckpt_read_region(r->f, r->path, e->name, e->offset, e->dtype, grows, gcols, row0, rows, col0, cols, dst, &e->crc, err, err_size);
}

int ckpt_read_raw(CkptReader *r, const CkptEntry *e, void *dst, char *err, size_t err_size) {
    if (fseeko(r->f, e->offset, SEEK_SET) != 0 || fread(dst, 1, (size_t)e->bytes, r->f) != (size_t)e->bytes)
        FAIL("'%s': cannot read tensor '%s' (truncated file?)", r->path, e->name);
    uint32_t crc = ckpt_crc32(0, dst, (size_t)e->bytes);
    if (crc != e->crc) FAIL("'%s': tensor '%s' checksum mismatch (stored %08x, computed %08x): the data is damaged", r->path, e->name, e->crc, crc);
    return 0;
}

int ckpt_verify(CkptReader *r, const CkptEntry *e, char *err, size_t err_size) {
    int64_t bad, first;
    return ckpt_scan(r, e, &bad, &first, err, err_size);
}

int ckpt_scan_bytes(FILE *f, const char *path, const char *name, int64_t offset, int64_t bytes, int dtype, uint32_t *crc,
                    int64_t *n_nonfinite, int64_t *first, char *err, size_t err_size) {
    *n_nonfinite = 0;
    *first = -1;
    *crc = 0;
    if (fseeko(f, offset, SEEK_SET) != 0) FAIL("'%s': cannot seek to tensor '%s'", path, name);
    uint8_t buf[1 << 16];   /* a multiple of every element size: no value is split between two reads */
    size_t es = ckpt_dtype_size(dtype) ? ckpt_dtype_size(dtype) : 1;
    for (int64_t left = bytes, done = 0; left > 0;) {
        size_t n = left < (int64_t)sizeof buf ? (size_t)left : sizeof buf;
        if (fread(buf, 1, n, f) != n) FAIL("'%s': tensor '%s' ends early (truncated file?)", path, name);
        *crc = ckpt_crc32(*crc, buf, n);
        int64_t at, count = ckpt_count_nonfinite(buf, dtype, (int64_t)(n / es), &at);
        if (count && *first < 0) *first = done + at;
        *n_nonfinite += count;
        done += (int64_t)(n / es);
        left -= (int64_t)n;
    }
    return 0;
}

int ckpt_scan(CkptReader *r, const CkptEntry *e, int64_t *n_nonfinite, int64_t *first, char *err, size_t err_size) {
    uint32_t crc;
    if (ckpt_scan_bytes(r->f, r->path, e->name, e->offset, e->bytes, e->dtype, &crc, n_nonfinite, first, err, err_size) != 0) return -1;
    if (crc != e->crc) FAIL("'%s': tensor '%s' checksum mismatch (stored %08x, computed %08x): the data is damaged", r->path, e->name, e->crc, crc);
    return 0;
}
