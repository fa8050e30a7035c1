/* tests/fuzz/fuzz_shard.c — a token shard through the loader (data/shard.h,
 * data/loader.h): header, sizes, the lazy chunk checksums, and every batch
 * shape and saved data position a run could ask for.
 *
 * Input: 8 control bytes (batch size, seq_len, data-parallel size and rank,
 * vocab_size, shuffle, then a saved epoch and cursor that may be negative),
 * then the shard file. */
#include "fuzz.h"
#include "../../data/loader.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    const uint8_t *c = data;
    int B = 1 + c[0] % 4, T = 1 + c[1] % 16, dp = 1 + c[2] % 3, rank = c[3] % dp, vocab = c[4] * 4, shuffle = c[5] & 1;
    LoaderState saved = {(int8_t)c[6], (int8_t)c[7]};
    char path[128], err[4096];
    fuzz_write("train.bin", data + 8, size - 8, path, sizeof path);
    Loader l;
    if (loader_try_open(&l, path, B, T, rank, dp, 7, shuffle, vocab, err, sizeof err) != 0) return 0;
    FUZZ_ASSERT(l.n_samples >= (int64_t)B * dp, "opened a loader with %lld samples for %d x %d", (long long)l.n_samples, B, dp);
    int *ids = mallocCheck(sizeof(int) * B * T), *targets = mallocCheck(sizeof(int) * B * T);
    if (loader_try_set_state(&l, saved, err, sizeof err) == 0)
        FUZZ_ASSERT(saved.epoch >= 0 && saved.cursor >= 0, "accepted position %lld/%lld", (long long)saved.epoch, (long long)saved.cursor);
    for (int step = 0; step < 3; step++) {
        if (loader_try_next(&l, ids, targets, err, sizeof err) != 0) break;
        for (int i = 0; i < B * T; i++)
            FUZZ_ASSERT(ids[i] >= 0 && (!vocab || ids[i] < vocab), "token %d outside vocab %d", ids[i], vocab);
    }
    free(ids), free(targets);
    loader_close(&l);
    return 0;
}
