/* tests/fuzz/fuzz_tokenizer.c — llm3d's own vocabulary file, tokenizer.bin
 * (data/tokenizer.h): whatever it accepts must encode any text and decode it
 * back byte for byte.
 *
 * Input: the file. The text encoded is a fixed sentence, then the input's last
 * bytes (any bytes, UTF-8 or not). */
#include "fuzz.h"
#include "../../data/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

/* Shared with fuzz_gpt2.c: decode(encode(text)) must be text. */
void fuzz_round_trip(const Tokenizer *t, const uint8_t *tail, size_t n_tail);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128], err[4096];
    fuzz_write("tokenizer.bin", data, size, path, sizeof path);
    Tokenizer *t = tokenizer_try_load(path, err, sizeof err);
    if (!t) return 0;
    fuzz_round_trip(t, data + (size > 64 ? size - 64 : 0), size > 64 ? 64 : size);
    tokenizer_free(t);
    return 0;
}
