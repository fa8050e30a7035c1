/* tests/test_checkpoint.c — the checkpoint layer in-process: file format, CRC,
 * dtype conversions, the JSON reader, save/load round trips, loading slices
 * under tensor and pipeline parallel layouts, retention, crash and full-disk
 * hooks (in forked children), every kind of damaged file, and Hugging Face
 * export -> import, bit-exact in fp32. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../common/util.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../checkpoint/json.h"
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[256];
static const char *CONFIG = "vocab_size=40\ndim=32\nn_layers=2\nn_heads=4\nn_kv_heads=2\nffn_dim=48\nseq_len=8\n"
                            "tie_embeddings=0\nrope_theta=10000\nnorm_eps=9.99999975e-06\nseed=7\ninit_std=0.0199999996\nlr=0.001\n";

static ModelConfig model_cfg(int tie) {
    return (ModelConfig){.vocab_size = 40, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 48,
                         .seq_len = 8, .tie_embeddings = tie, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
}

static Comm grid(int tp, int tp_rank, int pp, int pp_rank) {
    Comm c = {0};
    c.world_size = tp * pp; c.dp = 1; c.cp = 1; c.tp = tp; c.pp = pp; c.tp_rank = tp_rank; c.pp_rank = pp_rank;
    c.rank = pp_rank * tp + tp_rank;
    return c;
}

static float *host_params(const Model *m) {
    float *h = mallocCheck(m->n_params * sizeof(float));
    model_get_params(m, h);
    return h;
}

/* Runs fn in a child; returns its wait status. The child's stderr goes to errfile. */
static int in_child(void (*fn)(void *), void *arg, const char *errfile) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        int out = open("/dev/null", O_WRONLY);
        dup2(out, 1);
        fn(arg);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return status;
}

static int file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

static void copy_file(const char *from, const char *to) {
    FILE *a = fopenCheck(from, "rb"), *b = fopenCheck(to, "wb");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwriteCheck(buf, 1, n, b, to);
    fclose(a);
    fclose(b);
}

/* ------------------------------------------------------------- the tests */

static void test_crc_and_dtypes(void) {
    CHECK(ckpt_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 check value %08x", ckpt_crc32(0, "123456789", 9));
    uint32_t c = ckpt_crc32(ckpt_crc32(0, "1234", 4), "56789", 5);
    CHECK(c == 0xCBF43926u, "crc32 in two pieces %08x", c);
    int bad16 = 0, badb = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = ckpt_f16_to_f32((uint16_t)h);
        if (!isnan(x) && ckpt_f32_to_f16(x) != h) bad16++;
        float y = ckpt_bf16_to_f32((uint16_t)h);
        if (!isnan(y) && ckpt_f32_to_bf16(y) != h) badb++;
    }
    CHECK(bad16 == 0, "%d f16 values do not round-trip through f32", bad16);
    CHECK(badb == 0, "%d bf16 values do not round-trip through f32", badb);
    CHECK(ckpt_f16_to_f32(0x3c00) == 1.0f && ckpt_f16_to_f32(0x0001) == ldexpf(1, -24) && ckpt_f16_to_f32(0x7bff) == 65504.0f,
          "f16 known values");
    CHECK(ckpt_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00 && ckpt_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02,
          "f16 rounds ties to even");
    CHECK(ckpt_f32_to_f16(65520.0f) == 0x7c00 && ckpt_f32_to_f16(ldexpf(1, -25)) == 0 && ckpt_f32_to_f16(ldexpf(1.5f, -25)) == 1,
          "f16 overflow and underflow");
    CHECK(ckpt_f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80 && ckpt_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82, "bf16 ties to even");
}

static void test_json(void) {
    const char *good = " {\"a\": [1, -2.5e3, true, false, null], \"b\\u00e9\\n\": {\"c\": \"x\\\"y\"}, \"d\": 0} ";
    Json j;
    char err[256], s[64];
    int rc = json_parse(&j, good, strlen(good), err, sizeof err);
    CHECK(rc == 0, "valid JSON rejected: %s", err);
    if (rc == 0) {
        int a = json_get(&j, 0, "a");
        CHECK(a >= 0 && j.nodes[a].type == JSON_ARRAY && j.nodes[a].n_children == 5, "array of 5");
        int second = j.nodes[j.nodes[a].first].next;
        CHECK(j.nodes[second].number == -2500.0, "number -2.5e3");
        int b = json_get(&j, 0, "b\xc3\xa9\n");
        CHECK(b >= 0 && json_string(&j, json_get(&j, b, "c"), s, sizeof s) == 0 && !strcmp(s, "x\"y"), "escaped key and value");
        int64_t v;
        CHECK(json_int64(&j, json_get(&j, 0, "d"), 0, 10, &v) == 0 && v == 0, "integer 0");
        CHECK(json_int64(&j, second, -1e9, 1e9, &v) == 0 && v == -2500, "integer -2500");
        CHECK(json_get(&j, 0, "missing") < 0, "missing key");
        json_free(&j);
    }
    const char *bad[] = {"{\"a\":1,}", "[1,2,]", "{\"a\" 1}", "[01]", "[1.]", "[.5]", "{'a':1}", "[1] x", "\"abc",
                         "[\"\\x\"]", "{\"a\":1} // c", "[tru]", "", "[1e]", "[\"\x01\"]", "{\"a\":[}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = json_parse(&j, bad[i], strlen(bad[i]), err, sizeof err);
        CHECK(rc != 0, "invalid JSON accepted: %s", bad[i]);
        if (rc == 0) json_free(&j);
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    CHECK(json_parse(&j, deep, 200, err, sizeof err) != 0 && strstr(err, "nesting"), "nesting deeper than 64 refused");
}

typedef struct {
    Model m;
    float *mom1, *mom2;     /* device buffers standing for AdamW m and v */
} Fixture;

static void fixture_make(Fixture *f, const Comm *comm, int tie, uint64_t seed) {
    ModelConfig mc = model_cfg(tie);
    model_create(&f->m, &mc, backend_cpu(), comm, NULL, 1, 8, RECOMPUTE_NONE);
    model_init_weights(&f->m, seed, 0.02f);
    const Backend *be = f->m.be;
    f->mom1 = be->alloc(f->m.n_params * sizeof(float), "m");
    f->mom2 = be->alloc(f->m.n_params * sizeof(float), "v");
    float *h = mallocCheck(f->m.n_params * sizeof(float));
    Rng r;
    rng_seed(&r, seed + 1);
    for (size_t i = 0; i < f->m.n_params; i++) h[i] = rng_normal(&r);
    be->upload(f->mom1, h, f->m.n_params * sizeof(float));
    for (size_t i = 0; i < f->m.n_params; i++) h[i] = rng_uniform(&r);
    be->upload(f->mom2, h, f->m.n_params * sizeof(float));
    free(h);
}

static void fixture_free(Fixture *f) {
    f->m.be->free(f->mom1);
    f->m.be->free(f->mom2);
    model_free(&f->m);
}

static CkptState state_at(long long step) {
    return (CkptState){.kind = CKPT_KIND_TRAIN, .step = step, .loader_epoch = 3, .loader_cursor = 1234567890123ll,
                       .rng_state = 0x123456789abcdef0ull, .has_rng = 1, .loss_scale = 65536.0f, .clean_steps = 17,
                       .optimizer = CKPT_OPT_ADAMW, .optimizer_step = step};
}

static Fixture *save_fixture;
static char save_dir[512];
static long long save_step;
static void save_child(void *arg) {
    (void)arg;
    CkptMirror mir[2] = {{"optimizer.adamw.m", save_fixture->mom1}, {"optimizer.adamw.v", save_fixture->mom2}};
    CkptState s = state_at(save_step);
    checkpoint_save(save_dir, 0, &save_fixture->m, mir, 2, &s, CONFIG, NULL, 0);
}

/* every tensor of a checkpoint folder reads back and checks out */
static int checkpoint_ok(const char *dir) {
    char state[1200], err[1600];
    checkpoint_state_path(dir, state, sizeof state);
    CkptReader r;
    if (ckpt_open(&r, state, err, sizeof err) != 0) return 0;
    int ok = 1;
    for (int i = 0; i < r.n; i++) ok &= ckpt_verify(&r, &r.entries[i], err, sizeof err) == 0;
    ckpt_close(&r);
    return ok;
}

static void test_round_trip_and_slices(void) {
    Comm one = grid(1, 0, 1, 0);
    Fixture a;
    fixture_make(&a, &one, 0, 42);
    char run[512], path[1200];
    snprintf(run, sizeof run, "%s/rt", root);
    CkptMirror mir[2] = {{"optimizer.adamw.m", a.mom1}, {"optimizer.adamw.v", a.mom2}};
    CkptState s = state_at(5);
    checkpoint_save(run, 0, &a.m, mir, 2, &s, CONFIG, path, sizeof path);
    CHECK(checkpoint_find_latest(run, path, sizeof path) == 5 && strstr(path, "ckpt_00000005"), "latest is step 5: %s", path);
    CHECK(checkpoint_inspect(path, fopen("/dev/null", "w")) == 0, "inspect passes on a good checkpoint");

    /* whole: bit-exact weights, moments and state */
    Fixture b;
    fixture_make(&b, &one, 0, 99);
    CkptMirror mb[2] = {{"optimizer.adamw.m", b.mom1}, {"optimizer.adamw.v", b.mom2}};
    CkptState got;
    checkpoint_load(path, &b.m, mb, 2, &got, CONFIG);
    float *pa = host_params(&a.m), *pb = host_params(&b.m);
    CHECK(!memcmp(pa, pb, a.m.n_params * 4), "weights round-trip bit-exactly");
    size_t bytes = a.m.n_params * 4;
    float *x = mallocCheck(bytes), *y = mallocCheck(bytes);
    a.m.be->download(x, a.mom1, bytes); b.m.be->download(y, b.mom1, bytes);
    CHECK(!memcmp(x, y, bytes), "AdamW m round-trips bit-exactly");
    a.m.be->download(x, a.mom2, bytes); b.m.be->download(y, b.mom2, bytes);
    CHECK(!memcmp(x, y, bytes), "AdamW v round-trips bit-exactly");
    CHECK(got.step == 5 && got.loader_epoch == 3 && got.loader_cursor == 1234567890123ll && got.rng_state == 0x123456789abcdef0ull &&
          got.has_rng == 1 && got.loss_scale == 65536.0f && got.clean_steps == 17 && got.optimizer == CKPT_OPT_ADAMW &&
          got.optimizer_step == 5, "run state round-trips");
    fixture_free(&b);

    /* slices: every tensor-parallel and pipeline rank reads exactly its part of the global tensors */
    int layouts[][2] = {{2, 1}, {1, 2}, {2, 2}};
    for (int L = 0; L < 3; L++) {
        int tp = layouts[L][0], pp = layouts[L][1], bad = 0, tensors = 0;
        for (int pr = 0; pr < pp; pr++)
            for (int tr = 0; tr < tp; tr++) {
                Comm c = grid(tp, tr, pp, pr);
                Fixture s2;
                fixture_make(&s2, &c, 0, 7);
                CkptMirror ms[2] = {{"optimizer.adamw.m", s2.mom1}, {"optimizer.adamw.v", s2.mom2}};
                checkpoint_load(path, &s2.m, ms, 2, &got, CONFIG);
                float *ps = host_params(&s2.m), *vs = mallocCheck(s2.m.n_params * 4), *va = mallocCheck(a.m.n_params * 4);
                s2.m.be->download(vs, s2.mom2, s2.m.n_params * 4);
                a.m.be->download(va, a.mom2, a.m.n_params * 4);
                for (int i = 0; i < s2.m.n_tensors; i++) {
                    const ParamTensor *t = &s2.m.tensors[i];
                    const ParamTensor *g = model_find_tensor(&a.m, t->name);
                    tensors++;
                    for (int r = 0; r < t->rows; r++)
                        for (int q = 0; q < t->cols; q++) {
                            size_t li = t->offset + (size_t)r * t->cols + q;
                            size_t gi = g->offset + (size_t)(r + t->row0) * g->cols + (q + t->col0);
                            bad += ps[li] != pa[gi] || vs[li] != va[gi];
                        }
                }
                free(ps); free(vs); free(va);
                fixture_free(&s2);
            }
        CHECK(bad == 0 && tensors > 0, "tp=%d pp=%d: %d elements differ from their slice of the global tensors", tp, pp, bad);
    }
    free(pa); free(pb); free(x); free(y);
    fixture_free(&a);
}

static void test_retention_and_markers(void) {
    Comm one = grid(1, 0, 1, 0);
    Fixture a;
    fixture_make(&a, &one, 1, 3);
    char run[512], p[1300];
    snprintf(run, sizeof run, "%s/keep", root);
    CkptState s;
    for (int step = 1; step <= 5; step++) {
        if (step == 4) {    /* debris a crash would leave, and a folder someone half-copied */
            snprintf(p, sizeof p, "%s/ckpt_00000009.tmp", run); mkdir(p, 0755);
            snprintf(p, sizeof p, "%s/ckpt_00000099", run); mkdir(p, 0755);
        }
        s = state_at(step);
        checkpoint_save(run, 2, &a.m, NULL, 0, &s, CONFIG, NULL, 0);
    }
    int present[6];
    for (int step = 1; step <= 5; step++) { snprintf(p, sizeof p, "%s/ckpt_%08d", run, step); present[step] = exists(p); }
    CHECK(!present[1] && !present[2] && !present[3] && present[4] && present[5], "keep_checkpoints=2 keeps steps 4 and 5 only");
    snprintf(p, sizeof p, "%s/ckpt_00000009.tmp", run);
    CHECK(!exists(p), "a crashed save's .tmp folder is cleaned up");
    char latest[1200];
    CHECK(checkpoint_find_latest(run, latest, sizeof latest) == 5, "a folder without DONE is never picked");
    /* the same step again replaces it whole (resume at the end, then the final save) */
    s = state_at(5);
    checkpoint_save(run, 2, &a.m, NULL, 0, &s, CONFIG, NULL, 0);
    CHECK(checkpoint_ok(latest), "re-saving a step replaces it with a good checkpoint");
    fixture_free(&a);
}

static void test_crash_and_full_disk(void) {
    Comm one = grid(1, 0, 1, 0);
    Fixture a;
    fixture_make(&a, &one, 0, 11);
    save_fixture = &a;
    snprintf(save_dir, sizeof save_dir, "%s/crash", root);
    save_step = 5;
    save_child(NULL);
    char good[1200], p[1300], errfile[600];
    snprintf(good, sizeof good, "%s/ckpt_00000005", save_dir);
    snprintf(errfile, sizeof errfile, "%s/child.err", root);
    const char *wheres[] = {"0", "1000", "2500", "60000", "done", "rename"};
    for (int i = 0; i < 6; i++) {
        char hook[64];
        snprintf(hook, sizeof hook, "kill:8:%s", wheres[i]);
        setenv("LLM3D_CKPT_HOOK", hook, 1);
        save_step = 8;
        int st = in_child(save_child, NULL, errfile);
        unsetenv("LLM3D_CKPT_HOOK");
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "hook %s: child was SIGKILLed", hook);
        char latest[1200];
        CHECK(checkpoint_find_latest(save_dir, latest, sizeof latest) == 5, "hook %s: resume would take step 5", hook);
        CHECK(checkpoint_ok(good), "hook %s: the step-5 checkpoint is intact", hook);
    }
    /* killed after the rename: the new checkpoint is complete and is the one resume takes */
    setenv("LLM3D_CKPT_HOOK", "kill:8:retention", 1);
    int st = in_child(save_child, NULL, errfile);
    unsetenv("LLM3D_CKPT_HOOK");
    char latest[1200];
    CHECK(WIFSIGNALED(st) && checkpoint_find_latest(save_dir, latest, sizeof latest) == 8 && checkpoint_ok(latest),
          "killed after the rename: step 8 is complete and newest");

    /* a full disk in the middle of state.bin */
    save_step = 9;
    setenv("LLM3D_CKPT_HOOK", "enospc:9:3000", 1);
    st = in_child(save_child, NULL, errfile);
    unsetenv("LLM3D_CKPT_HOOK");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "full disk: exit status 1");
    CHECK(file_contains(errfile, "No space left on device") && file_contains(errfile, "ckpt_00000009.tmp/state.bin"),
          "full disk: the message names the file and the problem");
    snprintf(p, sizeof p, "%s/ckpt_00000009.tmp/state.bin.tmp*", save_dir);   /* the door's temporaries: state.bin.tmp.XXXXXX */
    glob_t partial;
    int left = glob(p, 0, NULL, &partial) == 0 ? (int)partial.gl_pathc : 0;
    globfree(&partial);
    CHECK(left == 0, "full disk: the partial file is removed (%d left)", left);
    CHECK(checkpoint_find_latest(save_dir, latest, sizeof latest) == 8 && checkpoint_ok(latest) && checkpoint_ok(good),
          "full disk: earlier checkpoints untouched");
    fixture_free(&a);
}

static void test_damaged_files(void) {
    Comm one = grid(1, 0, 1, 0);
    Fixture a;
    fixture_make(&a, &one, 0, 5);
    char run[512], good[1300], bad[1300], err[1600];
    snprintf(run, sizeof run, "%s/damage", root);
    CkptState s = state_at(1);
    CkptMirror mir[1] = {{"optimizer.adamw.m", a.mom1}};
    checkpoint_save(run, 0, &a.m, mir, 1, &s, CONFIG, NULL, 0);
    snprintf(good, sizeof good, "%s/ckpt_00000001/state.bin", run);
    snprintf(bad, sizeof bad, "%s/bad.bin", root);
    struct stat stt;
    stat(good, &stt);
    long size = (long)stt.st_size;
    CkptReader r;
    CHECK(ckpt_open(&r, good, err, sizeof err) == 0, "good file opens: %s", err);
    /* the bytes some check covers: header, config, table, tensor data (not the zero padding) */
    char *covered = calloc(size, 1);
    for (long i = 0; i < 1024 + (long)strlen(CONFIG); i++) covered[i] = 1;
    for (int i = 0; i < r.n; i++) memset(covered + r.entries[i].offset, 1, r.entries[i].bytes);
    memset(covered + size - (long)r.n * 192, 1, (size_t)r.n * 192);
    ckpt_close(&r);

    Rng rng;
    rng_seed(&rng, 2024);
    int caught = 0, trials = 40;
    for (int t = 0; t < trials; t++) {    /* truncation at random offsets */
        copy_file(good, bad);
        long cut = (long)(rng_u64(&rng) % (uint64_t)size);
        if (truncate(bad, cut) != 0) die("truncate failed");
        if (ckpt_open(&r, bad, err, sizeof err) != 0) { caught += strstr(err, "bad.bin") != NULL; continue; }
        ckpt_close(&r);
    }
    CHECK(caught == trials, "truncated files refused with the file named: %d of %d", caught, trials);
    caught = 0;
    for (int t = 0; t < trials; t++) {    /* one flipped byte somewhere covered */
        copy_file(good, bad);
        long at;
        do at = (long)(rng_u64(&rng) % (uint64_t)size); while (!covered[at]);
        FILE *f = fopen(bad, "r+b");
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ (1 << (t % 8)), f);
        fclose(f);
        if (ckpt_open(&r, bad, err, sizeof err) != 0) { caught++; continue; }
        int found = 0;
        for (int i = 0; i < r.n && !found; i++) found = ckpt_verify(&r, &r.entries[i], err, sizeof err) != 0 && strstr(err, "checksum");
        caught += found;
        ckpt_close(&r);
    }
    CHECK(caught == trials, "flipped bytes detected: %d of %d", caught, trials);
    /* a flipped data byte: loading the model names the tensor */
    copy_file(good, bad);
    FILE *f = fopen(bad, "r+b");
    CHECK(ckpt_open(&r, good, err, sizeof err) == 0, "reopen");
    const CkptEntry *e = ckpt_find(&r, "model.layers.1.mlp.up_proj.weight");
    fseek(f, e->offset + 10, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    const ParamTensor *t = model_find_tensor(&a.m, e->name);
    float *dst = mallocCheck((size_t)t->rows * t->cols * 4);
    CkptReader rb;
    ckpt_open(&rb, bad, err, sizeof err);
    CHECK(checkpoint_read_slice(&rb, e->name, t, dst, err, sizeof err) != 0 && strstr(err, "up_proj") && strstr(err, "checksum mismatch"),
          "damaged tensor named: %s", err);
    ckpt_close(&rb);
    ckpt_close(&r);
    free(dst);
    /* wrong magic, wrong version */
    int32_t h[256];
    f = fopenCheck(good, "rb"); freadCheck(h, 4, 256, f, good); fcloseCheck(f, good);
    copy_file(good, bad);
    f = fopenCheck(bad, "r+b"); h[0] = 0x12345678; fwriteCheck(h, 4, 256, f, bad); fcloseCheck(f, bad);
    CHECK(ckpt_open(&r, bad, err, sizeof err) != 0 && strstr(err, "not an llm3d checkpoint") && strstr(err, "bad.bin"), "wrong magic: %s", err);
    copy_file(good, bad);
    f = fopenCheck(good, "rb"); freadCheck(h, 4, 256, f, good); fcloseCheck(f, good);
    f = fopenCheck(bad, "r+b"); h[1] = 99; fwriteCheck(h, 4, 256, f, bad); fcloseCheck(f, bad);
    CHECK(ckpt_open(&r, bad, err, sizeof err) != 0 && strstr(err, "version 99"), "wrong version: %s", err);
    /* a missing tensor and a misshaped one */
    CHECK(ckpt_open(&r, good, err, sizeof err) == 0, "reopen");
    ParamTensor wrong = *model_find_tensor(&a.m, "model.norm.weight");
    float tmp[64];
    CHECK(checkpoint_read_slice(&r, "optimizer.adamw.v/model.norm.weight", &wrong, tmp, err, sizeof err) != 0 &&
          strstr(err, "has no tensor 'optimizer.adamw.v/model.norm.weight'"), "missing tensor: %s", err);
    wrong.global_cols = wrong.cols = 16;
    CHECK(checkpoint_read_slice(&r, "model.norm.weight", &wrong, tmp, err, sizeof err) != 0 && strstr(err, "model.norm.weight") &&
          strstr(err, "needs 1 x 16"), "misshaped tensor: %s", err);
    ckpt_close(&r);
    /* config contradictions name the key; free keys may change */
    char changed[1024];
    snprintf(changed, sizeof changed, "%s", CONFIG);
    char *d = strstr(changed, "dim=32");
    d[4] = '6'; d[5] = '4';
    CHECK(checkpoint_check_config(CONFIG, changed, checkpoint_fixed_keys, 64, "x", err, sizeof err) != 0 && strstr(err, "dim=32") &&
          strstr(err, "dim=64"), "dim contradiction named: %s", err);
    snprintf(changed, sizeof changed, "%s", CONFIG);
    strstr(changed, "lr=0.001")[6] = '5';
    CHECK(checkpoint_check_config(CONFIG, changed, checkpoint_fixed_keys, 64, "x", err, sizeof err) == 0, "lr may change on resume");
    free(covered);
    fixture_free(&a);
}

/* ------------------------------------------------------------ Hugging Face */

static void write_safetensors(const char *dir, const char *json, size_t data_bytes) {
    char p[1200];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopenCheck(p, "wb");
    uint64_t n = (strlen(json) + 7) / 8 * 8;   /* padded with spaces to 8 bytes, as safetensors writes it */
    fwriteCheck(&n, 8, 1, f, p);
    fprintf(f, "%-*s", (int)n, json);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fcloseCheck(f, p);
}

static void test_hf(void) {
    Comm one = grid(1, 0, 1, 0);
    char err[2048];
    for (int tie = 0; tie <= 1; tie++) {
        Fixture a;
        fixture_make(&a, &one, tie, 100 + tie);
        char run[512], hf[512], path[1200];
        snprintf(run, sizeof run, "%s/hfrun%d", root, tie);
        snprintf(hf, sizeof hf, "%s/hf%d", root, tie);
        CkptState s = state_at(3);
        const char *cfg = tie ? "vocab_size=40\ndim=32\nn_layers=2\nn_heads=4\nn_kv_heads=2\nffn_dim=48\nseq_len=8\ntie_embeddings=1\n"
                                "rope_theta=10000\nnorm_eps=9.99999975e-06\nseed=7\n"
                              : CONFIG;
        checkpoint_save(run, 0, &a.m, NULL, 0, &s, cfg, path, sizeof path);
        float *pa = host_params(&a.m);
        const char *dts[] = {"f32", "bf16", "f16"};
        for (int dt = CKPT_F32; dt <= CKPT_F16; dt++) {
            fflush(stdout);
            int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            hf_export(path, hf, dt);
            fflush(stdout);
            dup2(saved, 1);
            close(saved); close(devnull);
            ModelConfig mc, want = model_cfg(tie);
            CHECK(hf_read_config(hf, &mc, err, sizeof err) == 0 && !memcmp(&mc, &want, sizeof mc), "tie=%d %s: config.json reads back: %s",
                  tie, dts[dt], err);
            CHECK(hf_check_config(hf, &want, err, sizeof err) == 0, "config check passes");
            Fixture b;
            fixture_make(&b, &one, tie, 555);
            int rc = hf_load_weights(hf, &b.m, err, sizeof err);
            CHECK(rc == 0, "tie=%d %s: import: %s", tie, dts[dt], err);
            float *pb = host_params(&b.m);
            size_t bad = 0;
            for (size_t i = 0; i < a.m.n_params; i++) {
                float want_x = dt == CKPT_F32 ? pa[i] : dt == CKPT_BF16 ? ckpt_bf16_to_f32(ckpt_f32_to_bf16(pa[i])) : ckpt_f16_to_f32(ckpt_f32_to_f16(pa[i]));
                bad += memcmp(&want_x, &pb[i], 4) != 0;
            }
            CHECK(bad == 0, "tie=%d %s: export -> import is exact (to the dtype): %zu differ", tie, dts[dt], bad);
            char st[1200];
            snprintf(st, sizeof st, "%s/model.safetensors", hf);
            FILE *null = fopenCheck("/dev/null", "w");
            CHECK(hf_inspect(st, null) == 0, "inspect reads the export");
            fclose(null);
            if (dt == CKPT_F32) {   /* the folder must have lm_head.weight exactly when untied */
                Json j;
                FILE *f = fopenCheck(st, "rb");
                uint64_t n;
                freadCheck(&n, 8, 1, f, st);
                char *hdr = mallocCheck(n + 1);
                freadCheck(hdr, 1, n, f, st);
                fcloseCheck(f, st);
                json_parse(&j, hdr, n, err, sizeof err);
                CHECK((json_get(&j, 0, "lm_head.weight") >= 0) == !tie, "tie=%d: lm_head.weight present iff untied", tie);
                json_free(&j);
                free(hdr);
            }
            free(pb);
            fixture_free(&b);
        }
        free(pa);
        fixture_free(&a);
    }

    /* config.json against the run: names the key */
    char hf[512];
    snprintf(hf, sizeof hf, "%s/hf0", root);
    ModelConfig other = model_cfg(0);
    other.ffn_dim = 96;
    CHECK(hf_check_config(hf, &other, err, sizeof err) != 0 && strstr(err, "intermediate_size=48") && strstr(err, "ffn_dim=96"),
          "config.json contradiction named: %s", err);

    /* malformed safetensors: each refused with the file and the tensor named */
    Fixture b;
    fixture_make(&b, &one, 1, 9);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/badst", root);
    /* missing: only the embedding is there */
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[40,32],\"data_offsets\":[0,5120]}}", 5120);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "has no tensor 'model.layers.0.input_layernorm.weight'") &&
          strstr(err, "badst/model.safetensors"), "missing tensor: %s", err);
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[32,40],\"data_offsets\":[0,5120]}}", 5120);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "shape [32, 40] but the model needs [40, 32]"), "misshaped: %s", err);
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F64\",\"shape\":[40,32],\"data_offsets\":[0,10240]}}", 10240);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "is F64"), "wrong dtype: %s", err);
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[40,32],\"data_offsets\":[0,5120]}}", 5000);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "the file is truncated"), "truncated data: %s", err);
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[40,32],\"data_offsets\":[0,5000]}}", 5120);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "spans 5000 bytes"), "offsets disagree with shape: %s", err);
    write_safetensors(dir, "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[40,32],}}", 0);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "not valid JSON"), "bad JSON header: %s", err);
    write_safetensors(dir, "{}", 0);
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (truncate(p, 5) != 0) die("truncate");
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "too short"), "5-byte file: %s", err);
    write_safetensors(dir, "{}", 0);
    FILE *f = fopenCheck(p, "r+b");
    uint64_t huge = 1ull << 40;
    fwriteCheck(&huge, 8, 1, f, p);
    fcloseCheck(f, p);
    CHECK(hf_load_weights(dir, &b.m, err, sizeof err) != 0 && strstr(err, "header length"), "absurd header length: %s", err);
    /* config.json problems */
    snprintf(p, sizeof p, "%s/config.json", dir);
    f = fopenCheck(p, "w");
    fprintf(f, "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_attention_heads\": 4, \"num_hidden_layers\": 2}");
    fclose(f);
    ModelConfig mc;
    CHECK(hf_read_config(dir, &mc, err, sizeof err) != 0 && strstr(err, "\"vocab_size\" is missing") && strstr(err, "config.json"),
          "config.json without vocab_size: %s", err);
    f = fopenCheck(p, "w");
    fprintf(f, "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
               "\"vocab_size\": 40, \"hidden_act\": \"gelu\"}");
    fclose(f);
    CHECK(hf_read_config(dir, &mc, err, sizeof err) != 0 && strstr(err, "hidden_act"), "gelu refused: %s", err);
    fixture_free(&b);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/llm3d_test_checkpoint_XXXXXX");
    if (!mkdtemp(root)) die("mkdtemp failed");
    test_crc_and_dtypes();
    test_json();
    test_round_trip_and_slices();
    test_retention_and_markers();
    test_crash_and_full_disk();
    test_damaged_files();
    test_hf();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (!test_failed_count && system(cmd) != 0) printf("note: could not remove %s\n", root);
    return test_summary();
}
