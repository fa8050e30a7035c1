/* tests/fuzz/fuzz_gpt2.c — GPT-2's vocabulary files, encoder.json and vocab.bpe
 * (data/tokenizer.h): whatever the reader accepts must encode any text and
 * decode it back byte for byte.
 *
 * Input: 2-byte length, encoder.json, then vocab.bpe (fuzz.h: fuzz_split). */
#include "fuzz.h"
#include "../../data/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

void fuzz_round_trip(const Tokenizer *t, const uint8_t *tail, size_t n_tail);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *json, *bpe;
    size_t n_json, n_bpe;
    fuzz_split(data, size, &json, &n_json, &bpe, &n_bpe);
    char json_path[128], bpe_path[128], err[4096];
    fuzz_write("encoder.json", json, n_json, json_path, sizeof json_path);
    fuzz_write("vocab.bpe", bpe, n_bpe, bpe_path, sizeof bpe_path);
    Tokenizer *t = tokenizer_try_load_gpt2(json_path, bpe_path, err, sizeof err);
    if (!t) return 0;
    fuzz_round_trip(t, bpe + (n_bpe > 64 ? n_bpe - 64 : 0), n_bpe > 64 ? 64 : n_bpe);
    tokenizer_free(t);
    return 0;
}
