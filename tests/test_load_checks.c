/* tests/test_load_checks.c — issue 50, items 3, 4 and 6: what a loader refuses and how
 * numbers and lists are read, one regression test per case.
 *
 * Item 3: a NaN or inf in any tensor a loader reads (a weight, an AdamW moment, a
 * Hugging Face safetensors tensor) is refused by every path that loads one — resume,
 * --init_from, sample, logits, export, inspect — with one line naming the file, the
 * tensor and its first bad element; only `inspect --allow_nonfinite=1` shows it.
 * Item 4: a checkpoint whose config text and tensor table disagree (fewer layers said
 * than stored, a tied head said with the head stored), whose table entries overlap, or
 * whose header has a bad kind; an HF folder whose config.json and safetensors disagree.
 * Item 6: lists with a trailing comma, a blank or '+', numbers that overflow, the
 * launcher's environment read strictly, and a repeated option taking its last value.
 * Each case asserts the exit code, the message naming the file or key, and that the
 * refusal came from the check under test (its own words), not from an earlier error. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../common/options.h"
#include "../common/util.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/llm3d_test_load_XXXXXX", err[4096], out[1 << 16];

#include "scratch.h"

static char train[512], common[2048];

/* The model every case trains or saves: the one test_faults.sh uses, vocabulary 300. */
#define MODEL "--dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16"

#define run(...) test_runf(train, out, sizeof out, __VA_ARGS__)

/* The table entry of name in a state.bin held in memory; NULL if none. */
static CkptEntry *entry_of(uint8_t *b, const char *name) {
    int32_t *h = (int32_t *)b;
    int64_t table = (int64_t)((uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET] | (uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET + 1] << 32);
    CkptEntry *e = (CkptEntry *)(b + table);
    for (int i = 0; i < h[CKPT_H_N_TENSORS]; i++) if (!strcmp(e[i].name, name)) return &e[i];
    return NULL;
}

/* The table and header CRCs of a state.bin in memory, recomputed after an edit (as the fuzz harness does). */
static void reseal(uint8_t *b) {
    int32_t *h = (int32_t *)b;
    int64_t table = (int64_t)((uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET] | (uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET + 1] << 32);
    h[CKPT_H_TABLE_CRC] = (int32_t)ckpt_crc32(0, b + table, (size_t)h[CKPT_H_N_TENSORS] * sizeof(CkptEntry));
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
}

/* Writes value into f32 element index of tensor name in ckpt/state.bin, every CRC recomputed:
 * a file as a diverged run would have saved it. */
static void poke(const char *ckpt, const char *name, int64_t index, float value) {
    char state[1200];
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    size_t n;
    uint8_t *b = read_file(state, &n);
    CkptEntry *e = entry_of(b, name);
    if (!e) die("test: no tensor '%s' in %s", name, state);
    memcpy(b + e->offset + 4 * index, &value, 4);
    e->crc = ckpt_crc32(0, b + e->offset, (size_t)e->bytes);
    reseal(b);
    write_file(state, b, n);
    free(b);
}

static void copy_tree(const char *from, const char *to) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd) != 0) die("test: %s failed", cmd);
}

/* ------------------------------------------------------------------ item 3 */

static void test_nonfinite(const char *good) {
    char bad[600], moment[600], hf[600], args[4096];
    snprintf(bad, sizeof bad, "%s", path_of("nan_run"));
    copy_tree(path_of("good_run"), bad);
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_00000002", bad);
    const char *tensor = "model.layers.1.self_attn.k_proj.weight";   /* 16 x 32 with n_kv_heads=2 */
    poke(ckpt, tensor, 3 * 32 + 5, NAN);
    const char *want = "holds a non-finite value (nan) at element 101 (row 3, col 5 of 16 x 32)";

    /* every subcommand that loads the weights */
    int rc = run("logits --model=%s --ids=1,2,3 --out=%s", ckpt, path_of("nan.logits"));
    CHECK(rc == 1 && strstr(out, want) && strstr(out, tensor) && strstr(out, "state.bin") && access(path_of("nan.logits"), F_OK) != 0,
          "logits refuses a NaN weight, names file, tensor, element (rc %d): %s", rc, out);
    rc = run("sample --model=%s --tokens=2 --tokenizer=%s/data/tokenizer.bin", ckpt, dir);
    CHECK(rc == 1 && strstr(out, want) && strstr(out, tensor), "sample refuses a NaN weight (rc %d): %s", rc, out);
    rc = run("export --checkpoint=%s --out=%s", ckpt, path_of("nan_hf"));
    CHECK(rc == 1 && strstr(out, want) && access(path_of("nan_hf"), F_OK) != 0,
          "export refuses a NaN weight before it makes anything, no folder, no temporary (rc %d): %s", rc, out);
    rc = run("inspect %s", ckpt);
    CHECK(rc == 1 && strstr(out, want) && strstr(out, "--allow_nonfinite=1") && !strstr(out, "tensors\n"),
          "inspect refuses it, pointing at --allow_nonfinite=1 (rc %d): %s", rc, out);
    rc = run("inspect --allow_nonfinite=1 %s", ckpt);
    char row[512];
    snprintf(row, sizeof row, "%s", tensor);
    const char *line = strstr(out, row);
    CHECK(rc == 0 && line && strstr(line, "ok       1\n") && strstr(out, "nonfinite 1 values"),
          "inspect --allow_nonfinite=1 lists the count per tensor (rc %d): %s", rc, out);
    rc = run("inspect --allow_nonfinite=2 %s", ckpt);
    CHECK(rc == 1 && strstr(out, "allow_nonfinite=2") && strstr(out, "out of range"), "--allow_nonfinite takes 0 or 1 (rc %d): %s", rc, out);

    /* resume and init_from: a training run refuses before its first step */
    snprintf(args, sizeof args, "%s --max_steps=3 --checkpoint_every=-1 --run_dir=%s --resume=1", common, bad);
    rc = test_run(train, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, want) && !strstr(out, "step    3"), "resume refuses a NaN weight (rc %d): %s", rc, out);
    snprintf(args, sizeof args, "%s --max_steps=1 --checkpoint_every=-1 --run_dir=%s --init_from=%s", common, path_of("init_run"), ckpt);
    rc = test_run(train, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, want), "init_from refuses a NaN weight (rc %d): %s", rc, out);

    /* +inf in an AdamW moment: resume reads it, the weights-only readers do not */
    snprintf(moment, sizeof moment, "%s", path_of("inf_run"));
    copy_tree(path_of("good_run"), moment);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_00000002", moment);
    poke(ckpt, "optimizer.adamw.v/model.norm.weight", 7, INFINITY);
    snprintf(args, sizeof args, "%s --max_steps=3 --checkpoint_every=-1 --run_dir=%s --resume=1", common, moment);
    rc = test_run(train, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "tensor 'optimizer.adamw.v/model.norm.weight' holds a non-finite value (inf) at element 7 of 32"),
          "resume refuses +inf in a moment, naming it and its element (rc %d): %s", rc, out);
    rc = run("logits --model=%s --ids=1 --out=%s", ckpt, path_of("inf.logits"));
    CHECK(rc == 0, "logits reads only the weights: a bad moment does not stop it (rc %d): %s", rc, out);

    /* a finite weight past fp16's range: an f16 export would write inf, which every reader refuses */
    char big[600];
    snprintf(big, sizeof big, "%s", path_of("big_run"));
    copy_tree(path_of("good_run"), big);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_00000002", big);
    poke(ckpt, "model.norm.weight", 4, 1e6f);
    rc = run("export --checkpoint=%s --out=%s --dtype=f16", ckpt, path_of("big_hf"));
    CHECK(rc == 1 && strstr(out, "'model.norm.weight' holds 1e+06 at element 4, past fp16's largest value") &&
          access(path_of("big_hf"), F_OK) != 0, "export --dtype=f16 refuses a value it would write as inf (rc %d): %s", rc, out);
    rc = run("export --checkpoint=%s --out=%s --dtype=bf16", ckpt, path_of("big_hf"));
    CHECK(rc == 0, "the same as bf16 exports (rc %d): %s", rc, out);

    /* NaN in a Hugging Face safetensors file: export the good checkpoint, then poke the file */
    snprintf(hf, sizeof hf, "%s", path_of("hf_nan"));
    rc = run("export --checkpoint=%s --out=%s", good, hf);
    CHECK(rc == 0, "export of the good checkpoint (rc %d): %s", rc, out);
    char st[700];
    snprintf(st, sizeof st, "%s/model.safetensors", hf);
    size_t n;
    uint8_t *b = read_file(st, &n);
    uint64_t header = 0;
    for (int i = 0; i < 8; i++) header |= (uint64_t)b[i] << (8 * i);
    char *json = strndup((const char *)b + 8, (size_t)header);
    const char *at = strstr(json, "\"model.layers.0.mlp.down_proj.weight\"");
    at = at ? strstr(at, "\"data_offsets\":[") : NULL;
    long long begin = at ? strtoll(at + 16, NULL, 10) : -1;
    CHECK(begin >= 0, "found the tensor in the exported header: %s", json);
    if (begin >= 0) {
        float minus_inf = -INFINITY;
        memcpy(b + 8 + header + begin + 4 * (64 + 2), &minus_inf, 4);   /* row 2, col 2 of 32 x 64 */
        write_file(st, b, n);
    }
    free(json);
    free(b);
    rc = run("logits --model=%s --ids=1,2 --out=%s", hf, path_of("hf.logits"));
    CHECK(rc == 1 && strstr(out, "model.safetensors") && strstr(out, "'model.layers.0.mlp.down_proj.weight' holds a non-finite value (-inf) "
                                                                     "at element 66 (row 1, col 2 of 32 x 64)"),
          "logits refuses -inf in a safetensors tensor, naming file, tensor and element (rc %d): %s", rc, out);
    rc = run("inspect %s", hf);
    CHECK(rc == 1 && strstr(out, "non-finite value (-inf) at element 66") && !strstr(out, "data_offsets"),
          "inspect refuses the HF folder (rc %d): %s", rc, out);
    rc = run("inspect --allow_nonfinite=1 %s", hf);
    line = strstr(out, "model.layers.0.mlp.down_proj.weight");
    CHECK(rc == 0 && line && strstr(line, ")  1\n") && strstr(out, "nonfinite 1 values"), "inspect --allow_nonfinite=1 counts it (rc %d): %s", rc, out);
    snprintf(args, sizeof args, "%s --max_steps=1 --checkpoint_every=-1 --run_dir=%s --init_from=%s", common, path_of("init_hf"), hf);
    rc = test_run(train, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "init_from:") && strstr(out, "non-finite value (-inf)"), "init_from an HF folder refuses it (rc %d): %s", rc, out);

    /* the reader function itself, for every float dtype */
    uint8_t f32[12], b16[6];
    float v[3] = {1, NAN, INFINITY};
    memcpy(f32, v, 12);
    uint16_t h[3] = {0x3f80, 0x7f80, 0xffc0};   /* 1, +inf, NaN in bf16 */
    memcpy(b16, h, 6);
    int64_t first;
    CHECK(ckpt_count_nonfinite(f32, CKPT_F32, 3, &first) == 2 && first == 1, "f32: two non-finite, the first at 1");
    CHECK(ckpt_count_nonfinite(b16, CKPT_BF16, 3, &first) == 2 && first == 1, "bf16: two non-finite, the first at 1");
    uint16_t f16[2] = {0x7bff, 0xfc00};   /* 65504 (finite), -inf */
    CHECK(ckpt_count_nonfinite(f16, CKPT_F16, 2, &first) == 1 && first == 1, "f16: 65504 is finite, -inf is not");
}

/* ------------------------------------------------------------------ item 4 */

static const char *CONFIG = "vocab_size=8\ndim=4\nn_layers=2\nn_heads=2\nn_kv_heads=1\nffn_dim=4\nseq_len=4\ntie_embeddings=0\n"
                            "rope_theta=10000\nnorm_eps=1e-05\nseed=7\n";

static int open_model(const char *ckpt) {
    char state[1200];
    CkptReader r;
    ModelConfig mc;
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    int rc = checkpoint_open_model(&r, state, &mc, err, sizeof err);
    if (rc == 0) ckpt_close(&r);
    return rc;
}

static void edit_state(const char *ckpt, void (*edit)(uint8_t *b)) {
    char state[1200];
    size_t n;
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    uint8_t *b = read_file(state, &n);
    edit(b);
    reseal(b);
    write_file(state, b, n);
    free(b);
}

static void overlap_edit(uint8_t *b) {   /* k_proj's entry pointed at q_proj's bytes */
    CkptEntry *q = entry_of(b, "model.layers.0.self_attn.q_proj.weight"), *k = entry_of(b, "model.layers.0.self_attn.k_proj.weight");
    k->offset = q->offset;
    k->crc = ckpt_crc32(0, b + k->offset, (size_t)k->bytes);
}
static void kind_edit(uint8_t *b) { ((int32_t *)b)[CKPT_H_KIND] = 2; }
static void reserved_edit(uint8_t *b) { ((int32_t *)b)[200] = 5; }

static void test_consistency(void) {
    char ckpt[1300], text[1024];
    scratch_save_checkpoint(path_of("c_good"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    CHECK(open_model(ckpt) == 0, "a consistent checkpoint opens: %s", err);

    /* fewer layers in the config than in the table: the extra layer is named, not dropped */
    snprintf(text, sizeof text, "%s", CONFIG);
    memcpy(strstr(text, "n_layers=2"), "n_layers=1", 10);
    scratch_save_checkpoint(path_of("c_layers"), CONFIG, text, ckpt, sizeof ckpt);
    REFUSED(open_model(ckpt), "which its config (n_layers=1, tie_embeddings=0) has no place for", "config says 1 layer, table holds 2");
    CHECK(strstr(err, "'model.layers.1.") && strstr(err, "state.bin"), "names the extra tensor and the file: %s", err);
    int rc = run("logits --model=%s --ids=1 --out=%s", ckpt, path_of("c.logits"));
    CHECK(rc == 1 && strstr(out, "has no place for") && strstr(out, "model.layers.1."), "logits refuses it (rc %d): %s", rc, out);
    rc = run("inspect %s", ckpt);
    CHECK(rc == 1 && strstr(out, "tensors\n") && strstr(out, "has no place for"), "inspect lists it, then refuses (rc %d): %s", rc, out);

    /* a tied head declared, the head stored */
    snprintf(text, sizeof text, "%s", CONFIG);
    memcpy(strstr(text, "tie_embeddings=0"), "tie_embeddings=1", 16);
    scratch_save_checkpoint(path_of("c_tied"), CONFIG, text, ckpt, sizeof ckpt);
    REFUSED(open_model(ckpt), "'lm_head.weight', which its config (n_layers=2, tie_embeddings=1) has no place for", "tied head, head stored");

    /* overlapping entries, CRCs valid: both named */
    scratch_save_checkpoint(path_of("c_overlap"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    edit_state(ckpt, overlap_edit);
    REFUSED(open_model(ckpt), "overlap", "two entries on the same bytes");
    CHECK(strstr(err, "q_proj") && strstr(err, "k_proj"), "names both tensors: %s", err);
    rc = run("export --checkpoint=%s --out=%s", ckpt, path_of("c_overlap_hf"));
    CHECK(rc == 1 && strstr(out, "overlap") && access(path_of("c_overlap_hf/model.safetensors"), F_OK) != 0,
          "export refuses it and writes nothing (rc %d): %s", rc, out);

    /* the header's kind, and a reserved header int */
    scratch_save_checkpoint(path_of("c_kind"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    edit_state(ckpt, kind_edit);
    REFUSED(open_model(ckpt), "kind is out of range", "kind 2");
    CHECK(strstr(err, "kind 2") != NULL, "says the kind found: %s", err);
    scratch_save_checkpoint(path_of("c_reserved"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    edit_state(ckpt, reserved_edit);
    REFUSED(open_model(ckpt), "header int 200 is 5", "a reserved header int set");
}

/* config.json and the safetensors of an HF folder disagree */
static void test_hf_consistency(const char *good) {
    char hf[600], cj[700];
    snprintf(hf, sizeof hf, "%s", path_of("hf_cfg"));
    int rc = run("export --checkpoint=%s --out=%s", good, hf);
    CHECK(rc == 0, "export (rc %d): %s", rc, out);
    snprintf(cj, sizeof cj, "%s/config.json", hf);
    size_t n;
    char *text = (char *)read_file(cj, &n), *edited = mallocCheck(n + 16);
    /* one layer said, two stored */
    snprintf(edited, n + 16, "%.*s", (int)n, text);
    char *at = strstr(edited, "\"num_hidden_layers\": 2");
    CHECK(at != NULL, "config.json has num_hidden_layers 2: %s", edited);
    if (at) at[21] = '1';
    write_file(cj, edited, strlen(edited));
    rc = run("logits --model=%s --ids=1 --out=%s", hf, path_of("hf_cfg.logits"));
    CHECK(rc == 1 && strstr(out, "model.safetensors") && strstr(out, "'model.layers.1.") && strstr(out, "has no place for") &&
          strstr(out, "config.json and the safetensors disagree"), "one layer in config.json, two stored (rc %d): %s", rc, out);
    /* a tied head said, the head stored */
    snprintf(edited, n + 16, "%.*s", (int)n, text);
    at = strstr(edited, "\"tie_word_embeddings\": false");
    CHECK(at != NULL, "config.json has tie_word_embeddings false");
    if (at) { memcpy(at + 23, "true ", 5); }
    write_file(cj, edited, strlen(edited));
    rc = run("logits --model=%s --ids=1 --out=%s", hf, path_of("hf_cfg.logits"));
    CHECK(rc == 1 && strstr(out, "'lm_head.weight'") && strstr(out, "tie_word_embeddings=true"), "tied head said, head stored (rc %d): %s", rc, out);
    /* a wider intermediate_size: the shapes disagree */
    snprintf(edited, n + 16, "%.*s", (int)n, text);
    at = strstr(edited, "\"intermediate_size\": 64");
    CHECK(at != NULL, "config.json has intermediate_size 64");
    if (at) memcpy(at + 21, "96", 2);
    write_file(cj, edited, strlen(edited));
    rc = run("logits --model=%s --ids=1 --out=%s", hf, path_of("hf_cfg.logits"));
    CHECK(rc == 1 && strstr(out, "but the model needs [") && strstr(out, "96"), "shapes disagree (rc %d): %s", rc, out);
    free(text);
    free(edited);
}

/* ------------------------------------------------------------------ item 6 */

static void test_numbers(const char *good) {
    double v[8];
    int n;
    /* the list reader */
    n = option_list("ids", "1,2,3", 0, 10, 1, v, 8, err, sizeof err);
    CHECK(n == 3 && v[2] == 3, "a plain list reads (%d)", n);
    REFUSED(option_list("ids", "1,2,", 0, 10, 1, v, 8, err, sizeof err) < 0, "ends with a comma", "trailing comma");
    REFUSED(option_list("ids", ",1", 0, 10, 1, v, 8, err, sizeof err) < 0, "empty item", "leading comma");
    REFUSED(option_list("ids", "1,,2", 0, 10, 1, v, 8, err, sizeof err) < 0, "empty item", "doubled comma");
    REFUSED(option_list("ids", "1, 2", 0, 10, 1, v, 8, err, sizeof err) < 0, "item 2 (' 2')", "a blank");
    REFUSED(option_list("ids", "1,2 ", 0, 10, 1, v, 8, err, sizeof err) < 0, "item 2 ('2 ')", "a trailing blank");
    REFUSED(option_list("ids", "+1", 0, 10, 1, v, 8, err, sizeof err) < 0, "has a '+'", "a plus");
    REFUSED(option_list("ids", "1,2,3", 0, 10, 1, v, 2, err, sizeof err) < 0, "more than 2 items", "too many");
    REFUSED(option_list("ids", "", 0, 10, 1, v, 2, err, sizeof err) < 0, "is empty", "empty list");
    /* the number reader */
    REFUSED(option_number("max_steps", "+5", 0, 10, 1, &v[0], err, sizeof err), "max_steps=+5: has a '+'", "'+' on a number");
    REFUSED(option_number("max_steps", "0x10", 0, 100, 1, &v[0], err, sizeof err), "not a whole number", "hex");
    REFUSED(option_number("lr", "1e309", 0, 10, 0, &v[0], err, sizeof err), "lr=1e309", "overflow");

    /* through the subcommands: logits --ids */
    int rc = run("logits --model=%s --ids=1,2, --out=%s", good, path_of("n.logits"));
    CHECK(rc == 1 && strstr(out, "logits: ids=1,2,: ends with a comma"), "logits --ids trailing comma (rc %d): %s", rc, out);
    rc = run("logits --model=%s '--ids=1, 2' --out=%s", good, path_of("n.logits"));
    CHECK(rc == 1 && strstr(out, "item 2 (' 2')"), "logits --ids with a blank (rc %d): %s", rc, out);
    rc = run("logits --model=%s --ids=+1 --out=%s", good, path_of("n.logits"));
    CHECK(rc == 1 && strstr(out, "has a '+'"), "logits --ids=+1 (rc %d): %s", rc, out);
    CHECK(access(path_of("n.logits"), F_OK) != 0, "no logits file written by a refused list");
    /* pp_layers, read at the split */
    rc = run("schedule --pp=2 --n_layers=2 --pp_layers=1,1,");
    CHECK(rc == 1 && strstr(out, "pp_layers=1,1,: ends with a comma"), "pp_layers trailing comma (rc %d): %s", rc, out);
    /* the fault option */
    rc = run("%s --max_steps=1 --checkpoint_every=-1 --run_dir=%s --fault=slow:rank=0:ms=1e99", common, path_of("fault_run"));
    CHECK(rc == 1 && strstr(out, "fault='slow:rank=0:ms=1e99': ms=1e99: is out of range"), "fault ms overflow (rc %d): %s", rc, out);
    rc = run("%s --max_steps=1 --checkpoint_every=-1 --run_dir=%s --fault=slow:rank=x", common, path_of("fault_run"));
    CHECK(rc == 1 && strstr(out, "rank=x: is not a whole number"), "fault rank=x (rc %d): %s", rc, out);
    /* the launcher's environment */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "OMPI_COMM_WORLD_SIZE=2x %s", train);
    rc = test_run(cmd, "--nproc=2 --max_steps=1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "OMPI_COMM_WORLD_SIZE=2x: is not a whole number"), "a launcher's rank count read strictly (rc %d): %s", rc, out);
    /* the doctor's byte count: 1e15G overflowed the cast to size_t */
    rc = run("doctor --max_bytes=1e15G --sweep=0");
    CHECK(rc == 1 && strstr(out, "--max_bytes=1e15G") && strstr(out, "past 2^50 bytes"), "doctor --max_bytes overflow (rc %d): %s", rc, out);

    /* a repeated option: the last wins, as training's keys do */
    rc = run("logits --model=/nonexistent --model=%s --ids=1 --ids=1,2 --out=%s", good, path_of("last.logits"));
    CHECK(rc == 0 && strstr(out, "logits | 2 tokens"), "logits: the last --model and --ids win (rc %d): %s", rc, out);
    rc = run("export --checkpoint=%s --out=%s --dtype=f32 --dtype=bf16", good, path_of("last_hf"));
    CHECK(rc == 0 && strstr(out, "(BF16)"), "export: the last --dtype wins (rc %d): %s", rc, out);
    /* each value is read (a bad one is refused wherever it stands, as training's config keys are); the last is kept */
    rc = run("sample --model=/nonexistent --model=%s --tokenizer=%s/data/tokenizer.bin --tokens=2 --prompt=a --seed=1 --seed=2", good, dir);
    CHECK(rc == 0, "sample: the last --model wins (rc %d): %s", rc, out);
    rc = run("schedule --pp=2 --n_layers=2 --micro_batches=2 --micro_batches=3");
    CHECK(rc == 0 && strstr(out, "x 3 micro-batches"), "schedule: the last --micro_batches wins (rc %d): %s", rc, out);
    rc = run("doctor --timeout=0 --timeout=10 --sweep=0");
    CHECK(rc == 0, "doctor: the last --timeout wins (0 alone is refused) (rc %d): %s", rc, out);
    rc = run("prepare --input=/nonexistent --input=tests/data/sotu_sample.txt --out=%s --train_vocab=300", path_of("data2"));
    CHECK(rc == 0, "prepare: the last --input wins (rc %d): %s", rc, out);
    rc = run("inspect --allow_nonfinite=1 --allow_nonfinite=0 %s", good);
    CHECK(rc == 0 && !strstr(out, "nonfinite"), "inspect: the last --allow_nonfinite wins (rc %d): %s", rc, out);

    /* export writes config.json numbers itself: a raw init_std text is never copied */
    size_t size;
    char *cj = (char *)read_file(path_of("last_hf/config.json"), &size);
    CHECK(strstr(cj, "\"initializer_range\": 0.02,") != NULL, "initializer_range written as a number: %s", cj);
    free(cj);
}

int main(void) {
    if (!mkdtemp(dir)) die("cannot make a temporary folder");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train, sizeof train, "timeout 60 %s/train", build);
    snprintf(common, sizeof common, "--train_data=%s/data/train_*.bin --val_data= " MODEL " --batch_size=2 --total_batch_tokens=64 "
             "--warmup_steps=0 --log_every=1 --sample_tokens=0", dir);
    int rc = run("prepare --input=tests/data/sotu_sample.txt --out=%s/data --train-vocab=300", dir);
    CHECK(rc == 0, "prepare (rc %d): %s", rc, out);
    rc = run("%s --max_steps=2 --checkpoint_every=2 --run_dir=%s", common, path_of("good_run"));
    char good[600];
    snprintf(good, sizeof good, "%s/ckpt_00000002", path_of("good_run"));
    CHECK(rc == 0 && access(good, F_OK) == 0, "a good run to start from (rc %d): %s", rc, out);
    test_nonfinite(good);
    test_consistency();
    test_hf_consistency(good);
    test_numbers(good);
    scratch_remove(dir);
    return test_summary();
}
