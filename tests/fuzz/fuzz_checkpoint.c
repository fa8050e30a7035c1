/* tests/fuzz/fuzz_checkpoint.c — a checkpoint's state.bin (checkpoint/format.h):
 * header, config text, tensor table, run state, tensor data and slices, the
 * model shape in its config, `inspect`, and its saved data position applied to
 * a real loader through several epochs. Past the CRCs (control bit 0), the run
 * state a run resumes with must not overflow in anything the run then does with
 * it (every later step's optimizer step, fp16 clean-step count and data
 * position), and a config text and tensor table that were accepted must name
 * each key and tensor once and agree with each other where the export checks
 * them (checkpoint_check_tensors). Multi-rank checkpoints use the same file
 * (whole tensors by name), so this covers them.
 *
 * Input: 1 control byte, then the file. With control bit 0 set, the harness
 * first recomputes every CRC the file's own layout lets it find (config text,
 * each tensor, the table, the header), so mutations get past the checksums
 * and reach the code behind them; with it clear, the CRCs are as mutated. */
#include "fuzz.h"
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
    for (int i = 0; i < r.n && i < 64; i++) {
        const CkptEntry *e = &r.entries[i];
        FUZZ_ASSERT(e->offset >= 1024 && e->bytes >= 0 && e->offset + e->bytes <= r.file_bytes, "entry %d outside the file", i);
        if (ckpt_verify(&r, e, err, sizeof err) != 0 || e->bytes > (1 << 20)) continue;
        int64_t rows, cols;
        ckpt_entry_dims(e, &rows, &cols);
        if (e->dtype <= CKPT_F16 && rows * cols > 0) {
            float *dst = malloc((size_t)(rows * cols) * sizeof(float));
            FUZZ_ASSERT(ckpt_read_f32(&r, e, 0, rows, 0, cols, dst, err, sizeof err) == 0, "verified tensor unreadable: %s", err);
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
    if (checkpoint_model_config(r.config_text, &mc, err, sizeof err) == 0 && model_count_params(&mc) <= (1 << 16))
        checkpoint_check_tensors(&r, &mc, err, sizeof err);   /* export's check of the config against the table */
    LoaderState at = {r.state.loader_epoch, r.state.loader_cursor};   /* any size: past the end starts the next epoch */
    ckpt_close(&r);
    checkpoint_inspect(path, fuzz_devnull());
    if (loader_try_set_state(&loader, at, err, sizeof err) == 0)
        for (int i = 0; i < 8; i++) {   /* 12 samples, 2 a step: through at least one more epoch rollover */
            int ids[8], targets[8];
            FUZZ_ASSERT(loader_try_next(&loader, ids, targets, err, sizeof err) == 0, "a valid position failed: %s", err);
        }
    return 0;
}
