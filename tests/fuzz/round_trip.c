/* tests/fuzz/round_trip.c — the check the two tokenizer harnesses share: a
 * vocabulary a reader accepted must give any text back byte for byte. */
#include "fuzz.h"
#include "../../data/tokenizer.h"

void fuzz_round_trip(const Tokenizer *t, const uint8_t *tail, size_t n_tail) {
    uint8_t text[256];
    const char *fixed = "It's 2024: the model's vocabulary said \xc3\xa9t\xc3\xa9, <|endoftext|>  \t\n 42!";
    size_t n = strlen(fixed);
    memcpy(text, fixed, n);
    memcpy(text + n, tail, n_tail);
    n += n_tail;
    uint32_t *ids = NULL;
    size_t cap = 0, m = tokenizer_encode(t, text, n, &ids, &cap);
    uint8_t back[512];
    size_t need = tokenizer_decode(t, ids, m, back, sizeof back);
    for (size_t i = 0; i < m; i++) FUZZ_ASSERT(ids[i] < (uint32_t)tokenizer_vocab_size(t), "id %u outside the vocabulary", ids[i]);
    FUZZ_ASSERT(need == n && !memcmp(back, text, n), "decode(encode(text)) gave %zu bytes for %zu", need, n);
    free(ids);
}
