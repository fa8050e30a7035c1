/* tests/test_readers.c — hostile bytes for every reader: each bug issue 14 found
 * (and the integrity checks it added) as a regression test. Each case must end
 * in one clear line naming the file and what is wrong (or, where the input is
 * legal, in the right value), never in a crash, a hang or a silent misread.
 * Under `make asan` the same cases run with AddressSanitizer + UBSan, so an
 * overflow here fails even when the message looks right. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../checkpoint/json.h"
#include "../common/util.h"
#include "../data/loader.h"
#include "../data/shard.h"
#include "../data/tokenizer.h"
#include "../train/config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/llm3d_test_readers_XXXXXX", err[4096], out[1 << 16];

#include "scratch.h"

/* ------------------------------------------------------------------ shards */

static void test_shards(void) {
    uint32_t tok[300];
    for (int i = 0; i < 300; i++) tok[i] = (uint32_t)(i * 7 % 50);
    char good[512];
    snprintf(good, sizeof good, "%s", path_of("good.bin"));
    shard_write(good, tok, 300, 50);
    size_t n;
    uint8_t *b = read_file(good, &n);
    Loader l;
    int ids[64], targets[64], rc;
    CHECK(loader_try_open(&l, good, 2, 8, 0, 1, 1, 1, 0, err, sizeof err) == 0, "a v2 shard opens: %s", err);
    CHECK(l.shards[0].version == 2 && l.shards[0].n_chunks == 1, "one checksum chunk for 300 tokens");
    int ok = 1;
    for (int step = 0; step < 60 && ok; step++) ok = loader_try_next(&l, ids, targets, err, sizeof err) == 0;
    CHECK(ok && l.shards[0].checked[0], "every batch of a good shard passes its chunk check: %s", err);
    loader_close(&l);

    /* a flipped token byte is caught before any token of its chunk is used */
    b[1024 + 2 * 77] ^= 0x01;
    const char *flipped = path_of("flipped.bin");
    write_file(flipped, b, n);
    CHECK(loader_try_open(&l, flipped, 2, 8, 0, 1, 1, 1, 0, err, sizeof err) == 0, "a damaged shard still opens (its header is fine)");
    REFUSED(loader_try_next(&l, ids, targets, err, sizeof err), "fail their checksum", "flipped token byte");
    CHECK(strstr(err, "flipped.bin") != NULL, "the message names the shard: %s", err);
    loader_close(&l);
    b[1024 + 2 * 77] ^= 0x01;

    /* a flipped header byte */
    b[20] ^= 0x40;
    write_file(flipped, b, n);
    REFUSED(loader_try_open(&l, flipped, 2, 8, 0, 1, 1, 1, 0, err, sizeof err), "header checksum mismatch", "flipped header byte");
    b[20] ^= 0x40;

    /* version 1 (no checksums) still reads */
    int32_t h1[256] = {SHARD_MAGIC, 1, 300, 0, 2, 50};
    memcpy(b, h1, sizeof h1);
    const char *v1 = path_of("v1.bin");
    write_file(v1, b, n);
    CHECK(loader_try_open(&l, v1, 2, 8, 0, 1, 1, 1, 0, err, sizeof err) == 0 && l.shards[0].version == 1 &&
          loader_try_next(&l, ids, targets, err, sizeof err) == 0, "a version 1 shard still reads: %s", err);
    loader_close(&l);

    /* count x width wrapping around to the file size: 4 * (2^62 + 100) = 400 mod 2^64 */
    int64_t wrap = ((int64_t)1 << 62) + 100;
    int32_t hw[256] = {SHARD_MAGIC, 1, (int32_t)(wrap & 0xffffffff), (int32_t)(wrap >> 32), 4, 50};
    memcpy(b, hw, sizeof hw);
    const char *wrapped = path_of("wrap.bin");
    write_file(wrapped, b, 1024 + 400);
    REFUSED(loader_try_open(&l, wrapped, 1, 4, 0, 1, 1, 1, 0, err, sizeof err), "header promises", "count x width wraps");
    /* the count's high word negative */
    int32_t hn[256] = {SHARD_MAGIC, 1, 10, (int32_t)0x80000000, 2, 50};
    memcpy(b, hn, sizeof hn);
    write_file(wrapped, b, 1024 + 20);
    REFUSED(loader_try_open(&l, wrapped, 1, 4, 0, 1, 1, 1, 0, err, sizeof err), "header promises", "negative count");
    free(b);

    /* a token id past 2^31 (found by fuzz_shard): with no vocab_size to check against, it came out as a negative id */
    uint32_t big[40];
    for (int i = 0; i < 40; i++) big[i] = i == 9 ? 0xfffffe2fu : 7;
    shard_write(wrapped, big, 40, 0);
    CHECK(loader_try_open(&l, wrapped, 1, 4, 0, 1, 1, 0, 0, err, sizeof err) == 0, "a width-4 shard opens: %s", err);
    rc = 0;
    for (int step = 0; step < 9 && rc == 0; step++) rc = loader_try_next(&l, ids, targets, err, sizeof err);
    REFUSED(rc, "past any vocabulary", "token id 0xfffffe2f");
    loader_close(&l);
    /* a header vocabulary past the bound --vocab_size has (2^31-1 overflowed model/layout.c; 2^24+1 ended in a memory message) */
    int vocabs[2] = {INT32_MAX, (1 << 24) + 1};
    for (int i = 0; i < 2; i++) {
        shard_write(wrapped, big, 40, vocabs[i]);
        REFUSED(loader_try_open(&l, wrapped, 1, 4, 0, 1, 1, 0, 0, err, sizeof err), "vocabulary size", "shard vocab past 2^24");
        CHECK(strstr(err, "wrap.bin") && strstr(err, "prepare"), "the message names the shard and what to do: %s", err);
    }
    /* a device or a FIFO is refused at once, not read forever */
    REFUSED(loader_try_open(&l, "/dev/zero", 1, 4, 0, 1, 1, 1, 0, err, sizeof err), "not a regular file", "shard /dev/zero");
    const char *fifo = path_of("fifo.bin");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    REFUSED(loader_try_open(&l, fifo, 1, 4, 0, 1, 1, 1, 0, err, sizeof err), "not a regular file", "shard FIFO");

    /* saved data positions: negative ones are refused (a negative cursor read before the sample order) */
    CHECK(loader_try_open(&l, good, 2, 8, 0, 1, 1, 1, 0, err, sizeof err) == 0, "reopen");
    REFUSED(loader_try_set_state(&l, (LoaderState){0, -5}, err, sizeof err), "is not a position", "negative cursor");
    REFUSED(loader_try_set_state(&l, (LoaderState){-1, 0}, err, sizeof err), "is not a position", "negative epoch");
    REFUSED(loader_try_set_state(&l, (LoaderState){0, INT64_MAX - 1}, err, sizeof err), "is not a position", "cursor near 2^63");
    REFUSED(loader_try_set_state(&l, (LoaderState){INT64_MAX - 1, 0}, err, sizeof err), "is not a position", "epoch near 2^63 (the next rollover overflowed)");
    CHECK(loader_try_set_state(&l, (LoaderState){3, l.n_samples + 100}, err, sizeof err) == 0 &&
          loader_try_next(&l, ids, targets, err, sizeof err) == 0 && l.state.epoch == 4 && l.state.cursor == 2,
          "a cursor past the end (the shards changed since the save) starts the next epoch");
    loader_close(&l);
}

/* ------------------------------------------------------------- checkpoints */

static const char *CONFIG = "vocab_size=8\ndim=4\nn_layers=1\nn_heads=2\nn_kv_heads=1\nffn_dim=4\nseq_len=4\ntie_embeddings=0\n"
                            "rope_theta=10000\nnorm_eps=1e-05\nseed=7\n";

static void write_ckpt(const char *path, CkptState s, const char *config, int64_t shape0) {
    CkptWriter w;
    ckpt_writer_open(&w, path, &s, config, (CkptWriteHooks){-1, -1});
    float x[12] = {0};
    int64_t shape[2] = {shape0, 3};
    ckpt_writer_add(&w, "w", CKPT_F32, 2, shape, x);
    ckpt_writer_finish(&w);
}

/* Patches int64 field at of a checkpoint header and fixes the header CRC. */
static void patch_ckpt(const char *path, int at, int64_t v) {
    size_t n;
    uint8_t *b = read_file(path, &n);
    int32_t *h = (int32_t *)b;
    h[at] = (int32_t)(uint32_t)((uint64_t)v & 0xffffffff), h[at + 1] = (int32_t)(uint32_t)((uint64_t)v >> 32);
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    write_file(path, b, n);
    free(b);
}

static void test_checkpoints(void) {
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = 5, .loss_scale = 1, .optimizer = CKPT_OPT_ADAMW};
    char p[512];
    snprintf(p, sizeof p, "%s", path_of("state.bin"));
    CkptReader r;
    write_ckpt(p, s, CONFIG, 4);
    CHECK(ckpt_open(&r, p, err, sizeof err) == 0, "a good checkpoint opens: %s", err);
    ModelConfig mc;
    CHECK(checkpoint_model_config(r.config_text, &mc, err, sizeof err) == 0 && mc.dim == 4, "its model config reads: %s", err);
    ckpt_close(&r);

    /* the run state out of range: each refused by name */
    struct { int at; int64_t v; const char *name; } bad[] = {
        {CKPT_H_STEP, (int64_t)1 << 31, "step"}, {CKPT_H_STEP, -1, "step"}, {CKPT_H_LOADER_CURSOR, -7, "loader cursor"},
        {CKPT_H_LOADER_EPOCH, -1, "loader epoch"}, {CKPT_H_OPTIMIZER_STEP, (int64_t)1 << 40, "optimizer step"},
        /* in their fields' range but not in what the run does with them (issue 30): o->step++ at 2^31-1 overflowed,
         * as did the epoch's rollover near 2^63 */
        {CKPT_H_OPTIMIZER_STEP, INT32_MAX, "optimizer step"}, {CKPT_H_OPTIMIZER_STEP, 6, "optimizer step"},
        {CKPT_H_LOADER_EPOCH, INT64_MAX - 1, "loader epoch"}, {CKPT_H_LOADER_CURSOR, INT64_MAX - 1, "loader cursor"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_ckpt(p, s, CONFIG, 4);
        patch_ckpt(p, bad[i].at, bad[i].v);
        char want[64];
        snprintf(want, sizeof want, "run state's %s is out of range", bad[i].name);
        REFUSED(ckpt_open(&r, p, err, sizeof err), want, bad[i].name);
    }
    /* fp16's clean-step count at 2^31-1 overflowed at the next clean step (train/trainer.c): it restarts at 2000 */
    int clean[2] = {INT32_MAX, CKPT_MAX_CLEAN_STEPS};
    for (int i = 0; i < 2; i++) {
        CkptState c = s;
        c.clean_steps = clean[i];
        write_ckpt(p, c, CONFIG, 4);
        REFUSED(ckpt_open(&r, p, err, sizeof err), "run state's clean steps is out of range", "clean steps");
        CHECK(strstr(err, "state.bin") && strstr(err, "hint:"), "names the file and what to do: %s", err);
    }
    CkptState edge = s;
    edge.clean_steps = CKPT_MAX_CLEAN_STEPS - 1, edge.optimizer_step = edge.step, edge.loader_epoch = CKPT_MAX_POSITION;
    write_ckpt(p, edge, CONFIG, 4);
    CHECK(ckpt_open(&r, p, err, sizeof err) == 0, "the largest state a run can reach still opens: %s", err);
    ckpt_close(&r);
    CkptState nan_scale = s;
    nan_scale.loss_scale = NAN;
    write_ckpt(p, nan_scale, CONFIG, 4);
    REFUSED(ckpt_open(&r, p, err, sizeof err), "loss scale is out of range", "nan loss scale");

    /* a tensor table whose shape product overflows int64 (table CRC recomputed so it is the shape that is refused) */
    write_ckpt(p, s, CONFIG, 4);
    size_t n;
    uint8_t *b = read_file(p, &n);
    int32_t *h = (int32_t *)b;
    int64_t table = (int64_t)((uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET] | (uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET + 1] << 32);
    CkptEntry *e = (CkptEntry *)(b + table);
    e->shape[0] = (int64_t)1 << 62, e->shape[1] = 8;   /* 2^65 elements: wraps to 0, as does bytes 0 below */
    e->bytes = 0;
    h[CKPT_H_TABLE_CRC] = (int32_t)ckpt_crc32(0, e, sizeof *e);
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    write_file(p, b, n);
    free(b);
    REFUSED(ckpt_open(&r, p, err, sizeof err), "is malformed or lies outside the data", "shape product overflow");

    /* the model in the config text: non-finite, negative or absurd values */
    const char *configs[][2] = {
        {"norm_eps=nan", "not a finite number"}, {"norm_eps=-1e-5", "norm_eps -1e-05 is outside"}, {"rope_theta=inf", "not a finite number"},
        {"rope_theta=0", "rope_theta 0 is outside"}, {"dim=1e300", "not a whole number"}, {"n_heads=3", "heads must divide dim"}};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        char text[512], key[32];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(configs[i][0], '=') - configs[i][0]), configs[i][0]);
        snprintf(text, sizeof text, "%s\n%s", configs[i][0], CONFIG);   /* the first line of a key wins (checkpoint_config_value) */
        REFUSED(checkpoint_model_config(text, &mc, err, sizeof err), configs[i][1], configs[i][0]);
        CHECK(strstr(err, key) != NULL, "the message names %s: %s", key, err);
    }

    /* inspect with a 4-dimensional tensor of 19-digit dims: the shape column is cut, not overflowed */
    CkptWriter w;
    ckpt_writer_open(&w, p, &s, CONFIG, (CkptWriteHooks){-1, -1});
    int64_t shape4[4] = {0, 1000000000000000000ll, 1000000000000000000ll, 1000000000000000000ll};
    ckpt_writer_add(&w, "wide", CKPT_F32, 4, shape4, NULL);
    ckpt_writer_finish(&w);
    FILE *devnull = fopen("/dev/null", "w");
    /* its table disagrees with its config (no model has "wide"): listed in full, then refused (issue 50) */
    CHECK(checkpoint_inspect(p, devnull) == 1, "inspect of a tensor with huge dims lists it and says the table disagrees: %s", p);

    /* names JSON must escape and long shapes (they overflowed export's safetensors header): since issue 30 export takes
     * only the model's own tensors, so such a table is refused in words before anything is written */
    char name[CKPT_NAME_BYTES] = "q\"uo\\te\tname";
    memset(name + strlen(name), 'x', CKPT_NAME_BYTES - 1 - strlen(name));
    ckpt_writer_open(&w, p, &s, CONFIG, (CkptWriteHooks){-1, -1});
    int64_t big[4] = {0, (int64_t)1 << 52, (int64_t)1 << 52, (int64_t)1 << 52}, small[2] = {2, 3};
    float x[6] = {1, 2, 3, 4, 5, 6};
    ckpt_writer_add(&w, name, CKPT_F32, 4, big, NULL);
    ckpt_writer_add(&w, "w", CKPT_F32, 2, small, x);
    ckpt_writer_finish(&w);
    CkptReader rn;
    ModelConfig mcn;
    CHECK(ckpt_open(&rn, p, err, sizeof err) == 0 && checkpoint_model_config(rn.config_text, &mcn, err, sizeof err) == 0, "opens: %s", err);
    REFUSED(checkpoint_check_tensors(&rn, &mcn, err, sizeof err), "has no place for", "a weight named with quotes and a tab");
    ckpt_close(&rn);
    char text[32];
    ckpt_shape_text(shape4, 4, text, sizeof text);
    CHECK(strlen(text) == 31 && !strcmp(text + 28, "..."), "a shape too long for its buffer ends in '...': %s", text);
    fclose(devnull);
}

/* -------------------------------------------------------------- safetensors */

/* A folder with config.json (the 4-wide model of CONFIG) and model.safetensors from json and data_bytes zeros. */
static const char *hf_folder(const char *json, size_t data_bytes, int64_t header_delta) {
    const char *d = path_of("hf");
    mkdir(d, 0755);
    const char *cj = "{\"hidden_size\": 4, \"intermediate_size\": 4, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
                     "\"num_hidden_layers\": 1, \"vocab_size\": 8}";
    write_file(path_of("hf/config.json"), cj, strlen(cj));
    FILE *f = fopenCheck(path_of("hf/model.safetensors"), "wb");
    uint64_t n = (strlen(json) + 7) / 8 * 8, stated = n + (uint64_t)header_delta;
    fwrite(&stated, 8, 1, f);
    fprintf(f, "%-*s", (int)n, json);
    for (size_t i = 0; i < data_bytes; i++) fputc(i & 0xff, f);
    fclose(f);
    return d;
}

static void test_safetensors(void) {
    char st[512];
    snprintf(st, sizeof st, "%s", path_of("hf/model.safetensors"));
    FILE *devnull = fopen("/dev/null", "w");
    const char *two = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
    hf_folder(two, 11, 0);
    CHECK(hf_inspect(st, devnull) == 0, "two tensors tiling the data exactly are accepted");
    /* the header length one byte short: every tensor would read shifted by one */
    hf_folder(two, 11, -1);
    CHECK(hf_inspect(st, devnull) != 0, "a header length one byte short is refused");
    struct { const char *json; size_t data; const char *want; } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "longer than its tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "the file is truncated"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[9,12]}}", 12, "a gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[5,8]}}", 8, "overlapping"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}", 11, "is given twice"},   /* the JSON reader refuses it now */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8],\"data_offsets\":[0,0]}}", 0, "too many elements"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}", 0, "too large to count"},
        {"{\"__metadata__\":{\"format\":1},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "not a string"},
        {"{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "not valid UTF-8"},
        /* an empty dtype looped forever (a substring search advancing by its length, 0: found by fuzz_safetensors) */
        {"{\"a\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"\\u0000\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "dtype holding a NUL byte"},
        /* issue 30: a decoded dtype compared as a C string read "F32\u0000junk" as F32 */
        {"{\"a\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype holding a NUL byte"},
        {"{\"a\":{\"dtype\":\"F1\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"I8 U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *d = hf_folder(bad[i].json, bad[i].data, 0);
        ModelConfig mc = {0};
        CHECK(hf_read_config(d, &mc, err, sizeof err) == 0, "config.json reads: %s", err);
        Model m;
        Comm comm;
        comm_init_one(&comm);
        model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 2, RECOMPUTE_NONE);
        REFUSED(hf_load_weights(d, &m, err, sizeof err), bad[i].want, bad[i].json);
        model_free(&m);
        comm_free(&comm);
    }
    /* inspect of a tensor with many dimensions: its shape column is cut, not overflowed */
    char json[2048];
    int o = sprintf(json, "{\"a\":{\"dtype\":\"U8\",\"shape\":[");
    for (int d = 0; d < 200; d++) o += sprintf(json + o, d ? ",1" : "1");
    sprintf(json + o, "],\"data_offsets\":[0,1]}}");
    hf_folder(json, 1, 0);
    CHECK(hf_inspect(st, devnull) == 0, "inspect of a 200-dimensional tensor");
    /* config.json: non-finite or out-of-range numbers */
    const char *d = path_of("hf");
    const char *cfgs[][2] = {
        {"\"rms_norm_eps\": 1e999", "rms_norm_eps"}, {"\"rms_norm_eps\": -1e-6", "rms_norm_eps"}, {"\"rope_theta\": 0", "rope_theta"},
        {"\"rope_theta\": 1e300", "rope_theta"}, {"\"max_position_embeddings\": 1073741824", "seq_len"}};
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char cj[512];
        snprintf(cj, sizeof cj, "{\"hidden_size\": 4, \"intermediate_size\": 4, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, "
                 "\"vocab_size\": 8, %s}", cfgs[i][0]);
        write_file(path_of("hf/config.json"), cj, strlen(cj));
        ModelConfig mc;
        REFUSED(hf_read_config(d, &mc, err, sizeof err), cfgs[i][1], cfgs[i][0]);
    }
    fclose(devnull);
}

/* JSON escapes of UTF-16 surrogates: only a high one followed by a low one is a character */
static void test_json_surrogates(void) {
    const char *bad[] = {"\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800\\ud800\"", "\"\\ud8"};
    Json j;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(json_parse(&j, bad[i], strlen(bad[i]), err, sizeof err) != 0 && strstr(err, "escape"), "lone surrogate %s: %s", bad[i], err);
    const char *good = "\"\\ud83d\\ude00\"";
    char s[8];
    CHECK(json_parse(&j, good, strlen(good), err, sizeof err) == 0 && json_string(&j, 0, s, sizeof s) == 0 &&
          !strcmp(s, "\xf0\x9f\x98\x80"), "a surrogate pair decodes to U+1F600: %s", err);
    json_free(&j);
}

/* --------------------------------------------------------------- tokenizers */

static void test_tokenizers(void) {
    const char *text = "the cat sat on the mat, the rat sat on the hat; then the cat ran";
    Tokenizer *t = tokenizer_train((const uint8_t *)text, strlen(text), 270);
    char p[512];
    snprintf(p, sizeof p, "%s", path_of("tokenizer.bin"));
    tokenizer_save(t, p);
    tokenizer_free(t);
    size_t n;
    uint8_t *b = read_file(p, &n);
    t = tokenizer_try_load(p, err, sizeof err);
    CHECK(t != NULL, "a v2 tokenizer.bin reads: %s", err);
    tokenizer_free(t);
    b[n - 7] ^= 0x10;   /* the last merge's merged id, + 4096 */
    write_file(p, b, n);
    REFUSED(tokenizer_try_load(p, err, sizeof err) == NULL, "checksum mismatch", "flipped byte in tokenizer.bin");
    b[4] = 1;           /* version 1: no checksum, so the damage reaches the merge check */
    write_file(p, b, n);
    t = tokenizer_try_load(p, err, sizeof err);
    CHECK(t == NULL && (strstr(err, "merge") || strstr(err, "outside")), "a damaged v1 vocabulary is refused by its merge check: %s", err);
    tokenizer_free(t);
    b[n - 7] ^= 0x10;
    write_file(p, b, n);
    t = tokenizer_try_load(p, err, sizeof err);
    CHECK(t != NULL, "an intact version 1 tokenizer.bin still reads: %s", err);
    tokenizer_free(t);
    free(b);

    /* GPT-2's files: a tiny vocabulary of the 256 byte tokens, "th", "the" and <|endoftext|> */
    static char json[16384];
    size_t o = (size_t)sprintf(json, "{");
    for (int c = 0, k = 0; c < 256; c++) {   /* GPT-2's byte characters: printable bytes as themselves, others from U+0100 */
        int printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae, cp = printable ? c : 256 + k++;
        o += (size_t)(cp == '"' || cp == '\\' ? sprintf(json + o, "\"\\%c\": %d, ", cp, c) : sprintf(json + o, "\"\\u%04x\": %d, ", cp, c));
    }
    size_t body = o;
    o += (size_t)sprintf(json + o, "\"th\": 256, \"the\": 257, \"<|endoftext|>\": 258}");
    char enc[512], bpe[512];
    snprintf(enc, sizeof enc, "%s", path_of("encoder.json")), snprintf(bpe, sizeof bpe, "%s", path_of("vocab.bpe"));
    write_file(enc, json, o);
    write_file(bpe, "#version: 0.2\nt h\nth e\n", 23);
    t = tokenizer_try_load_gpt2(enc, bpe, err, sizeof err);
    CHECK(t != NULL && tokenizer_vocab_size(t) == 259, "a tiny GPT-2 vocabulary reads: %s", err);
    tokenizer_free(t);
    /* a vocab.bpe line far longer than encoder.json (it overflowed the token buffer) */
    size_t long_n = 3 * o;
    char *line = mallocCheck(long_n + 32);
    memcpy(line, "#version: 0.2\n", 14);
    memset(line + 14, 'a', long_n);
    memcpy(line + 14 + long_n, " b\n", 3);
    write_file(bpe, line, 14 + long_n + 3);
    free(line);
    REFUSED(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL, "merges tokens that", "vocab.bpe line longer than encoder.json");
    /* a \u escape cut short by the end of the file, and a UTF-8 character cut short */
    write_file(bpe, "#version: 0.2\nt h\n", 18);
    memcpy(json + body, "\"\\u0", 4);   /* ..., "\u0 and the end of the file */
    write_file(enc, json, body + 4);
    REFUSED(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL, "without 4 hex digits", "truncated \\u escape");
    memcpy(json + body, "\"\xc4", 2);
    write_file(enc, json, body + 2);
    CHECK(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL && strstr(err, "encoder.json"),
          "a character cut short at the end of encoder.json: %s", err);
    /* a token longer than any GPT-2 has: refused, so a vocab.bpe line's comma aliases stay cheap */
    char *longtok = mallocCheck(body + 700);
    memcpy(longtok, json, body);
    size_t lo = body;
    longtok[lo++] = '"';
    memset(longtok + lo, ',', 600), lo += 600;
    lo += (size_t)sprintf(longtok + lo, "\": 256}");
    write_file(enc, longtok, lo);
    free(longtok);
    REFUSED(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL, "more than 512", "a 600-byte token in encoder.json");
    /* a key with no id */
    memcpy(json + body, "\"th\": }", 7);
    write_file(enc, json, body + 7);
    REFUSED(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL, "has no id", "key without an id");
    /* issue 30: bytes after the closing brace, stray commas, a token given twice: JSON.parse would refuse or differ */
    write_file(bpe, "#version: 0.2\nt h\nth e\n", 23);
    const char *tails[][2] = {{"\"th\": 256, \"the\": 257, \"<|endoftext|>\": 258} trailing", "bytes after the closing"},
                              {"\"th\": 256, \"the\": 257, \"<|endoftext|>\": 258}}", "bytes after the closing"},
                              {"\"th\": 256,, \"the\": 257, \"<|endoftext|>\": 258}", "not a string key"},
                              {"\"th\": 256 \"the\": 257, \"<|endoftext|>\": 258}", "expected ',' or '}'"},
                              {"\"th\": 256, \"the\": 257, \"<|endoftext|>\": 258, \"th\": 259}", "a key given twice"}};
    for (int i = 0; i < 5; i++) {
        size_t m = body + (size_t)sprintf(json + body, "%s", tails[i][0]);
        write_file(enc, json, m);
        REFUSED(tokenizer_try_load_gpt2(enc, bpe, err, sizeof err) == NULL, tails[i][1], tails[i][0]);
        CHECK(strstr(err, "encoder.json") != NULL, "names the file: %s", err);
    }
}

/* ------------------------------------------------------------ config files */

static void test_config(void) {
    Config c;
    char ini[512];
    snprintf(ini, sizeof ini, "%s", path_of("run.ini"));
    /* a comment longer than the old 2048-byte line buffer: its tail was read as a live key */
    size_t n = 5000;
    char *text = mallocCheck(n + 64);
    memset(text, '#', 1);
    memset(text + 1, 'x', n - 1);
    strcpy(text + n, " dim = 12\nn_heads = 2\n");
    write_file(ini, text, strlen(text));
    free(text);
    char arg[600];
    snprintf(arg, sizeof arg, "--config=%s", ini);
    char *argv[] = {"train", arg, NULL};
    CHECK(config_try_parse_args(&c, 2, argv, err, sizeof err) == 0 && c.dim == 128 && c.n_heads == 2,
          "a long comment stays a comment (dim %d, want the default 128): %s", c.dim, err);
    /* devices, FIFOs, folders and huge files are refused at once, in words */
    char *dev[] = {"train", "--config=/dev/zero", NULL};
    REFUSED(config_try_parse_args(&c, 2, dev, err, sizeof err), "is not a regular file", "--config=/dev/zero");
    CHECK(strstr(err, "/dev/zero") != NULL, "the message names the file");
    snprintf(arg, sizeof arg, "--config=%s", dir);
    REFUSED(config_try_parse_args(&c, 2, argv, err, sizeof err), "is not a regular file", "--config=<a folder>");
    snprintf(arg, sizeof arg, "--config=%s", path_of("fifo.bin"));
    REFUSED(config_try_parse_args(&c, 2, argv, err, sizeof err), "is not a regular file", "--config=<a FIFO>");
    FILE *f = fopenCheck(ini, "wb");
    for (int i = 0; i < (1 << 20) / 16 + 1; i++) fputs("# padding line.\n", f);
    fclose(f);
    snprintf(arg, sizeof arg, "--config=%s", ini);
    REFUSED(config_try_parse_args(&c, 2, argv, err, sizeof err), "more than the 1048576", "a 1 MiB config file");
    write_file(ini, "dim = 64\n\0n_heads = 4\n", 22);
    REFUSED(config_try_parse_args(&c, 2, argv, err, sizeof err), "NUL byte", "a config file with a NUL byte");
    /* values: non-finite, negative, out of range, with the bound named */
    const char *values[][2] = {
        {"--norm_eps=nan", "is not a number"}, {"--norm_eps=-1e-5", "out of range [1e-12, 1]"}, {"--norm_eps=0", "out of range [1e-12, 1]"},
        {"--rope_theta=inf", "is not a number"}, {"--rope_theta=-5", "out of range [1, 1e+12]"}, {"--lr=1e400", "is not a number"},
        {"--max_steps=3e9", "out of range [0, 2147483647]"}, {"--batch_size=2000000", "out of range [1, 1048576]"},
        {"--batch_size=1048576 --seq_len=4096", "tokens per micro-batch is more than 2147483647"}, {"--vocab_size=99999999", "out of range"}};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char copy[128], *av[4] = {"train"};
        int ac = 1;
        snprintf(copy, sizeof copy, "%s", values[i][0]);
        for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) av[ac++] = tok;
        REFUSED(config_try_parse_args(&c, ac, av, err, sizeof err), values[i][1], values[i][0]);
    }
}

/* ---------------------------------------- prepare and the train program */

static void test_programs(void) {
    char cmd[2048], train[512], args[1024];
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train, sizeof train, "%s/train", build);
    /* a symlink loop and a link out of the input: neither followed, the run ends */
    char in[512], outside[512];
    snprintf(in, sizeof in, "%s", path_of("corpus")), snprintf(outside, sizeof outside, "%s", path_of("outside"));
    mkdir(in, 0755), mkdir(outside, 0755);
    mkdir(path_of("corpus/sub"), 0755);
    write_file(path_of("corpus/a.txt"), "the first document, about cats and hats.", 40);
    write_file(path_of("corpus/sub/b.txt"), "the second document, about rats and mats.", 41);
    write_file(path_of("outside/secret.txt"), "text from outside the input", 27);
    CHECK(symlink("..", path_of("corpus/sub/loop")) == 0 && symlink(outside, path_of("corpus/escape")) == 0 &&
          symlink("a.txt", path_of("corpus/again.txt")) == 0, "symlinks");
    snprintf(args, sizeof args, "prepare --input=%s --out=%s --train-vocab=260 --val-fraction=0", in, path_of("out"));
    snprintf(cmd, sizeof cmd, "timeout 60 %s", train);
    int rc = test_run(cmd, args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "2 files") && strstr(out, "outside --input"),
          "prepare with a symlink loop and a link outside the input: 2 files, a note, exit 0 (rc %d):\n%s", rc, out);
    /* a failing run (an unreadable file in pass 2 is hard to stage; a folder named like a file is not):
     * a vocabulary that cannot be read fails after the staging folder exists, and leaves the output as it was */
    size_t n_before;
    uint8_t *before = read_file(path_of("out/train_000.bin"), &n_before);
    write_file(path_of("bad_vocab.bin"), "not a vocabulary at all, but long enough to pass the size test......", 68);
    snprintf(args, sizeof args, "prepare --input=%s --out=%s --vocab=%s", in, path_of("out"), path_of("bad_vocab.bin"));
    rc = test_run(cmd, args, out, sizeof out);
    size_t n_after;
    uint8_t *after = read_file(path_of("out/train_000.bin"), &n_after);
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -c prepare", path_of("out"));
    char left[64];
    int leftovers = test_run(cmd, "", left, sizeof left) == 0 ? atoi(left) : 0;
    CHECK(rc == 1 && strstr(out, "error:") && n_before == n_after && !memcmp(before, after, n_before) && leftovers == 0,
          "a failed prepare leaves the output folder as it was, no staging folder (rc %d, %d left):\n%s", rc, leftovers, out);
    free(before), free(after);
    /* a token id past INT_MAX for `logits` wrapped to a negative index */
    snprintf(cmd, sizeof cmd, "timeout 20 %s", train);
    rc = test_run(cmd, "logits --model=/nonexistent --ids=1,99999999999999 --out=/dev/null", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "ids=1,99999999999999: item 2") && strstr(out, "out of range [0, 2147483647]"),
          "logits --ids past INT_MAX (rc %d): %s", rc, out);
    /* a FIFO given as the vocabulary: refused at once (an fopen probe used to block on it) */
    snprintf(args, sizeof args, "sample --model=%s --tokenizer=%s", path_of("out"), path_of("fifo.bin"));
    rc = test_run(cmd, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "is not a regular file"), "sample --tokenizer=<a FIFO> (rc %d): %s", rc, out);
    /* --config=/dev/zero through the real program: fails fast, in words */
    rc = test_run(cmd, "--config=/dev/zero", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "error: config file '/dev/zero' is not a regular file"), "train --config=/dev/zero (rc %d): %s", rc, out);
}

int main(void) {
    if (!mkdtemp(dir)) die("cannot make a temporary folder");
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_shards();
    test_checkpoints();
    test_safetensors();
    test_json_surrogates();
    test_tokenizers();
    test_config();
    test_programs();
    scratch_remove(dir);
    return test_summary();
}
