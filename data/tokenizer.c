/* data/tokenizer.c — byte-level BPE: GPT-2's pre-tokenization split, merges
 * by rank, a per-thread word cache, building a checked vocabulary, training.
 * Reading and writing vocabulary files is data/tokenizer_files.c.
 *
 * The idea: a vocabulary is a list of byte strings plus a table of ranked
 * pairs (left id, right id) -> (rank, merged id). Encoding cuts the text into
 * pieces (tokenizer_piece), starts each piece as one token per byte, and
 * merges the lowest-ranked adjacent pair everywhere in the piece until no
 * ranked pair is left, exactly as gpt-3-encoder's bpe() does. Frequent pieces
 * are remembered in a cache, which is what makes English fast. */
#include "tokenizer.h"
#include "tokenizer_internal.h"
#include "../common/util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)

/* ---------------------------------------------------------------- Unicode */

/* Range tables generated from node's regex engine (data/tokenizer_unicode.c). */
extern const int unicode_letter_count, unicode_number_count, unicode_space_count;
extern const uint32_t unicode_letter_ranges[][2], unicode_number_ranges[][2], unicode_space_ranges[][2];

enum { CLASS_OTHER, CLASS_LETTER, CLASS_NUMBER, CLASS_SPACE };

static int in_ranges(uint32_t cp, const uint32_t (*r)[2], int count) {
    int lo = 0, hi = count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Class of the character at s[0..n) and its length in bytes. A byte that does
 * not start a valid UTF-8 sequence (overlong, surrogate, > U+10FFFF, cut
 * short) is a one-byte character of class OTHER. */
static int char_class(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CLASS_LETTER;
        if (c >= '0' && c <= '9') return CLASS_NUMBER;
        if (c == ' ' || (c >= 9 && c <= 13)) return CLASS_SPACE;
        return CLASS_OTHER;
    }
    size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    uint32_t cp = c & (k == 2 ? 0x1f : k == 3 ? 0x0f : 0x07);
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    int ok = c >= 0xc2 && c <= 0xf4 && k <= n;
    for (size_t i = 1; ok && i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) ok = 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (!ok || cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { *len = 1; return CLASS_OTHER; }
    *len = k;
    if (in_ranges(cp, unicode_letter_ranges, unicode_letter_count)) return CLASS_LETTER;
    if (in_ranges(cp, unicode_number_ranges, unicode_number_count)) return CLASS_NUMBER;
    if (in_ranges(cp, unicode_space_ranges, unicode_space_count)) return CLASS_SPACE;
    return CLASS_OTHER;
}

/* One match of 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * at the start of s, alternatives tried in that order. */
size_t tokenizer_piece(const uint8_t *s, size_t n) {
    if (s[0] == '\'' && n >= 2) {
        uint8_t c = s[1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
        if (n >= 3 && ((c == 'r' && s[2] == 'e') || (c == 'v' && s[2] == 'e') || (c == 'l' && s[2] == 'l'))) return 3;
    }
    size_t len, i = 0;
    int cls = char_class(s, n, &len);
    if (s[0] == ' ' && n > 1) {          /* " ?" in front of a letter, number or other run */
        size_t len1;
        int cls1 = char_class(s + 1, n - 1, &len1);
        if (cls1 != CLASS_SPACE) { i = 1; cls = cls1; len = len1; }
    }
    if (cls != CLASS_SPACE) {            /* a run of one class */
        for (i += len; i < n; i += len)
            if (char_class(s + i, n - i, &len) != cls) break;
        return i;
    }
    /* whitespace: \s+(?!\S) leaves the last space to the word that follows;
     * a single space before a non-space is \s+ on its own */
    size_t last = 0;
    for (i = 0; i < n; i += len) {
        if (char_class(s + i, n - i, &len) != CLASS_SPACE) break;
        last = i;
    }
    return (i == n || last == 0) ? i : last;
}

/* --------------------------------------------------------------- the vocabulary */

static uint64_t pair_key(uint32_t a, uint32_t b) { return (((uint64_t)a << 32) | b) + 1; }
static uint64_t hash64(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return x; }

static const PairSlot *pair_find(const Tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = pair_key(a, b);
    for (uint64_t h = hash64(key) & t->mask;; h = (h + 1) & t->mask) {
        if (t->slots[h].key == key) return &t->slots[h];
        if (t->slots[h].key == 0) return NULL;
    }
}

Tokenizer *tokenizer_build(const char *what, int vocab_size, int32_t *lens, uint8_t *bytes, int n_pairs,
                           uint32_t (*pairs)[4], int eot, char *err, size_t err_size) {
    Tokenizer *t = callocCheck(1, sizeof *t);
    t->vocab_size = vocab_size, t->eot = eot, t->n_pairs = n_pairs;
    t->bytes = bytes, t->pairs = pairs;
    t->offset = mallocCheck(((size_t)vocab_size + 1) * sizeof *t->offset);
    t->offset[0] = 0;
    for (int i = 0; i < vocab_size; i++) t->offset[i + 1] = t->offset[i] + (uint32_t)lens[i];
    free(lens);
    if (eot < 0 || eot >= vocab_size) FAIL("tokenizer %s: end-of-text id %d is outside the vocabulary of %d", what, eot, vocab_size);
    for (int b = 0; b < 256; b++) t->byte_id[b] = UINT32_MAX;
    for (int i = vocab_size - 1; i >= 0; i--)
        if (t->offset[i + 1] - t->offset[i] == 1) t->byte_id[bytes[t->offset[i]]] = (uint32_t)i;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] == UINT32_MAX)
            FAIL("tokenizer %s has no token for byte 0x%02x, so it cannot encode every text\n  hint: the vocabulary is "
                 "incomplete or corrupt", what, b);
    uint64_t size = 1024;
    while (size < 2 * (uint64_t)n_pairs + 2) size *= 2;
    t->slots = callocCheck(size, sizeof *t->slots);
    t->mask = size - 1;
    for (int i = 0; i < n_pairs; i++) {
        uint32_t *p = pairs[i];
        if (p[0] >= (uint32_t)vocab_size || p[1] >= (uint32_t)vocab_size || p[2] >= (uint32_t)vocab_size)
            FAIL("tokenizer %s: merge %d names an id outside the vocabulary of %d", what, i, vocab_size);
        /* a merge must make the bytes of left then right, or decode(encode(text)) would not give text back */
        uint32_t la = t->offset[p[0] + 1] - t->offset[p[0]], lb = t->offset[p[1] + 1] - t->offset[p[1]];
        if (t->offset[p[2] + 1] - t->offset[p[2]] != la + lb || memcmp(bytes + t->offset[p[2]], bytes + t->offset[p[0]], la) ||
            memcmp(bytes + t->offset[p[2]] + la, bytes + t->offset[p[1]], lb))
            FAIL("tokenizer %s: merge %d (%u + %u -> %u) does not make the bytes of its two parts: the vocabulary is corrupt",
                 what, i, p[0], p[1], p[2]);
        uint64_t key = pair_key(p[0], p[1]), h = hash64(key) & t->mask;
        while (t->slots[h].key && t->slots[h].key != key) h = (h + 1) & t->mask;
        t->slots[h] = (PairSlot){key, p[3], p[2]};   /* a repeated pair: the later rank wins, as in JS */
    }
    static uint64_t serial;
    t->serial = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->offset), free(t->bytes), free(t->pairs), free(t->slots), free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
int tokenizer_eot(const Tokenizer *t) { return t->eot; }

int tokenizer_n_merges(const Tokenizer *t) { return t->n_pairs; }

void tokenizer_merge(const Tokenizer *t, int i, uint32_t *left, uint32_t *right, uint32_t *rank) {
    *left = t->pairs[i][0], *right = t->pairs[i][1], *rank = t->pairs[i][3];
}

const uint8_t *tokenizer_token(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= (uint32_t)t->vocab_size) { *len = 0; return NULL; }
    *len = t->offset[id + 1] - t->offset[id];
    return t->bytes + t->offset[id];
}

size_t tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap) {
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *s = tokenizer_token(t, ids[i], &len);
        if (need < cap) memcpy(out + need, s, len < cap - need ? len : cap - need);
        need += len;
    }
    return need;
}

/* ------------------------------------------------------------------ encode */

/* BPE on one piece: out (n,) starts as one id per byte; returns the count left. */
static size_t bpe_piece(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = t->byte_id[s[i]];
    while (n > 1) {
        const PairSlot *best = NULL;
        uint32_t a = 0, b = 0;
        for (size_t i = 0; i + 1 < n; i++) {   /* lowest rank; on a tie the last one, as JS does */
            const PairSlot *p = pair_find(t, out[i], out[i + 1]);
            if (p && (!best || p->rank <= best->rank)) best = p, a = out[i], b = out[i + 1];
        }
        if (!best) break;
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && out[i] == a && out[i + 1] == b) out[j++] = best->merged, i += 2;
            else out[j++] = out[i++];
        }
        n = j;
    }
    return n;
}

/* The same for long pieces in O(n log n): symbols in a linked list, every
 * ranked adjacent pair in a min-heap by (rank, position). Each round takes
 * all entries of the lowest rank, keeps the pair of the last one (the JS
 * choice), and merges its occurrences left to right; pairs made in the round
 * wait for the next one, exactly as in the JS loop. */
typedef struct { uint32_t rank, pos, a, b; } HeapItem;

static int heap_less(HeapItem x, HeapItem y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }

static void heap_push(HeapItem *h, size_t *n, HeapItem x) {
    size_t i = (*n)++;
    for (; i > 0 && heap_less(x, h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = x;
}

static HeapItem heap_pop(HeapItem *h, size_t *n) {
    HeapItem top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (size_t c; (c = 2 * i + 1) < *n; i = c) {
        if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], x)) break;
        h[i] = h[c];
    }
    h[i] = x;
    return top;
}

static size_t bpe_long_piece(const Tokenizer *t, const uint8_t *s, size_t n, uint32_t *out) {
    uint32_t *sym = mallocCheck(n * sizeof *sym), *next = mallocCheck(n * sizeof *next), *prev = mallocCheck(n * sizeof *prev);
    HeapItem *heap = mallocCheck(3 * n * sizeof *heap), *round = mallocCheck(n * sizeof *round);
    size_t heap_n = 0;
    const uint32_t dead = UINT32_MAX, end = (uint32_t)n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]], next[i] = (uint32_t)i + 1, prev[i] = (uint32_t)i - 1;
    #define PUSH_PAIR(p) do { if ((p) != dead && next[p] != end) { const PairSlot *q = pair_find(t, sym[p], sym[next[p]]); \
        if (q) heap_push(heap, &heap_n, (HeapItem){q->rank, (p), sym[p], sym[next[p]]}); } } while (0)
    #define VALID(e) (sym[(e).pos] == (e).a && next[(e).pos] != end && sym[next[(e).pos]] == (e).b)
    for (uint32_t i = 0; i < end; i++) PUSH_PAIR(i);
    while (heap_n > 0) {
        HeapItem top = heap_pop(heap, &heap_n);
        if (!VALID(top)) continue;
        size_t k = 0;
        round[k++] = top;
        while (heap_n > 0 && heap[0].rank == top.rank) {
            HeapItem e = heap_pop(heap, &heap_n);
            if (VALID(e)) round[k++] = e;
        }
        uint32_t a = round[k - 1].a, b = round[k - 1].b, merged = pair_find(t, a, b)->merged;
        for (size_t j = 0; j < k; j++) {
            HeapItem e = round[j];
            if (e.a != a || e.b != b) { heap_push(heap, &heap_n, e); continue; }   /* same rank, other pair: later */
            if (!VALID(e)) continue;   /* its left symbol went into the previous merge */
            uint32_t p = e.pos, q = next[p];
            sym[p] = merged, sym[q] = dead, next[p] = next[q];
            if (next[q] != end) prev[next[q]] = p;
            PUSH_PAIR(prev[p]);
            PUSH_PAIR(p);
        }
    }
    #undef PUSH_PAIR
    #undef VALID
    size_t m = 0;
    for (uint32_t i = 0; i != end; i = next[i]) out[m++] = sym[i];
    free(sym), free(next), free(prev), free(heap), free(round);
    return m;
}

/* The word cache: piece bytes -> ids, one per thread, emptied when full or
 * when used with another tokenizer. Pieces longer than CACHE_MAX_PIECE skip it. */
enum { CACHE_SLOTS = 1 << 17, CACHE_BYTES = 1 << 21, CACHE_MAX_PIECE = 64 };   /* about 11 MB a thread */
typedef struct { uint64_t hash; uint32_t at, len, ids_at, n_ids; } CacheSlot;   /* hash 0 = empty */
typedef struct {
    uint64_t serial;
    size_t count, bytes_used, ids_used;
    CacheSlot slots[CACHE_SLOTS];
    uint8_t bytes[CACHE_BYTES];
    uint32_t ids[CACHE_BYTES];
} WordCache;
static _Thread_local WordCache *cache;

uint64_t tokenizer_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return hash64(h) | 1;
}

static void ids_reserve(uint32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    uint32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) die("out of host memory growing the token array to %zu ids", c);
    *ids = p, *cap = c;
}

size_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t **ids, size_t *cap) {
    if (!cache) cache = callocCheck(1, sizeof *cache);
    if (cache->serial != t->serial) {
        memset(cache->slots, 0, sizeof cache->slots);
        cache->serial = t->serial, cache->count = cache->bytes_used = cache->ids_used = 0;
    }
    size_t start = 0, count = 0;
    while (start < n) {
        size_t len = tokenizer_piece(text + start, n - start);
        const uint8_t *s = text + start;
        start += len;
        ids_reserve(ids, cap, count + len);
        uint32_t *out = *ids + count;
        if (len > CACHE_MAX_PIECE) { count += bpe_long_piece(t, s, len, out); continue; }
        uint64_t h = tokenizer_hash_bytes(s, len), slot = h & (CACHE_SLOTS - 1);
        CacheSlot *c;
        for (;; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
            c = &cache->slots[slot];
            if (c->hash == 0 || (c->hash == h && c->len == len && !memcmp(cache->bytes + c->at, s, len))) break;
        }
        if (c->hash) {
            memcpy(out, cache->ids + c->ids_at, c->n_ids * sizeof *out);
            count += c->n_ids;
            continue;
        }
        size_t m = bpe_piece(t, s, len, out);
        count += m;
        if (cache->count >= CACHE_SLOTS / 2 || cache->bytes_used + len > CACHE_BYTES || cache->ids_used + m > CACHE_BYTES) {
            memset(cache->slots, 0, sizeof cache->slots);   /* full: start over (find the slot again) */
            cache->count = cache->bytes_used = cache->ids_used = 0;
            for (slot = h & (CACHE_SLOTS - 1); cache->slots[slot].hash; slot = (slot + 1) & (CACHE_SLOTS - 1)) {}
            c = &cache->slots[slot];
        }
        *c = (CacheSlot){h, (uint32_t)cache->bytes_used, (uint32_t)len, (uint32_t)cache->ids_used, (uint32_t)m};
        memcpy(cache->bytes + cache->bytes_used, s, len);
        memcpy(cache->ids + cache->ids_used, out, m * sizeof *out);
        cache->bytes_used += len, cache->ids_used += m, cache->count++;
    }
    return count;
}

/* ------------------------------------------------------------------- train */

/* Training keeps every distinct piece once, with its count, as a list of
 * symbols; pair counts are weighted by piece counts and updated only for the
 * pieces a merge touches. The most frequent pair (ties: smallest ids) wins. */
typedef struct { uint32_t *sym; uint32_t len; int64_t count; } TrainWord;
typedef struct { uint32_t a, b; int64_t count; } TrainPair;
typedef struct {
    TrainPair *pair; size_t n, cap;
    int64_t *slot; uint64_t mask;   /* (a, b) -> index in pair, -1 = empty */
} PairCounts;

static void pair_add(PairCounts *pc, uint32_t a, uint32_t b, int64_t delta) {
    uint64_t key = pair_key(a, b), h = hash64(key) & pc->mask;
    for (; pc->slot[h] >= 0; h = (h + 1) & pc->mask) {
        TrainPair *p = &pc->pair[pc->slot[h]];
        if (p->a == a && p->b == b) { p->count += delta; return; }
    }
    if (pc->n == pc->cap) {
        pc->cap = pc->cap ? 2 * pc->cap : 1 << 16;
        pc->pair = realloc(pc->pair, pc->cap * sizeof *pc->pair);
        if (!pc->pair) die("out of host memory counting pairs");
    }
    pc->pair[pc->n] = (TrainPair){a, b, delta};
    pc->slot[h] = (int64_t)pc->n++;
    if (2 * pc->n > pc->mask) {   /* grow the table and re-insert */
        free(pc->slot);
        pc->mask = 2 * pc->mask + 1;
        pc->slot = mallocCheck((pc->mask + 1) * sizeof *pc->slot);
        memset(pc->slot, 0xff, (pc->mask + 1) * sizeof *pc->slot);
        for (size_t i = 0; i < pc->n; i++) {
            uint64_t g = hash64(pair_key(pc->pair[i].a, pc->pair[i].b)) & pc->mask;
            while (pc->slot[g] >= 0) g = (g + 1) & pc->mask;
            pc->slot[g] = (int64_t)i;
        }
    }
}

static void word_pairs(PairCounts *pc, const TrainWord *w, int sign) {
    for (uint32_t i = 0; i + 1 < w->len; i++) pair_add(pc, w->sym[i], w->sym[i + 1], sign * w->count);
}

Tokenizer *tokenizer_train(const uint8_t *text, size_t n, int vocab_size) {
    if (vocab_size < 257) die("tokenizer_train: a vocabulary needs at least 257 tokens (256 bytes + end of text), not %d", vocab_size);
    /* 1. distinct pieces and their counts (documents split at the literal <|endoftext|>) */
    size_t cap_words = 1 << 16, n_words = 0;
    uint64_t wmask = (1 << 17) - 1;
    int64_t *wslot = mallocCheck((wmask + 1) * sizeof *wslot);
    memset(wslot, 0xff, (wmask + 1) * sizeof *wslot);
    TrainWord *words = mallocCheck(cap_words * sizeof *words);
    const uint8_t **wtext = mallocCheck(cap_words * sizeof *wtext);
    size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    for (size_t doc = 0; doc < n;) {
        const uint8_t *sep = memmem(text + doc, n - doc, TOKENIZER_EOT_TEXT, eot_len);
        size_t end = sep ? (size_t)(sep - text) : n;
        for (size_t i = doc; i < end;) {
            size_t len = tokenizer_piece(text + i, end - i);
            const uint8_t *s = text + i;
            i += len;
            uint64_t h = tokenizer_hash_bytes(s, len) & wmask;
            for (; wslot[h] >= 0; h = (h + 1) & wmask) {
                TrainWord *w = &words[wslot[h]];
                if (w->len == len && !memcmp(wtext[wslot[h]], s, len)) break;
            }
            if (wslot[h] >= 0) { words[wslot[h]].count++; continue; }
            if (n_words == cap_words) {
                cap_words *= 2;
                words = realloc(words, cap_words * sizeof *words);
                wtext = realloc(wtext, cap_words * sizeof *wtext);
                if (!words || !wtext) die("out of host memory collecting pieces");
            }
            words[n_words] = (TrainWord){NULL, (uint32_t)len, 1};
            wtext[n_words] = s;
            wslot[h] = (int64_t)n_words++;
            if (2 * n_words > wmask) {
                free(wslot);
                wmask = 2 * wmask + 1;
                wslot = mallocCheck((wmask + 1) * sizeof *wslot);
                memset(wslot, 0xff, (wmask + 1) * sizeof *wslot);
                for (size_t k = 0; k < n_words; k++) {
                    uint64_t g = tokenizer_hash_bytes(wtext[k], words[k].len) & wmask;
                    while (wslot[g] >= 0) g = (g + 1) & wmask;
                    wslot[g] = (int64_t)k;
                }
            }
        }
        doc = sep ? end + eot_len : n;
    }
    free(wslot);
    size_t total_syms = 0;
    for (size_t k = 0; k < n_words; k++) total_syms += words[k].len;
    uint32_t *pool = mallocCheck((total_syms ? total_syms : 1) * sizeof *pool);
    PairCounts pc = {0};
    pc.mask = (1 << 16) - 1;
    pc.slot = mallocCheck((pc.mask + 1) * sizeof *pc.slot);
    memset(pc.slot, 0xff, (pc.mask + 1) * sizeof *pc.slot);
    for (size_t k = 0, at = 0; k < n_words; k++) {
        words[k].sym = pool + at;
        for (uint32_t i = 0; i < words[k].len; i++) pool[at++] = wtext[k][i];
        word_pairs(&pc, &words[k], +1);
    }
    free(wtext);

    /* 2. merges: token bytes grow as we go */
    int n_merges = vocab_size - 257;
    uint32_t (*pairs)[4] = mallocCheck(((size_t)n_merges + 1) * sizeof *pairs);
    int32_t *lens = mallocCheck((size_t)vocab_size * sizeof *lens);
    uint32_t *off = mallocCheck(((size_t)vocab_size + 1) * sizeof *off);
    size_t bytes_cap = 4096;
    uint8_t *bytes = mallocCheck(bytes_cap);
    for (int b = 0; b < 256; b++) bytes[b] = (uint8_t)b, lens[b] = 1, off[b] = (uint32_t)b;
    off[256] = 256;
    int k;
    for (k = 0; k < n_merges; k++) {
        TrainPair *best = NULL;
        for (size_t i = 0; i < pc.n; i++) {
            TrainPair *p = &pc.pair[i];
            if (!best || p->count > best->count || (p->count == best->count && (p->a < best->a || (p->a == best->a && p->b < best->b))))
                best = p;
        }
        if (!best || best->count < 2) break;
        uint32_t a = best->a, b = best->b, id = 256 + (uint32_t)k;
        pairs[k][0] = a, pairs[k][1] = b, pairs[k][2] = id, pairs[k][3] = (uint32_t)k;
        lens[id] = lens[a] + lens[b];
        while (off[id] + (size_t)lens[id] > bytes_cap) {
            bytes = realloc(bytes, bytes_cap *= 2);
            if (!bytes) die("out of host memory for token bytes");
        }
        memcpy(bytes + off[id], bytes + off[a], (size_t)lens[a]);
        memcpy(bytes + off[id] + lens[a], bytes + off[b], (size_t)lens[b]);
        off[id + 1] = off[id] + (uint32_t)lens[id];
        for (size_t w = 0; w < n_words; w++) {
            TrainWord *word = &words[w];
            uint32_t i = 0;
            while (i + 1 < word->len && !(word->sym[i] == a && word->sym[i + 1] == b)) i++;
            if (i + 1 >= word->len) continue;
            word_pairs(&pc, word, -1);
            uint32_t j = 0;
            for (i = 0; i < word->len;) {
                if (i + 1 < word->len && word->sym[i] == a && word->sym[i + 1] == b) word->sym[j++] = id, i += 2;
                else word->sym[j++] = word->sym[i++];
            }
            word->len = j;
            word_pairs(&pc, word, +1);
        }
    }
    int eot = 256 + k;   /* the end-of-text token comes last */
    lens[eot] = (int32_t)eot_len;
    while (off[eot] + eot_len > bytes_cap) {
        bytes = realloc(bytes, bytes_cap *= 2);
        if (!bytes) die("out of host memory for token bytes");
    }
    memcpy(bytes + off[eot], TOKENIZER_EOT_TEXT, eot_len);
    free(off), free(pool), free(words), free(pc.pair), free(pc.slot);
    char err[256];
    Tokenizer *t = tokenizer_build("(trained)", eot + 1, lens, bytes, k, pairs, eot, err, sizeof err);
    if (!t) die("internal: %s", err);
    return t;
}
