/* tests/fuzz/fuzz_checkpoint.c — a checkpoint's state.bin (checkpoint/format.h):
 * header, config text, tensor table, run state, tensor data and slices, the
 * model shape in its config, `inspect`, and its saved data position applied to
 * a real loader through several epochs. Past the CRCs (control bit 0), the run
 * state a run resumes with must not overflow in anything the run then does with
 * it (every later step's optimizer step, fp16 clean-step count and data
 * position), and a config text and tensor table that were accepted must name
 * each key and tensor once and agree with each other as every loader checks
 * them (checkpoint_check_tensors: the model's tensors exactly, no more, no
 * fewer), no two entries may overlap, the header's kind and reserved ints are
 * as written, and a tensor reads exactly when it holds no NaN or inf (what
 * reads is finite). Multi-rank checkpoints use the same file (whole tensors by
 * name), so this covers them.
 *
 * Input: 1 control byte, then the file. With control bit 0 set, the harness
 * first recomputes every CRC the file's own layout lets it find (config text,
 * each tensor, the table, the header), so mutations get past the checksums
 * and reach the code behind them; with it clear, the CRCs are as mutated. */
#include "fuzz.h"
#include <math.h>
#include "../../checkpoint/checkpoint.h"
#include "../../checkpoint/format.h"
#include "../../data/loader.h"
#include "../../data/shard.h"

static Loader loader;   /* 12 samples of 4 tokens: where a checkpoint's data position lands */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    uint32_t tokens[49];
    for (int i = 0; i < 49; i++) tokens[i] = (uint32_t)(i * 7 % 11);
    char path[128], err[1024];
    shard_write(fuzz_path("data.bin", path, sizeof path), tokens, 49, 11);
    if (loader_try_open(&loader, path, 2, 4, 0, 1, 1, 1, 11, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); abort(); }
    return 0;
}

static int64_t get64(const int32_t *h, int at) { return (int64_t)((uint64_t)(uint32_t)h[at] | (uint64_t)(uint32_t)h[at + 1] << 32); }

/* Recomputes the CRCs in file (n bytes) wherever the header's layout points inside it. */
static void fix_crcs(uint8_t *file, size_t n) {
    if (n < 1024) return;
    int32_t h[CKPT_HEADER_INTS];
    memcpy(h, file, sizeof h);
    int64_t config = get64(h, CKPT_H_CONFIG_BYTES), table = get64(h, CKPT_H_TABLE_OFFSET), count = h[CKPT_H_N_TENSORS];
    if (config >= 0 && config <= (int64_t)n - 1024) h[CKPT_H_CONFIG_CRC] = (int32_t)ckpt_crc32(0, file + 1024, (size_t)config);
    if (table >= 0 && count >= 0 && table <= (int64_t)n && count <= ((int64_t)n - table) / (int64_t)sizeof(CkptEntry)) {
        for (int64_t i = 0; i < count; i++) {
            CkptEntry e;
            memcpy(&e, file + table + i * (int64_t)sizeof e, sizeof e);
            if (e.offset >= 0 && e.bytes >= 0 && e.offset <= (int64_t)n && e.bytes <= (int64_t)n - e.offset)
                e.crc = ckpt_crc32(0, file + e.offset, (size_t)e.bytes);
            memcpy(file + table + i * (int64_t)sizeof e, &e, sizeof e);
        }
        h[CKPT_H_TABLE_CRC] = (int32_t)ckpt_crc32(0, file + table, (size_t)count * sizeof(CkptEntry));
    }
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    memcpy(file, h, sizeof h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t *file = malloc(size);
    memcpy(file, data + 1, size - 1);
    if (data[0] & 1) fix_crcs(file, size - 1);
    char path[128], err[4096];
    fuzz_write("state.bin", file, size - 1, path, sizeof path);
    free(file);
    CkptReader r;
    if (ckpt_open(&r, path, err, sizeof err) != 0) return 0;
    /* what ckpt_open accepted: a training checkpoint, reserved header ints 0, no two tensors sharing a byte */
    FUZZ_ASSERT(r.state.kind == CKPT_KIND_TRAIN, "kind %d accepted", r.state.kind);
    for (int i = CKPT_H_TABLE_CRC + 1; i < CKPT_H_CRC; i++) FUZZ_ASSERT(r.header[i] == 0, "reserved header int %d is %d", i, r.header[i]);
    for (int i = 0; i < r.n && i < 64; i++)
        for (int k = 0; k < i; k++) {
            const CkptEntry *a = &r.entries[i], *b = &r.entries[k];
            FUZZ_ASSERT(!a->bytes || !b->bytes || a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset,
                        "entries '%s' and '%s' overlap", a->name, b->name);
        }
    for (int i = 0; i < r.n && i < 64; i++) {
        const CkptEntry *e = &r.entries[i];
        FUZZ_ASSERT(e->offset >= 1024 && e->bytes >= 0 && e->offset + e->bytes <= r.file_bytes, "entry %d outside the file", i);
        int64_t bad, first;
        if (ckpt_scan(&r, e, &bad, &first, err, sizeof err) != 0 || e->bytes > (1 << 20)) continue;
        int64_t rows, cols;
        ckpt_entry_dims(e, &rows, &cols);
        if (e->dtype <= CKPT_F16 && rows * cols > 0) {
            float *dst = malloc((size_t)(rows * cols) * sizeof(float));
            /* a verified tensor reads exactly when it holds no NaN or inf, and what reads is finite */
            int read = ckpt_read_f32(&r, e, 0, rows, 0, cols, dst, err, sizeof err);
            FUZZ_ASSERT(read == 0 || (bad && strstr(err, "non-finite")), "verified finite tensor unreadable: %s", err);
            FUZZ_ASSERT(read != 0 || !bad, "tensor '%s' with %lld non-finite values read", e->name, (long long)bad);
            for (int64_t k = 0; read == 0 && k < rows * cols; k++) FUZZ_ASSERT(isfinite(dst[k]), "non-finite value loaded at %lld", (long long)k);
            ckpt_read_f32(&r, e, rows / 2, rows - rows / 2, cols / 3, cols - cols / 3, dst, err, sizeof err);
            free(dst);
        }
    }
    /* the run state a resumed run uses: at most 2^31-1 - step more steps, each one optimizer step, one clean step
     * (restarting at the window) and at most one epoch rollover and one step of samples; none may overflow */
    const CkptState *s = &r.state;
    int64_t left = (int64_t)INT32_MAX - s->step, epoch, cursor;
    int opt;
    FUZZ_ASSERT(left >= 0 && !__builtin_add_overflow((int)s->optimizer_step, (int)left, &opt), "optimizer step %lld at step %lld "
                "overflows before the run ends", (long long)s->optimizer_step, (long long)s->step);
    FUZZ_ASSERT(s->clean_steps >= 0 && s->clean_steps < CKPT_MAX_CLEAN_STEPS, "clean steps %d past the window", s->clean_steps);
    FUZZ_ASSERT(!__builtin_add_overflow(s->loader_epoch, left, &epoch) && !__builtin_add_overflow(s->loader_cursor, (int64_t)1 << 40, &cursor),
                "data position epoch %lld cursor %lld overflows", (long long)s->loader_epoch, (long long)s->loader_cursor);
    for (int i = 0; i < r.n && i < 64; i++)   /* each tensor named once */
        for (int k = 0; k < i; k++) FUZZ_ASSERT(strcmp(r.entries[i].name, r.entries[k].name), "tensor '%s' accepted twice", r.entries[i].name);
    ModelConfig mc;
    if (checkpoint_model_config(r.config_text, &mc, err, sizeof err) == 0 && model_count_params(&mc) <= (1 << 16) &&
        checkpoint_check_tensors(&r, &mc, err, sizeof err) == 0) {   /* every loader's check of the config against the table */
        /* accepted: the table is the model's tensors exactly, each "<prefix>/" set whole */
        Comm comm;
        comm_init_one(&comm);
        Model m;
        model_plan(&m, &mc, backend_cpu(), &comm, NULL, 1, 1, RECOMPUTE_NONE);
        int weights = 0;
        for (int i = 0; i < r.n; i++) {
            const char *name = r.entries[i].name, *slash = strrchr(name, '/');
            if (!strcmp(name, FP8_CHECKPOINT_NAME)) continue;
            FUZZ_ASSERT(model_find_tensor(&m, slash ? slash + 1 : name), "tensor '%s' accepted outside the model", name);
            weights += !slash;
        }
        FUZZ_ASSERT(weights == m.n_tensors, "%d weights accepted for a model of %d", weights, m.n_tensors);
        model_plan_free(&m);
    }
    LoaderState at = {r.state.loader_epoch, r.state.loader_cursor};   /* any size: past the end starts the next epoch */
    ckpt_close(&r);
    checkpoint_inspect(path, fuzz_devnull());
    checkpoint_inspect_ex(path, 1, fuzz_devnull());
    if (loader_try_set_state(&loader, at, err, sizeof err) == 0)
        for (int i = 0; i < 8; i++) {   /* 12 samples, 2 a step: through at least one more epoch rollover */
            int ids[8], targets[8];
            FUZZ_ASSERT(loader_try_next(&loader, ids, targets, err, sizeof err) == 0, "a valid position failed: %s", err);
        }
    return 0;
}
