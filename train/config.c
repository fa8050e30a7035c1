/* train/config.c — the config table, presets, parser, validation, help and
 * startup table. Everything a user can set is one row of config_fields[]. */
#include "config.h"
#include "../model/llama.h"
#include "../common/util.h"
#include "../common/options.h"
#include "../parallel/schedule.h"
#include "../comm/comm.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F(name, type, def, lo, hi, choices, section, help) \
    { #name, type, offsetof(Config, name), sizeof(((Config *)0)->name), def, lo, hi, choices, section, help }
#define BIG 2147483647.0

const ConfigField config_fields[] = {
    F(preset, FIELD_STRING, "", 0, 0, NULL, "model", "named model and batch shape: tiny | l15m | l124m | l350m; later keys override it"),
    F(vocab_size, FIELD_INT, "0", 0, 1 << 24, NULL, "model", "vocabulary size; 0 = read it from the training shard's header"),
    F(dim, FIELD_INT, "128", 8, 65536, NULL, "model", "model width (d_model)"),
    F(n_layers, FIELD_INT, "4", 1, 1024, NULL, "model", "decoder blocks"),
    F(n_heads, FIELD_INT, "4", 1, 1024, NULL, "model", "query heads; dim must divide by it"),
    F(n_kv_heads, FIELD_INT, "2", 1, 1024, NULL, "model", "key/value heads (grouped-query attention); n_heads must divide by it"),
    F(ffn_dim, FIELD_INT, "352", 1, 1 << 20, NULL, "model", "hidden width of the SwiGLU MLP"),
    F(seq_len, FIELD_INT, "128", 2, 1048576, NULL, "model", "tokens per sequence (T)"),
    F(tie_embeddings, FIELD_BOOL, "0", 0, 1, NULL, "model", "share the token embedding with the LM head"),
    F(rope_theta, FIELD_FLOAT, "10000", 1, 1e12, NULL, "model", "rotary embedding base"),
    F(norm_eps, FIELD_FLOAT, "1e-5", 1e-12, 1, NULL, "model", "RMSNorm epsilon"),
    F(init_std, FIELD_FLOAT, "0.02", 0, 10, NULL, "model", "std of the normal init; output projections are scaled by 1/sqrt(2*n_layers)"),
    F(batch_size, FIELD_INT, "16", 1, 1 << 20, NULL, "training", "micro-batch: sequences per forward/backward (B)"),
    F(total_batch_tokens, FIELD_INT, "0", 0, BIG, NULL, "training", "tokens per optimizer step over all ranks; 0 = batch_size*seq_len*dp (no accumulation)"),
    F(max_steps, FIELD_INT, "1000", 0, BIG, NULL, "training", "optimizer steps to train; 0 = build the model and exit, writing nothing (`build/train memory` shows the memory plan alone)"),
    F(lr, FIELD_FLOAT, "1e-3", 0, 10, NULL, "training", "peak learning rate"),
    F(min_lr_ratio, FIELD_FLOAT, "0.1", 0, 1, NULL, "training", "learning-rate floor at the end of decay, as a fraction of lr"),
    F(warmup_steps, FIELD_INT, "50", 0, BIG, NULL, "training", "linear warm-up steps"),
    F(lr_schedule, FIELD_CHOICE, "cosine", 0, 0, "cosine|linear|constant", "training", "decay after warm-up"),
    F(weight_decay, FIELD_FLOAT, "0.1", 0, 10, NULL, "training", "AdamW decoupled weight decay (not applied to norm weights)"),
    F(beta1, FIELD_FLOAT, "0.9", 0, 0.999999, NULL, "training", "AdamW beta1"),
    F(beta2, FIELD_FLOAT, "0.95", 0, 0.999999, NULL, "training", "AdamW beta2"),
    F(adam_eps, FIELD_FLOAT, "1e-8", 0, 1, NULL, "training", "AdamW epsilon; at least 1e-20 (0 makes the update of a weight whose gradient is 0 a 0/0)"),
    F(optimizer, FIELD_CHOICE, "adamw", 0, 0, "adamw|adamw8bit", "training", "adamw: fp32 moments (8 bytes/param); adamw8bit: blockwise 8-bit moments (~2 bytes/param; tensors under adamw8bit_min_numel elements keep fp32)"),
    F(adamw8bit_min_numel, FIELD_INT, "4096", 1, BIG, NULL, "training", "adamw8bit: tensors of fewer elements (the whole tensor's, whatever the layout) keep fp32 moments"),
    F(grad_clip, FIELD_FLOAT, "1.0", 0, 1e9, NULL, "training", "clip the global gradient norm to this; 0 = off"),
    F(seed, FIELD_INT, "1337", 0, BIG, NULL, "training", "seed for init and data order"),
    F(train_data, FIELD_STRING, "data/corpus/train_*.bin", 0, 0, NULL, "data", "training shards: a file, a glob or a comma list"),
    F(val_data, FIELD_STRING, "data/corpus/val_*.bin", 0, 0, NULL, "data", "validation shards; empty = no eval"),
    F(eval_every, FIELD_INT, "100", 0, BIG, NULL, "data", "evaluate every N steps (and at the end); 0 = never"),
    F(eval_tokens, FIELD_INT, "40960", 1, BIG, NULL, "data", "validation tokens per evaluation, from the start of the val split in whole sequences (eval_tokens/seq_len, at least 1): the same sequences on every layout and batch size, the loss their token-weighted mean"),
    F(eval_batches, FIELD_INT, "0", 0, BIG, NULL, "data", "deprecated (0 = unset): evaluate eval_batches x batch_size sequences instead of eval_tokens, an amount that changes with batch_size; say so, use eval_tokens"),
    F(device, FIELD_CHOICE, "cpu", 0, 0, "cpu|cuda", "system", "where the model runs"),
    F(precision, FIELD_CHOICE, "fp32", 0, 0, "fp32|bf16|fp16|fp8", "system", "compute dtype (master weights and gradients stay fp32); fp8: bf16 with the block matmuls in FP8 (Hopper, Ada); on cpu, bf16/fp16/fp8 are emulated"),
    F(recompute, FIELD_CHOICE, "none", 0, 0, "none|selective|full", "system", "activations the backward recomputes instead of keeping: selective = norms, attention output, SwiGLU; full = everything but each block's input"),
    F(compute_weights, FIELD_CHOICE, "keep", 0, 0, "keep|per_layer", "system", "the bf16/fp16 weights the model runs with: keep = a compute-dtype copy of all of them, refreshed by the optimizer; per_layer = no copy: each layer, the embedding and the head are cast from the fp32 master just before they run (forward, recompute, backward) into a buffer for one layer (the embedding's and head's place lies in the recompute buffers when recompute is on): the same results, ~2 bytes/param less; not with zero=1 and dp > 1. No effect in fp32, where the master is the compute copy"),
    F(loss_scale_init, FIELD_FLOAT, "65536", 1, 1e30, NULL, "system", "fp16 only: starting dynamic loss scale (x2 after 2000 clean steps, x0.5 and the step skipped on overflow)"),
    F(max_skipped_steps, FIELD_INT, "100", 1, 1000000, NULL, "system", "fp16 and fp8: steps in a row skipped for inf/nan gradients before the run stops (exit 1); fp16 also stops when its scale would fall under 1"),
    F(dp, FIELD_INT, "1", 1, COMM_MAX_DP, NULL, "parallel", "data-parallel ranks: each trains on its own part of every step's batch (world = dp * pp * cp * tp)"),
    F(tp, FIELD_INT, "1", 1, COMM_MAX_AXIS, NULL, "parallel", "tensor-parallel ranks: every layer's heads and FFN columns and the vocabulary split tp ways (Megatron); tp must divide n_heads, n_kv_heads and ffn_dim; keep it within the GPUs of one host"),
    F(cp, FIELD_INT, "1", 1, COMM_MAX_AXIS, NULL, "parallel", "context-parallel ranks: each sequence is cut into 2*cp chunks and cp rank r holds chunks r and 2*cp-1-r (equal causal work), so activations are 1/cp; attention all-gathers K/V over the cp ranks every layer (docs/context-parallel.md); seq_len must divide by 2*cp; the weights and gradients are the same on every cp rank (reduced over dp x cp)"),
    F(sequence_parallel, FIELD_BOOL, "0", 0, 1, NULL, "parallel", "with tp > 1: norms, residual stream and adds on batch_size*seq_len/tp tokens per rank, the tp all-reduces become reduce-scatter + all-gather (less activation memory, same bytes sent)"),
    F(pp, FIELD_INT, "1", 1, COMM_MAX_AXIS, NULL, "parallel", "pipeline stages: each holds consecutive layers (embedding on the first, head on the last)"),
    F(pp_schedule, FIELD_CHOICE, "1f1b", 0, 0, "1f1b|gpipe|interleaved|zb1|zbv", "parallel", "pipeline schedule; interleaved runs pp_virtual chunks of layers per stage; zb1 = zero-bubble ZB-H1: the backward split into B (input gradients) and W (weight gradients), W filling 1F1B's drain bubble, at 1F1B's micro-batches in flight; zbv = ZB-V: the same with two chunks a stage in V order (stage 0 holds the first and the last layers; n_layers must divide by 2*pp) (docs/pipeline-parallel.md)"),
    F(zb1_memory, FIELD_CHOICE, "1f1b", 0, 0, "1f1b|busiest", "parallel", "pp_schedule=zb1: what each stage holds from a micro-batch's forward to its W. 1f1b: stage s at most 1F1B's own pp-s micro-batches, each stage idle (pp-1)(F+B) of a step (2/3 of 1F1B's); busiest: every stage up to pp, 1F1B's busiest stage's (stage 0), for ZB-H1's (pp-1)(F+B-W) (1/3 of 1F1B's) — the later stages hold more than under 1F1B, the last stage's W stores its logits' gradients (docs/pipeline-parallel.md)"),
    F(pp_virtual, FIELD_INT, "2", 1, 64, NULL, "parallel", "pp_schedule=interleaved: model chunks per stage (n_layers must divide by pp*pp_virtual)"),
    F(pp_layers, FIELD_STRING, "", 0, 0, NULL, "parallel", "layers of each pipeline stage, e.g. 4,4,3; empty = as even as possible"),
    F(comm_backend, FIELD_CHOICE, "auto", 0, 0, "auto|nccl|mpi", "parallel", "who moves device buffers: nccl (a GPU per rank), mpi (CPU ranks, ranks sharing a GPU); auto picks"),
    F(bucket_mb, FIELD_FLOAT, "25", 0.001, 65536, NULL, "parallel", "data parallel: MiB of fp32 gradients per bucket, reduced as soon as the backward completes it"),
    F(zero, FIELD_INT, "0", 0, 3, NULL, "parallel", "ZeRO stage over the dp ranks (docs/zero.md): 1 = fp32 master weights and optimizer state sharded; 2 = also the gradients, reduce-scattered unit by unit during the backward; 3 = also the weights, each unit all-gathered (one unit ahead) before its forward and its backward and released after"),
    F(grad_reduce_dtype, FIELD_CHOICE, "fp32", 0, 0, "fp32|bf16", "parallel", "dtype the data-parallel gradient reduction sends (bf16 halves the bytes)"),
    F(nproc, FIELD_INT, "0", 0, 4096, NULL, "parallel", "start this many local ranks through mpirun (0 = as launched)"),
    F(comm_ablate, FIELD_BOOL, "0", 0, 1, NULL, "parallel", "measurement only: skip every device collective and pipeline message (results WRONG, no checkpoint) to time the step without communication"),
    F(comm_timeout_s, FIELD_FLOAT, "100", -1e9, 1e9, NULL, "parallel", "seconds a collective or send/recv may take before the watchdog stops every rank, naming the op, step and the ranks that never came (x5 for start-up, the first step and checkpoints); must be > 0"),
    F(straggler_pct, FIELD_FLOAT, "20", 0, 1e6, NULL, "parallel", "on logged steps, name a rank whose step work (data + compute + optimizer) exceeds the ranks' median by more than this %; 0 = off"),
    F(fault, FIELD_STRING, "", 0, 0, NULL, "parallel", "tests only: stall|exit|nan|slow:rank=R[:step=S][:ms=M] makes one rank misbehave"),
    F(sample_every, FIELD_INT, "0", 0, BIG, NULL, "sampling", "print generated text every N steps (and at the end when sample_tokens > 0); 0 = only at the end"),
    F(sample_tokens, FIELD_INT, "0", 0, BIG, NULL, "sampling", "tokens to generate per sample; 0 = no sampling"),
    F(sample_prompt, FIELD_STRING, "", 0, 0, NULL, "sampling", "text the samples start from (empty = a new document)"),
    F(temperature, FIELD_FLOAT, "0.8", 0, 100, NULL, "sampling", "softmax temperature; 0 = always the most likely token"),
    F(top_k, FIELD_INT, "40", 0, BIG, NULL, "sampling", "sample among the k most likely tokens; 0 = all"),
    F(tokenizer, FIELD_STRING, "", 0, 0, NULL, "sampling", "vocabulary file for decoding samples; empty = tokenizer.bin beside the first train shard"),
    F(memory_report, FIELD_BOOL, "0", 0, 1, NULL, "logging", "run one step, print the measured peak beside the predicted memory, and exit (`build/train memory` shows the plan without a step)"),
    F(log_every, FIELD_INT, "1", 1, BIG, NULL, "logging", "print a step line every N steps"),
    F(profile_out, FIELD_STRING, "", 0, 0, NULL, "logging", "one rank: write this run's step-time profile (median split after 2 warm-up steps) for `build/train plan --profile`"),
    F(log_jsonl, FIELD_STRING, "", 0, 0, NULL, "logging", "also write one JSON object per step/eval to this file"),
    F(run_dir, FIELD_STRING, "runs/default", 0, 0, NULL, "logging", "folder for this run's outputs"),
    F(checkpoint_every, FIELD_INT, "0", -1, BIG, NULL, "checkpoint", "save a checkpoint to run_dir every N steps and at the end (and on SIGTERM/SIGINT/SIGUSR1); 0 = only at the end; -1 = never"),
    F(keep_checkpoints, FIELD_INT, "3", 0, BIG, NULL, "checkpoint", "keep the newest N complete checkpoints in run_dir; 0 = keep all"),
    F(resume, FIELD_BOOL, "0", 0, 1, NULL, "checkpoint", "continue from the newest complete checkpoint in run_dir (a fresh start when there is none); a run already at max_steps says so and exits 0"),
    F(init_from, FIELD_STRING, "", 0, 0, NULL, "checkpoint", "start from these weights (optimizer fresh): a Hugging Face folder (config.json + model.safetensors) or a checkpoint folder"),
};
const int config_n_fields = sizeof config_fields / sizeof config_fields[0];

/* settings: space-separated key=value; prompt: the sample_prompt (it may hold spaces), or NULL */
typedef struct { const char *name; const char *settings; const char *about; const char *prompt; } Preset;
static const Preset presets[] = {
    /* its sample opens with "The": from a bare document start a model this small often begins with a
     * fragment of capitals (the corpus's documents open "To the Senate", "Mr. Speaker", split into letters) */
    {"tiny", "dim=128 n_layers=4 n_heads=4 n_kv_heads=2 ffn_dim=352 seq_len=128 batch_size=16 vocab_size=0 "
             "max_steps=600 warmup_steps=30 lr=3e-3 eval_every=100 log_every=10 sample_tokens=120",
     "the README's main job: trains on a 2-core CPU in minutes, then writes a sample", "The"},
    /* the three below are the shapes of CFGS in the PyTorch peer (shared/peers/torch_llama.py) */
    {"l15m", "vocab_size=32000 dim=288 n_layers=6 n_heads=6 n_kv_heads=6 ffn_dim=768 seq_len=256 batch_size=128", "llama2.c's 15M", NULL},
    {"l124m", "vocab_size=32000 dim=768 n_layers=12 n_heads=12 n_kv_heads=4 ffn_dim=2048 seq_len=1024 batch_size=16", "GPT-2 small sized", NULL},
    {"l350m", "vocab_size=32000 dim=1024 n_layers=24 n_heads=16 n_kv_heads=4 ffn_dim=2816 seq_len=1024 batch_size=16", "~350M", NULL},
};

const ConfigField *config_find(const char *key) {
    for (int i = 0; i < config_n_fields; i++)
        if (strcmp(config_fields[i].name, key) == 0) return &config_fields[i];
    return NULL;
}

static const char *nearest_key(const char *key) {
    const char *names[sizeof config_fields / sizeof config_fields[0]];
    for (int i = 0; i < config_n_fields; i++) names[i] = config_fields[i].name;
    return option_suggest(key, names, config_n_fields);
}

static int choice_index(const char *choices, const char *value) {
    int idx = 0;
    const char *p = choices;
    size_t n = strlen(value);
    while (*p) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return idx;
        if (!end) break;
        p = end + 1;
        idx++;
    }
    return -1;
}

static void choice_name(const char *choices, int index, char *out, size_t size) {
    const char *p = choices;
    for (int i = 0; i < index && p; i++) { p = strchr(p, '|'); if (p) p++; }
    if (!p) { snprintf(out, size, "?"); return; }
    const char *end = strchr(p, '|');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    snprintf(out, size, "%.*s", (int)len, p);
}

double config_number_or_die(const char *cmd, const char *key, const char *value) {
    const ConfigField *f = config_find(key);
    if (!f || (f->type != FIELD_INT && f->type != FIELD_FLOAT)) die("%s: '%s' is no numeric config key (a bug)", cmd, key);
    return option_number_or_die(cmd, key, value, f->min, f->max, f->type == FIELD_INT);
}

int config_set(Config *c, const char *key, const char *value, char *err, size_t err_size) {
    const ConfigField *f = config_find(key);
    if (!f) {
        snprintf(err, err_size, "unknown config key '%s' (did you mean '%s'?); `build/train --help` lists every key", key, nearest_key(key));
        return -1;
    }
    void *dst = (char *)c + f->offset;
    switch (f->type) {
    case FIELD_INT:
    case FIELD_FLOAT: {
        double v;
        if (option_number(key, value, f->min, f->max, f->type == FIELD_INT, &v, err, err_size) != 0) return -1;
        if (f->type == FIELD_INT) *(int *)dst = (int)v;
        else *(float *)dst = (float)v;
        break;
    }
    case FIELD_BOOL:
        if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes")) *(int *)dst = 1;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no")) *(int *)dst = 0;
        else {
            snprintf(err, err_size, "config key '%s': '%s' is not a boolean (use 1/0, true/false)", key, value);
            return -1;
        }
        break;
    case FIELD_STRING:
        if (strlen(value) >= f->size) {
            snprintf(err, err_size, "config key '%s': value is longer than %zu characters", key, f->size - 1);
            return -1;
        }
        snprintf(dst, f->size, "%s", value);
        break;
    case FIELD_CHOICE: {
        int i = choice_index(f->choices, value);
        if (i < 0) {
            snprintf(err, err_size, "config key '%s': '%s' is not one of %s", key, value, f->choices);
            return -1;
        }
        *(int *)dst = i;
        break;
    }
    }
    if (f->offset == offsetof(Config, preset) && *value && config_apply_preset(c, value) != 0) {
        snprintf(err, err_size, "config key 'preset': unknown preset '%s' (choose tiny, l15m, l124m or l350m)", value);
        return -1;
    }
    return 0;
}

int config_apply_preset(Config *c, const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) != 0) continue;
        char buf[1024], err[256];
        snprintf(buf, sizeof buf, "%s", presets[i].settings);
        for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
            char *eq = strchr(tok, '=');
            *eq = 0;
            if (config_set(c, tok, eq + 1, err, sizeof err) != 0) die("preset %s: %s", name, err);
        }
        if (presets[i].prompt && config_set(c, "sample_prompt", presets[i].prompt, err, sizeof err) != 0) die("preset %s: %s", name, err);
        snprintf(c->preset, sizeof c->preset, "%s", name);
        return 0;
    }
    return -1;
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    char err[256];
    for (int i = 0; i < config_n_fields; i++)
        if (config_set(c, config_fields[i].name, config_fields[i].default_value, err, sizeof err) != 0)
            die("internal: default of %s: %s", config_fields[i].name, err);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

#define INI_MAX_BYTES (1 << 20)

/* Reads "key = value" lines ([sections] and # comments ignored) of the file at
 * path: a regular file of at most INI_MAX_BYTES, read whole, so a line of any
 * length is one line and a device or FIFO is refused at once. With
 * only_preset, applies just the preset key; otherwise every key but preset. */
static int load_ini(Config *c, const char *path, int only_preset, char *err, size_t err_size) {
    size_t n;
    char *text = read_regular(path, "config file", INI_MAX_BYTES, &n, err, err_size);
    if (!text) return -1;
    int lineno = 0, rc = 0;
    if (strlen(text) != n) {
        snprintf(err, err_size, "config file '%s' holds a NUL byte: it is not a text file", path);
        rc = -1;
    }
    for (char *line = text, *next; rc == 0 && line < text + n; line = next) {
        lineno++;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : text + n;
        if (nl) *nl = 0;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s || *s == '[') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, err_size, "%s:%d: expected 'key = value', got '%.200s'", path, lineno, s);
            rc = -1;
            break;
        }
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1), msg[768];
        if ((strcmp(key, "preset") == 0) != only_preset) continue;
        if (config_set(c, key, value, msg, sizeof msg) != 0) {
            snprintf(err, err_size, "%s:%d: %s", path, lineno, msg);
            rc = -1;
        }
    }
    free(text);
    return rc;
}

int config_try_parse_args(Config *c, int argc, char **argv, char *err, size_t err_size) {
    config_defaults(c);
    const char *ini = NULL, *preset = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            snprintf(err, err_size, "unexpected argument '%.200s': settings are --key=value (see `build/train --help`)", argv[i]);
            return -1;
        }
        if (!strncmp(argv[i], "--config=", 9)) ini = argv[i] + 9;
        else if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) { snprintf(err, err_size, "--config needs a file: --config=path.ini"); return -1; }
            ini = argv[++i];
        } else if (!strncmp(argv[i], "--preset=", 9)) preset = argv[i] + 9;
    }
    if (ini && load_ini(c, ini, 1, err, err_size) != 0) return -1;
    if (preset && config_set(c, "preset", preset, err, err_size) != 0) return -1;
    if (ini && load_ini(c, ini, 0, err, err_size) != 0) return -1;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--config", 8) || !strncmp(argv[i], "--preset=", 9)) {
            if (!strcmp(argv[i], "--config")) i++;
            continue;
        }
        char key[128];
        const char *value = option_split(argv[i], key, sizeof key);
        if (!value) { snprintf(err, err_size, "'%.200s' has no value: write %.200s=VALUE", argv[i], argv[i]); return -1; }
        if (config_set(c, key, value, err, err_size) != 0) return -1;
    }
    if (c->max_steps > 0 && c->warmup_steps > c->max_steps) {   /* a short try of a preset: warm up over the whole run */
        c->warmup_clamped_from = c->warmup_steps;
        c->warmup_steps = c->max_steps;
    }
    return config_try_validate(c, err, err_size);
}

void config_parse_args(Config *c, int argc, char **argv) {
    char err[1024];
    if (config_try_parse_args(c, argc, argv, err, sizeof err) != 0) die("%s", err);
}

int config_head_dim(const Config *c) { return c->dim / c->n_heads; }

int config_grad_accum_steps(const Config *c) {
    long per_micro = (long)c->batch_size * c->seq_len * c->dp;
    return c->total_batch_tokens ? (int)(c->total_batch_tokens / per_micro) : 1;
}

long config_eval_sequences(const Config *c) {
    if (c->eval_batches > 0) return (long)c->eval_batches * c->batch_size;
    long n = c->eval_tokens / c->seq_len;
    return n > 0 ? n : 1;
}

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); return -1; } while (0)

int config_try_validate(const Config *c, char *err, size_t err_size) {
    if (c->dim % c->n_heads)
        FAIL("dim=%d does not divide by n_heads=%d: each head gets dim/n_heads channels; pick n_heads dividing dim", c->dim, c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        FAIL("n_heads=%d does not divide by n_kv_heads=%d: each KV head serves a whole group of query heads", c->n_heads, c->n_kv_heads);
    if (config_head_dim(c) % 2)
        FAIL("head dim dim/n_heads = %d is odd: rotary embeddings rotate pairs of channels, so it must be even", config_head_dim(c));
    ModelConfig mc = {.n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .ffn_dim = c->ffn_dim};
    if (model_check_tp(&mc, c->tp, err, err_size) != 0) return -1;
    if (c->cp > 1 && c->seq_len % (2 * c->cp))
        FAIL("cp=%d cuts each sequence into 2*cp = %d chunks of equal length (cp rank r holds chunks r and 2*cp-1-r), and seq_len=%d "
             "does not divide by %d\n  hint: choose seq_len a multiple of %d, or a cp whose 2*cp divides seq_len", c->cp, 2 * c->cp,
             c->seq_len, 2 * c->cp, 2 * c->cp);
    long tokens = (long)c->batch_size * c->seq_len;
    if (tokens > 2147483647L)
        FAIL("batch_size*seq_len = %d*%d = %ld tokens per micro-batch is more than 2147483647; use a smaller batch_size",
             c->batch_size, c->seq_len, tokens);
    long local = tokens / (c->cp > 0 ? c->cp : 1);   /* a micro-batch's tokens on one cp rank */
    if (c->sequence_parallel && c->tp > 1 && local % c->tp) {
        if (c->cp > 1)
            FAIL("sequence_parallel=1 splits a cp rank's batch_size*seq_len/cp = %d*%d/%d = %ld tokens of a micro-batch over tp=%d ranks, "
                 "and %ld does not divide by %d\n  hint: choose batch_size and seq_len whose product divides by cp*tp, or --sequence_parallel=0",
                 c->batch_size, c->seq_len, c->cp, local, c->tp, local, c->tp);
        FAIL("sequence_parallel=1 splits the batch_size*seq_len = %d*%d = %ld tokens of a micro-batch over tp=%d ranks, and %ld does not "
             "divide by %d\n  hint: choose batch_size and seq_len whose product divides by tp, or --sequence_parallel=0",
             c->batch_size, c->seq_len, tokens, c->tp, tokens, c->tp);
    }
    long per_micro = tokens * c->dp;
    if (c->total_batch_tokens && c->total_batch_tokens % per_micro)
        FAIL("total_batch_tokens=%d is not a multiple of batch_size*seq_len*dp = %d*%d*%d = %ld: every data-parallel rank "
             "accumulates whole micro-batches\n  hint: make total_batch_tokens a multiple of %ld", c->total_batch_tokens,
             c->batch_size, c->seq_len, c->dp, per_micro, per_micro);
    if (c->precision == PRECISION_FP8 && c->device == DEVICE_CUDA && c->n_heads > 0 && c->tp > 0) {
        /* cuBLASLt's FP8 matmuls take rows of 16-byte multiples: every block matmul's sizes on a rank */
        int hd = c->dim / c->n_heads, sizes[5] = {c->dim, c->ffn_dim / c->tp, c->n_heads / c->tp * hd,
                                                  (c->n_heads + 2 * c->n_kv_heads) / c->tp * hd, (int)local};
        static const char *what[5] = {"dim", "ffn_dim/tp", "n_heads/tp*head_dim", "(n_heads+2*n_kv_heads)/tp*head_dim", "batch_size*seq_len/cp"};
        for (int k = 0; k < 5; k++)
            if (sizes[k] % 16)
                FAIL("precision=fp8 on cuda multiplies FP8 matrices whose sizes must be multiples of 16, and %s = %d is not\n"
                     "  hint: choose sizes that are multiples of 16, or --precision=bf16", what[k], sizes[k]);
    }
    if (c->grad_reduce_dtype == GRAD_REDUCE_BF16 && config_act_dtype(c->precision) != DTYPE_BF16)
        FAIL("grad_reduce_dtype=bf16 sends the gradients in the compute dtype, and precision=%s\n"
             "  hint: use --precision=bf16, or --grad_reduce_dtype=fp32", config_precision_name(c->precision));
    if (c->compute_weights == COMPUTE_WEIGHTS_PER_LAYER && (c->zero == 1 || c->zero == 2) && c->dp * c->cp > 1 && c->precision != PRECISION_FP32)
        FAIL("compute_weights=per_layer casts each layer's weights from this rank's whole fp32 master, and zero=%d keeps only a "
             "1/(dp*cp) shard of the master on each of the dp*cp=%d ranks\n"
             "  hint: use --compute_weights=keep with --zero=%d, or --zero=0 with --compute_weights=per_layer", c->zero, c->dp * c->cp, c->zero);
    int zb = c->pp_schedule == PP_ZB1 || c->pp_schedule == PP_ZBV;
    const char *zb_name = schedule_name(c->pp_schedule);
    if (zb && c->pp > 1 && c->precision == PRECISION_FP8)
        FAIL("pp_schedule=%s splits the backward into B and W, and precision=fp8's matmul backward casts its operands for both "
             "halves at once: the two do not run together yet\n  hint: use --pp_schedule=1f1b with --precision=fp8, or --precision=bf16 with %s",
             zb_name, zb_name);
    if (c->pp > 1 && c->total_batch_tokens && config_grad_accum_steps(c) < c->pp) {   /* 0: set later (the dry run's --micro_batches) */
        long smallest = (long)c->pp * per_micro;
        FAIL("a pipeline of pp=%d stages needs at least %d micro-batches per step, and total_batch_tokens=%d makes %d "
             "(total_batch_tokens / (batch_size*seq_len*dp) = %d / %ld)\n  hint: the smallest total_batch_tokens for pp=%d is %ld "
             "(or lower batch_size or pp)", c->pp, c->pp, c->total_batch_tokens, config_grad_accum_steps(c), c->total_batch_tokens,
             per_micro, c->pp, smallest);
    }
    if (c->zb1_memory == ZB1_MEMORY_BUSIEST && c->pp_schedule != PP_ZB1)   /* the default (1f1b) is every other schedule's own memory */
        FAIL("zb1_memory=busiest chooses what a pp_schedule=zb1 stage holds between a forward and its W, and pp_schedule=%s has "
             "no such choice: the key would be ignored\n  hint: use --pp_schedule=zb1 with it, or drop --zb1_memory", zb_name);
    if (c->pp_schedule == PP_ZBV && c->pp > 1 && c->pp_layers[0])
        FAIL("pp_layers='%s' sets an uneven split, and pp_schedule=zbv needs 2*pp equal chunks\n  hint: drop pp_layers, or use "
             "--pp_schedule=zb1 with it", c->pp_layers);
    if (c->pp_schedule == PP_ZBV && c->pp > 1 && c->n_layers % (2 * c->pp))
        FAIL("pp_schedule=zbv cuts n_layers=%d into 2*pp = %d equal chunks (two a stage, in V order), and %d does not divide by %d\n"
             "  hint: the smallest n_layers it takes at pp=%d is %d (any multiple of %d), or use --pp_schedule=zb1", c->n_layers,
             2 * c->pp, c->n_layers, 2 * c->pp, c->pp, 2 * c->pp, 2 * c->pp);
    if (c->zero >= 2 && c->dp * c->cp == 1)
        FAIL("zero=%d shards gradients%s over the data-parallel ranks, and dp=1: there is nothing to shard over\n"
             "  hint: use --dp=2 or more with --zero=%d, or --zero=0 on one data-parallel rank", c->zero, c->zero == 3 ? " and weights" : "", c->zero);
    if (c->zero == 3 && c->compute_weights == COMPUTE_WEIGHTS_PER_LAYER)
        FAIL("zero=3 gathers each unit's compute weights from the dp ranks' shards just before it runs, and compute_weights=per_layer "
             "casts them from a whole fp32 master this rank does not hold\n  hint: use --compute_weights=keep with --zero=3 (it keeps no copy either)");
    if (c->zero >= 2 && c->tie_embeddings)
        FAIL("zero=%d reduces and gathers unit by unit, and tie_embeddings=1 makes the LM head write the embedding's gradient and read "
             "its weights: a layout ZeRO-2/3 here cannot take\n  hint: use --tie_embeddings=0 with --zero=%d, or --zero=1", c->zero, c->zero);
    if (c->zero >= 2 && c->grad_reduce_dtype == GRAD_REDUCE_BF16)
        FAIL("zero=%d reduce-scatters each unit's fp32 gradient into the fp32 shard, and grad_reduce_dtype=bf16 asks to send it in bf16\n"
             "  hint: use --grad_reduce_dtype=fp32 with --zero=%d, or --zero=1", c->zero, c->zero);
    if (c->adam_eps < (float)CONFIG_MIN_ADAM_EPS)   /* 1e-320 parses, and is 0 as a float */
        FAIL("adam_eps=%g (as float32): AdamW divides m by sqrt(v) + adam_eps, and m = v = 0 for every weight whose gradient is 0 "
             "(an embedding row of a token no batch has held yet), so 0/0 turns those weights NaN at the first step and the run "
             "stops at step 2 blaming the gradients; below %g a gradient whose square underflows float32 (|g| < 2e-22, v = 0) is "
             "divided by almost nothing\n  hint: use --adam_eps=1e-8 (the default, as PyTorch's) or any value from %g to 1",
             c->adam_eps, CONFIG_MIN_ADAM_EPS, CONFIG_MIN_ADAM_EPS);
    if (c->comm_timeout_s <= 0)
        FAIL("comm_timeout_s=%g: a collective needs a deadline (> 0 seconds), or one stalled rank hangs every other rank for ever\n"
             "  hint: the default is 100; give a slow setup more, e.g. --comm_timeout_s=1800", c->comm_timeout_s);
    return 0;
}

void config_validate(const Config *c) {
    char err[512];
    if (config_try_validate(c, err, sizeof err) != 0) die("%s", err);
}

/* A float as a person writes it: the shortest text that reads back as the same
 * float, the exponent without padding (1e-05 -> 1e-5); never 0.00300000003. */
static void format_float_short(float v, char *out, size_t size) {
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(out, size, "%.*g", digits, v);
        if (strtof(out, NULL) == v) break;
    }
    char *e = strchr(out, 'e');
    if (e && e[1] == '+' && v == floorf(v) && fabsf(v) < 1e9f) snprintf(out, size, "%.0f", v);   /* 10000, not 1e4 */
    e = strchr(out, 'e');
    if (!e) return;
    char *sign = e + 1, *first = sign + (*sign == '+' || *sign == '-');
    while (*first == '0' && first[1]) first++;
    char *to = *sign == '-' ? sign + 1 : sign;
    memmove(to, first, strlen(first) + 1);
}

void config_format(const Config *c, const ConfigField *f, char *out, size_t size) {
    const void *src = (const char *)c + f->offset;
    switch (f->type) {
    case FIELD_INT: case FIELD_BOOL: snprintf(out, size, "%d", *(const int *)src); break;
    case FIELD_FLOAT: format_float_short(*(const float *)src, out, size); break;   /* 1e-5, never 9.99999975e-06 */
    case FIELD_STRING: snprintf(out, size, "%s", (const char *)src); break;
    case FIELD_CHOICE: choice_name(f->choices, *(const int *)src, out, size); break;
    }
}

void config_print_help(FILE *out) {
    fprintf(out, "usage: build/train [--config=FILE.ini] [--preset=NAME] [--key=value ...]   trains (the keys below)\n"
                 "       build/train SUBCOMMAND --help   for one of:\n"
                 "  prepare    text (a file, a folder, or sotu) -> token shards, with GPT-2's or a learned vocabulary\n"
                 "  sample     text from a checkpoint, a run_dir or a Hugging Face folder\n"
                 "  export     a checkpoint -> Hugging Face LlamaForCausalLM weights, config and vocabulary\n"
                 "  inspect    a checkpoint's header, config, step and tensor table with checksums\n"
                 "  logits     a model's logits for given token ids, to a file (checks against other implementations)\n"
                 "  memory     the memory plan of these settings alone: nothing trained, no device opened\n"
                 "  schedule   a pipeline schedule's action lists, checked by simulation, printed and drawn (--svg)\n"
                 "  plan       every dp x tp x pp layout of N GPUs: memory per rank and predicted step time, ranked\n"
                 "  scale      the same job on 1, 2, 4, ... ranks through mpirun: speedup and where the time went\n"
                 "  plot       a run's --log_jsonl drawn with gnuplot: loss, tokens/s, the step-time split\n"
                 "  doctor     before a multi-rank run: versions, NCCL_* variables, links, a bandwidth sweep\n\n"
                 "Settings are applied in order: defaults, preset, config file (configs/example.ini shows the format), --key=value.\n");
    const char *section = "";
    for (int i = 0; i < config_n_fields; i++) {
        const ConfigField *f = &config_fields[i];
        if (strcmp(section, f->section)) { section = f->section; fprintf(out, "\n[%s]\n", section); }
        char def[64];
        snprintf(def, sizeof def, "%s", f->default_value);
        fprintf(out, "  --%-20s %-24s %s%s%s\n", f->name, *def ? def : "\"\"", f->help,
                f->type == FIELD_CHOICE ? "; one of " : "", f->type == FIELD_CHOICE ? f->choices : "");
    }
    fprintf(out, "\npresets:\n");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        fprintf(out, "  %-6s %s\n         %s%s%s%s\n", presets[i].name, presets[i].about, presets[i].settings,
                presets[i].prompt ? " sample_prompt=\"" : "", presets[i].prompt ? presets[i].prompt : "", presets[i].prompt ? "\"" : "");
}

/* One value of the startup table: as config_format, but floats as --help shows
 * them (the default's own text where the value is the default). */
static void format_for_table(const Config *c, const Config *defaults, const ConfigField *f, char *out, size_t size) {
    if (f->type != FIELD_FLOAT) { config_format(c, f, out, size); return; }
    float v = *(const float *)((const char *)c + f->offset);
    if (v == *(const float *)((const char *)defaults + f->offset)) snprintf(out, size, "%s", f->default_value);
    else format_float_short(v, out, size);
}

void config_print_table(const Config *c, FILE *out) {
    Config d;
    config_defaults(&d);
    fprintf(out, "+----------------------+------------------------------------------+\n");
    fprintf(out, "| %-20s | %-40s |\n", "config", "value (* = not the default)");
    fprintf(out, "+----------------------+------------------------------------------+\n");
    for (int i = 0; i < config_n_fields; i++) {
        char v[1024], dv[1024];
        format_for_table(c, &d, &config_fields[i], v, sizeof v);
        format_for_table(&d, &d, &config_fields[i], dv, sizeof dv);
        fprintf(out, "| %-20s | %-38.38s %s |\n", config_fields[i].name, v, strcmp(v, dv) ? "*" : " ");
    }
    fprintf(out, "+----------------------+------------------------------------------+\n");
}

size_t config_write_text(const Config *c, char *out, size_t size) {
    size_t n = 0;
    for (int i = 0; i < config_n_fields && n < size; i++) {
        char v[1024];
        config_format(c, &config_fields[i], v, sizeof v);
        n += snprintf(out + n, size - n, "%s=%s\n", config_fields[i].name, v);
    }
    return n;
}

int config_act_dtype(int precision) {
    return precision == PRECISION_BF16 || precision == PRECISION_FP8 ? DTYPE_BF16 : precision == PRECISION_FP16 ? DTYPE_FP16 : DTYPE_FP32;
}

const char *config_precision_name(int precision) {
    static const char *names[] = {"fp32", "bf16", "fp16", "fp8"};
    return precision >= 0 && precision <= PRECISION_FP8 ? names[precision] : "?";
}
