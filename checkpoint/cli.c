/* checkpoint/cli.c — `export`, `inspect` and `logits`: argument parsing and dispatch. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "checkpoint.h"
#include "hf.h"
#include "hf_tokenizer.h"
#include "../common/util.h"
#include "../common/options.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The value of --key=VALUE (or --ke-y=VALUE: dashes and underscores are the same) in argv; NULL if absent.
 * A key given twice takes its last value, as training's keys do. */
static const char *arg_value(int argc, char **argv, const char *key) {
    for (int i = argc - 1; i >= 1; i--) {
        char k[64];
        const char *v = option_split(argv[i], k, sizeof k);
        if (v && !strcmp(k, key)) return v;
    }
    return NULL;
}

/* Dies on anything that is not --key=VALUE with a known key, suggesting the nearest. */
static void check_args(int argc, char **argv, const char *const *known, const char *usage) {
    int n_known = 0;
    while (known[n_known]) n_known++;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { printf("%s", usage); exit(0); }
        char k[64];
        const char *v = option_split(argv[i], k, sizeof k);
        if (!v) die("%s: unexpected argument '%s' (options are --key=value)\n%s", argv[0], argv[i], usage);
        int ok = 0;
        for (int j = 0; j < n_known; j++) ok |= !strcmp(k, known[j]);
        if (!ok) die("%s: unknown option '--%s' (did you mean --%s?)\n%s", argv[0], k, option_suggest(k, known, n_known), usage);
    }
}

static int has_file(const char *dir, const char *name) {
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* a checkpoint folder, or a run_dir whose newest checkpoint is meant */
static void resolve_checkpoint(const char *path, char *out, size_t size) {
    if (has_file(path, "state.bin") || !has_file(path, ".")) { snprintf(out, size, "%s", path); return; }
    if (checkpoint_find_latest(path, out, size) < 0)
        die("'%s' is neither a checkpoint folder (no state.bin) nor a run_dir holding a complete checkpoint", path);
}

int checkpoint_export_main(int argc, char **argv) {
    const char *usage = "usage: build/train export --checkpoint=DIR --out=DIR [--dtype=f32|bf16|f16] [--tokenizer=FILE]\n"
                        "  DIR: a checkpoint folder (run_dir/ckpt_NNNNNNNN) or a run_dir (its newest checkpoint)\n"
                        "  writes model.safetensors and config.json for LlamaForCausalLM, and beside them the run's\n"
                        "  vocabulary: tokenizer.bin (llm3d's) and tokenizer.json (Hugging Face's), from --tokenizer or\n"
                        "  else the run's tokenizer key or tokenizer.bin beside its train shards\n";
    const char *known[] = {"checkpoint", "out", "dtype", "tokenizer", NULL};
    check_args(argc, argv, known, usage);
    const char *ck = arg_value(argc, argv, "checkpoint"), *out = arg_value(argc, argv, "out"), *dt = arg_value(argc, argv, "dtype");
    const char *tok = arg_value(argc, argv, "tokenizer");
    if (!ck || !out) die("export needs --checkpoint and --out\n%s", usage);
    int dtype = CKPT_F32;
    if (dt && !strcmp(dt, "bf16")) dtype = CKPT_BF16;
    else if (dt && !strcmp(dt, "f16")) dtype = CKPT_F16;
    else if (dt && strcmp(dt, "f32")) die("export: --dtype=%s is not one of f32, bf16, f16", dt);
    char path[1200], state[1300], found[1200], err[2048];
    int64_t tok_bytes;
    int probe = tok ? open_regular(tok, "vocabulary file", &tok_bytes, err, sizeof err) : -1;   /* before any work: never blocks */
    if (tok && probe < 0) die("export: --tokenizer=%s: %s\n  hint: prepare writes OUTDIR/tokenizer.bin", tok, err);
    if (probe >= 0) close(probe);
    resolve_checkpoint(ck, path, sizeof path);
    hf_export(path, out, dtype);
    /* the vocabulary the run was trained with goes beside the weights */
    checkpoint_state_path(path, state, sizeof state);
    CkptReader r;
    if (ckpt_open(&r, state, err, sizeof err) != 0) die("%s", err);
    ModelConfig mc;   /* hf_export has checked it */
    if (checkpoint_model_config(r.config_text, &mc, err, sizeof err) != 0) die("'%s': %s", state, err);
    int located = tok ? 0 : hf_find_tokenizer(r.config_text, found, sizeof found);
    ckpt_close(&r);
    if (located == 0) hf_export_tokenizer(tok ? tok : found, out, mc.seq_len);
    else
        printf("export | no vocabulary written: %s is not there; pass --tokenizer=FILE (the tokenizer.bin prepare\n"
               "         wrote beside the shards) to put it beside the weights\n", found);
    return 0;
}

int checkpoint_inspect_main(int argc, char **argv) {
    const char *usage = "usage: build/train inspect [--allow_nonfinite=1 | --row_norms=NAME] PATH\n  PATH: a checkpoint folder or state.bin, a run_dir "
                        "(its newest checkpoint),\n        a Hugging Face folder or a .safetensors file\n  --allow_nonfinite=1: show a checkpoint holding "
                        "NaN or inf (every loader refuses it)\n        with the count of such values in each tensor\n  --row_norms=NAME: only the L2 "
                        "norms of tensor NAME's rows in an llm3d checkpoint\n        (largest, mean, smallest; e.g. model.embed_tokens.weight)\n";
    const char *p = NULL, *row_norms = NULL;
    int allow = 0;
    for (int i = 1; i < argc; i++) {
        char k[64];
        const char *v = option_split(argv[i], k, sizeof k);
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { printf("%s", usage); return 0; }
        if (v && !strcmp(k, "allow_nonfinite")) allow = (int)option_number_or_die("inspect", k, v, 0, 1, 1);
        else if (v && !strcmp(k, "row_norms")) row_norms = v;
        else if (!strncmp(argv[i], "--", 2)) die("inspect: unknown option '%s'\n%s", argv[i], usage);
        else if (p) die("inspect: give one PATH, not '%s' and '%s'\n%s", p, argv[i], usage);
        else p = argv[i];
    }
    if (!p) { fprintf(stderr, "%s", usage); return 1; }
    if (row_norms && !*row_norms) die("inspect: --row_norms is empty; give a tensor's name, e.g. --row_norms=model.embed_tokens.weight");
    if (row_norms && allow) die("inspect: --row_norms and --allow_nonfinite=1 do not go together (a row holding NaN or inf has no norm)");
    size_t n = strlen(p);
    int hf = (n > 12 && !strcmp(p + n - 12, ".safetensors")) || (has_file(p, "model.safetensors") && !has_file(p, "state.bin"));
    if (hf && row_norms)
        die("inspect: --row_norms reads llm3d checkpoints (a checkpoint folder, its state.bin or a run_dir); '%s' is a Hugging Face "
            "export\n  hint: give the checkpoint it was exported from", p);
    if (n > 12 && !strcmp(p + n - 12, ".safetensors")) return hf_inspect_ex(p, allow, stdout);
    if (hf) {
        char st[1200];
        snprintf(st, sizeof st, "%s/model.safetensors", p);
        return hf_inspect_ex(st, allow, stdout);
    }
    char path[1200];
    resolve_checkpoint(p, path, sizeof path);
    return row_norms ? checkpoint_row_norms(path, row_norms, stdout) : checkpoint_inspect_ex(path, allow, stdout);
}

void checkpoint_load_model(const char *dir, Model *m, int T) {
    ModelConfig mc;
    char err[2048];
    if (has_file(dir, "config.json")) {
        if (hf_read_config(dir, &mc, err, sizeof err) != 0) die("%s", err);
        model_create(m, &mc, backend_cpu(), NULL, NULL, 1, T ? T : mc.seq_len, RECOMPUTE_NONE);
        if (hf_load_weights(dir, m, err, sizeof err) != 0) die("%s", err);
        return;
    }
    char path[1200], state[1300];
    resolve_checkpoint(dir, path, sizeof path);
    checkpoint_state_path(path, state, sizeof state);
    CkptReader r;
    if (checkpoint_open_model(&r, state, &mc, err, sizeof err) != 0) die("%s", err);
    model_create(m, &mc, backend_cpu(), NULL, NULL, 1, T ? T : mc.seq_len, RECOMPUTE_NONE);
    checkpoint_load_weights(path, m, r.config_text);
    ckpt_close(&r);
}

int checkpoint_logits_main(int argc, char **argv) {
    const char *usage = "usage: build/train logits --model=DIR --ids=1,2,3 --out=FILE\n"
                        "  DIR: a Hugging Face folder (config.json + model.safetensors) or a checkpoint folder\n";
    const char *known[] = {"model", "ids", "out", NULL};
    check_args(argc, argv, known, usage);
    const char *dir = arg_value(argc, argv, "model"), *ids_text = arg_value(argc, argv, "ids"), *out = arg_value(argc, argv, "out");
    if (!dir || !ids_text || !out) die("logits needs --model, --ids and --out\n%s", usage);
    size_t cap = strlen(ids_text) / 2 + 1;   /* items are at least one digit and a comma */
    double *values = mallocCheck(cap * sizeof *values);
    char err[4400];
    int T = option_list("ids", ids_text, 0, INT_MAX, 1, values, (int)cap, err, sizeof err);
    if (T < 0) die("logits: %s\n  hint: --ids takes comma-separated token ids, e.g. --ids=1,2,3", err);
    int *ids = mallocCheck(((size_t)T + 1) * sizeof(int));
    for (int t = 0; t < T; t++) ids[t] = (int)values[t];
    free(values);
    if (T == 0) die("logits: --ids is empty");
    if (check_writable(out, 0, "--out", err, sizeof err) != 0) die("logits: %s", err);   /* a regular file only, said before the work */
    Model m;
    checkpoint_load_model(dir, &m, T);
    for (int t = 0; t < T; t++)
        if (ids[t] >= m.cfg.vocab_size) die("logits: token id %d is not below vocab_size %d", ids[t], m.cfg.vocab_size);
    size_t n = (size_t)T * m.V;
    float *logits = mallocCheck(n * sizeof(float));
    model_logits(&m, ids, 1, T, logits);
    int32_t h[256] = {LOGITS_MAGIC, 1, T, m.V};
    char tmp[1300];
    FILE *f = atomic_open(out, tmp, sizeof tmp);
    fwriteCheck(h, sizeof h, 1, f, tmp);
    fwriteCheck(ids, sizeof(int), (size_t)T, f, tmp);
    fwriteCheck(logits, sizeof(float), n, f, tmp);
    atomic_commit(f, tmp, out);
    printf("logits | %d tokens x %d vocab -> %s\n", T, m.V, out);
    free(logits);
    free(ids);
    model_free(&m);
    return 0;
}
