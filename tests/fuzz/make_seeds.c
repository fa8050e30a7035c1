/* tests/fuzz/make_seeds.c — writes a seed corpus for every harness from valid
 * files that llm3d's own writers make: `make_seeds DIR` fills DIR/<harness>/.
 *
 * The idea: a fuzzer starting from real files spends its time on the readers'
 * interesting paths instead of rediscovering magic numbers. Nothing here is
 * committed; tests/fuzz/run.sh makes the seeds before each run. Seeds are kept
 * small (a 4-wide, 1-layer model; a 260-token vocabulary) so executions stay fast. */
#include "../../checkpoint/checkpoint.h"
#include "../../checkpoint/hf.h"
#include "../../common/util.h"
#include "../../data/shard.h"
#include "../../data/tokenizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char root[512];

static uint8_t *slurp(const char *path, size_t *n) {
    char err[1024];
    uint8_t *b = (uint8_t *)read_regular(path, "seed source", (size_t)1 << 26, n, err, sizeof err);
    if (!b) die("%s", err);
    return b;
}

/* Writes DIR/<harness>/<name>: prefix (np bytes), then a (na), then b (nb). */
static void seed(const char *harness, const char *name, const void *prefix, size_t np, const void *a, size_t na, const void *b, size_t nb) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", root, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", root, harness, name);
    FILE *f = fopenCheck(path, "wb");
    if (np) fwriteCheck(prefix, 1, np, f, path);
    if (na) fwriteCheck(a, 1, na, f, path);
    if (nb) fwriteCheck(b, 1, nb, f, path);
    fcloseCheck(f, path);
}

/* Two files as one input: 2-byte length of the first (tests/fuzz/fuzz.h: fuzz_split). */
static void seed_pair(const char *harness, const char *name, const void *a, size_t na, const void *b, size_t nb) {
    uint8_t len[2] = {(uint8_t)(na & 0xff), (uint8_t)(na >> 8)};
    if (na > 0xffff) die("seed %s/%s: first part of %zu bytes is too long", harness, name, na);
    seed(harness, name, len, 2, a, na, b, nb);
}

static void shards(void) {
    uint32_t tok[100];
    char path[1200];
    snprintf(path, sizeof path, "%s/tmp_shard.bin", root);
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)(i * 13 % 50);
    uint8_t control[8] = {1, 7, 0, 0, 13, 1, 0, 0};
    size_t n;
    shard_write(path, tok, 100, 50);
    uint8_t *b = slurp(path, &n);
    seed("shard", "v2_width2", control, 8, b, n, NULL, 0);
    b[4] = 1;   /* version 1: no checksums */
    seed("shard", "v1_width2", control, 8, b, n, NULL, 0);
    free(b);
    tok[5] = 70000;
    shard_write(path, tok, 30, 0);
    b = slurp(path, &n);
    uint8_t control2[8] = {0, 3, 1, 1, 0, 0, 2, 1};
    seed("shard", "v2_width4", control2, 8, b, n, NULL, 0);
    free(b);
    remove(path);
}

static const char *CONFIG = "vocab_size=8\ndim=4\nn_layers=1\nn_heads=2\nn_kv_heads=1\nffn_dim=4\nseq_len=4\ntie_embeddings=0\n"
                            "rope_theta=10000\nnorm_eps=9.99999975e-06\nseed=7\ninit_std=0.0199999996\nlr=0.001\n";

static void checkpoints_and_hf(void) {
    ModelConfig mc = {.vocab_size = 8, .dim = 4, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .ffn_dim = 4, .seq_len = 4,
                      .tie_embeddings = 0, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    Comm comm;
    comm_init_one(&comm);
    Model m;
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 4, RECOMPUTE_NONE);
    model_init_weights(&m, 7, 0.02f);
    float *mom = m.be->alloc(m.n_params * sizeof(float), "seed moments");
    for (size_t i = 0; i < m.n_params; i++) mom[i] = (float)i * 1e-3f;
    CkptMirror mirrors[1] = {{"optimizer.adamw.m", mom}};
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = 5, .loader_epoch = 1, .loader_cursor = 3, .rng_state = 99, .has_rng = 1,
                   .loss_scale = 1, .clean_steps = 2, .optimizer = CKPT_OPT_ADAMW, .optimizer_step = 5};
    char run[1200], ckpt[1300], path[1400], hf[1300];
    snprintf(run, sizeof run, "%s/tmp_run", root);
    checkpoint_save(run, 0, &m, mirrors, 1, &s, CONFIG, ckpt, sizeof ckpt);
    snprintf(path, sizeof path, "%s/state.bin", ckpt);
    size_t n;
    uint8_t *b = slurp(path, &n), fix = 1, keep = 0;
    seed("checkpoint", "tiny_model", &fix, 1, b, n, NULL, 0);
    seed("checkpoint", "tiny_model_crcs_as_is", &keep, 1, b, n, NULL, 0);
    free(b);
    /* a NaN in a weight, every CRC right (issue 50): mutations around it reach the non-finite check */
    float kept = m.params[3];
    m.params[3] = NAN;
    char run_nan[1300], ckpt_nan[1400];
    snprintf(run_nan, sizeof run_nan, "%s/tmp_run_nan", root);
    checkpoint_save(run_nan, 0, &m, mirrors, 1, &s, CONFIG, ckpt_nan, sizeof ckpt_nan);
    m.params[3] = kept;
    snprintf(path, sizeof path, "%s/state.bin", ckpt_nan);
    b = slurp(path, &n);
    seed("checkpoint", "nan_weight", &fix, 1, b, n, NULL, 0);
    free(b);
    /* the largest run state a run can reach (issue 30): mutations around it find what overflows past the CRC */
    CkptState edge = {.kind = CKPT_KIND_TRAIN, .step = INT32_MAX, .loader_epoch = CKPT_MAX_POSITION, .loader_cursor = CKPT_MAX_POSITION,
                      .rng_state = 99, .has_rng = 1, .loss_scale = 3.0e38f, .clean_steps = CKPT_MAX_CLEAN_STEPS - 1,
                      .optimizer = CKPT_OPT_ADAMW, .optimizer_step = INT32_MAX};
    char run_edge[1300], ckpt_edge[1400];
    snprintf(run_edge, sizeof run_edge, "%s/tmp_run_edge", root);
    checkpoint_save(run_edge, 0, &m, mirrors, 1, &edge, CONFIG, ckpt_edge, sizeof ckpt_edge);
    snprintf(path, sizeof path, "%s/state.bin", ckpt_edge);
    b = slurp(path, &n);
    seed("checkpoint", "state_edges", &fix, 1, b, n, NULL, 0);
    free(b);
    /* a few dtypes and shapes the model never writes */
    snprintf(path, sizeof path, "%s/odd.bin", run);
    CkptWriter w;
    ckpt_writer_open(&w, path, &s, "dim=4\n", (CkptWriteHooks){-1, -1});
    uint16_t h[6] = {0x3c00, 0xc000, 0x7bff, 1, 0x7c00, 0};
    int32_t ints[3] = {1, -2, 3};
    int64_t shape3[3] = {1, 2, 3}, shape1[1] = {3};
    ckpt_writer_add(&w, "half", CKPT_F16, 3, shape3, h);
    ckpt_writer_add(&w, "brain", CKPT_BF16, 3, shape3, h);
    ckpt_writer_add(&w, "ints", CKPT_I32, 1, shape1, ints);
    ckpt_writer_finish(&w);
    b = slurp(path, &n);
    seed("checkpoint", "dtypes", &fix, 1, b, n, NULL, 0);
    free(b);
    const char *dt[2] = {"f32", "bf16"};
    for (int k = 0; k < 2; k++) {
        snprintf(hf, sizeof hf, "%s/tmp_hf_%s", root, dt[k]);
        hf_export(ckpt, hf, k ? CKPT_BF16 : CKPT_F32);
        size_t nc, ns;
        snprintf(path, sizeof path, "%s/config.json", hf);
        uint8_t *c = slurp(path, &nc);
        snprintf(path, sizeof path, "%s/model.safetensors", hf);
        uint8_t *st = slurp(path, &ns);
        seed_pair("safetensors", dt[k], c, nc, st, ns);
        free(c), free(st);
    }
    m.be->free(mom);
    model_free(&m);
    comm_free(&comm);
}

static void tokenizers(void) {
    const char *text = "the cat sat on the mat; the rat ran. It's 42 degrees, isn't it? \xc3\xa9t\xc3\xa9 \xe2\x82\xac 3.14 the the then";
    Tokenizer *t = tokenizer_train((const uint8_t *)text, strlen(text), 270);
    char path[1200];
    snprintf(path, sizeof path, "%s/tmp_tokenizer.bin", root);
    tokenizer_save(t, path);
    tokenizer_free(t);
    size_t n;
    uint8_t *b = slurp(path, &n);
    seed("tokenizer", "v2", NULL, 0, b, n, NULL, 0);
    b[4] = 1;   /* version 1: no checksums */
    seed("tokenizer", "v1", NULL, 0, b, n, NULL, 0);
    free(b);
    remove(path);
}

/* GPT-2's byte characters (data/tokenizer_files.c): printable bytes stand for themselves, the rest are U+0100.. */
static int gpt2_char(int byte, char *out) {
    int n = 0, printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae;
    for (int b = 0; b < byte; b++) n += !((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae);
    int cp = printable ? byte : 256 + n;
    if (cp == '"' || cp == '\\') return sprintf(out, "\\%c", cp);
    if (cp < 0x80) return sprintf(out, "%c", cp);
    return sprintf(out, "%c%c", 0xc0 | cp >> 6, 0x80 | (cp & 0x3f));
}

static void gpt2(void) {
    static char json[16384];
    size_t o = (size_t)sprintf(json, "{");
    for (int b = 0; b < 256; b++) {
        char c[8];
        gpt2_char(b, c);
        o += (size_t)sprintf(json + o, "\"%s\": %d, ", c, b);
    }
    o += (size_t)sprintf(json + o, "\"th\": 256, \"the\": 257, \"\\u0120the\": 258, \"<|endoftext|>\": 259}");
    const char *bpe = "#version: 0.2\nt h\nth e\n\xc4\xa0 the\n";
    seed_pair("gpt2", "tiny", json, o, bpe, strlen(bpe));
}

static void text_seeds(void) {
    const char *ini[] = {
        "# run settings\n[model]\npreset = l15m\ndim = 48   # narrower\nn_heads=4\nn_kv_heads = 2\n[training]\nlr = 0.002\n",
        "preset=tiny\nnorm_eps = 1e-6\nrope_theta = 500000\noptimizer = adamw8bit\nlr_schedule = linear\ntie_embeddings = true\n",
        "[data]\ntrain_data = data/corpus/train_*.bin\nval_data =\nbatch_size = 8\nseq_len = 64\ntotal_batch_tokens = 1024\n",
    };
    const char *cli[] = {
        "--dim=64\n--n_heads=4\n--n_kv_heads=2\n--lr=3e-4\n--max_steps=10\n--warmup_steps=2",
        "--preset=l124m\n--norm_eps=1e-6\n--precision=bf16\n--recompute=selective\n--grad-clip=0.5",
        "--batch_size=4\n--seq_len=16\n--total_batch_tokens=128\n--sample_prompt=Hello\n--checkpoint_every=-1",
    };
    char name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "seed%d", i);
        seed("ini", name, NULL, 0, ini[i], strlen(ini[i]), NULL, 0);
        seed("cli", name, NULL, 0, cli[i], strlen(cli[i]), NULL, 0);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) die("usage: make_seeds DIR");
    snprintf(root, sizeof root, "%s", argv[1]);
    mkdir(root, 0755);
    shards();
    checkpoints_and_hf();
    tokenizers();
    gpt2();
    text_seeds();
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/tmp_run '%s'/tmp_run_edge '%s'/tmp_run_nan '%s'/tmp_hf_f32 '%s'/tmp_hf_bf16", root, root, root, root, root);
    if (system(cmd) != 0) fprintf(stderr, "make_seeds: could not remove temporaries in %s\n", root);
    return 0;
}
