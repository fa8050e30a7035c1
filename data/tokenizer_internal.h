/* data/tokenizer_internal.h — what data/tokenizer.c and data/tokenizer_files.c
 * share: the vocabulary's layout and the one checked way to build it. Not part
 * of the tokenizer's interface (data/tokenizer.h). */
#pragma once
#include "tokenizer.h"

typedef struct { uint64_t key; uint32_t rank, merged; } PairSlot;   /* key 0 = empty */

struct Tokenizer {
    int vocab_size, eot, n_pairs;
    uint32_t *offset;          /* (vocab_size + 1,) token i is bytes[offset[i] .. offset[i+1]) */
    uint8_t *bytes;            /* (total token bytes,) */
    uint32_t (*pairs)[4];      /* (n_pairs, 4) left, right, merged, rank: what is saved */
    PairSlot *slots;           /* open-addressing table of pairs, size mask + 1 */
    uint64_t mask;
    uint32_t byte_id[256];     /* id of the one-byte token of each byte */
    uint64_t serial;           /* tells the per-thread cache which tokenizer it holds */
};

/* Builds a tokenizer from its lists, taking ownership of lens (vocab_size,),
 * bytes and pairs (freed on failure too). Checks that the end-of-text id is in
 * the vocabulary, that every byte has a token, and that every merge names ids
 * in the vocabulary and makes exactly the bytes of its two parts, so that
 * decode(encode(text)) == text holds for any vocabulary it accepts. Returns
 * NULL with a message naming `what` in err. */
Tokenizer *tokenizer_build(const char *what, int vocab_size, int32_t *lens, uint8_t *bytes, int n_pairs,
                           uint32_t (*pairs)[4], int eot, char *err, size_t err_size);
/* FNV-1a, then mixed; never 0. */
uint64_t tokenizer_hash_bytes(const uint8_t *s, size_t n);
