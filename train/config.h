/* train/config.h — the one config struct of llm3d and the table that describes it.
 *
 * The idea: every setting is one row of config_fields[] (name, type, default,
 * range or choices, help). The parser (--config file.ini, then --key=value),
 * --help, the startup table and the checkpoint header are all generated from
 * that table, so a field is added in exactly two places: this struct and the table. */
#pragma once
#include <stddef.h>
#include <stdio.h>

/* The smallest adam_eps a run takes (config_try_validate says why: 0 makes 0/0 of
 * every weight whose gradient is 0; tests/test_cli.c shows it). */
#define CONFIG_MIN_ADAM_EPS 1e-20

enum { DEVICE_CPU, DEVICE_CUDA };
enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP16, PRECISION_FP8 /* bf16, block matmuls in FP8 (model/fp8.h) */ };
enum { SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT };
enum { OPTIMIZER_ADAMW, OPTIMIZER_ADAMW8BIT };
enum { GRAD_REDUCE_FP32, GRAD_REDUCE_BF16 };
enum { COMPUTE_WEIGHTS_KEEP, COMPUTE_WEIGHTS_PER_LAYER };

typedef struct {
    char preset[32];
    /* model */
    int vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_dim, seq_len, tie_embeddings;
    float rope_theta, norm_eps, init_std;
    /* training */
    int batch_size, total_batch_tokens, max_steps, warmup_steps, lr_schedule, seed;
    int optimizer, adamw8bit_min_numel;
    float lr, min_lr_ratio, weight_decay, beta1, beta2, adam_eps, grad_clip;
    /* data */
    char train_data[1024], val_data[1024];
    int eval_every, eval_tokens, eval_batches;   /* eval_batches: deprecated, 0 unless given (config_eval_sequences) */
    /* system */
    int device, precision, recompute, compute_weights;
    float loss_scale_init;
    int max_skipped_steps;
    /* parallel (parallel/, comm/) */
    int dp, tp, cp, pp, pp_schedule, zb1_memory, pp_virtual, comm_backend, zero, grad_reduce_dtype, nproc, comm_ablate, sequence_parallel;
    char pp_layers[256], fault[256], profile_out[1024];
    float bucket_mb, comm_timeout_s, straggler_pct;
    /* sampling */
    int sample_every, sample_tokens, top_k;
    float temperature;
    char sample_prompt[1024], tokenizer[1024];
    /* logging */
    int log_every, memory_report;
    char log_jsonl[1024], run_dir[1024];
    /* checkpoints (checkpoint/checkpoint.h) */
    int checkpoint_every, keep_checkpoints, resume;
    char init_from[1024];
    int warmup_clamped_from;   /* not a key: the warmup_steps asked for when the parser cut it to max_steps (0 = not cut) */
} Config;

typedef enum { FIELD_INT, FIELD_FLOAT, FIELD_BOOL, FIELD_STRING, FIELD_CHOICE } FieldType;

typedef struct {
    const char *name;
    FieldType type;
    size_t offset;          /* into Config */
    size_t size;            /* bytes of a FIELD_STRING buffer */
    const char *default_value;
    double min, max;        /* FIELD_INT / FIELD_FLOAT range */
    const char *choices;    /* FIELD_CHOICE: "a|b|c", stored as the index */
    const char *section;
    const char *help;
} ConfigField;

extern const ConfigField config_fields[];
extern const int config_n_fields;

/* Defaults, then the preset (from the file or the command line; the command
 * line wins), then the --config file, then --key=value overrides; then
 * config_validate. Fails with one clear message on any bad input (the _try_
 * version returns it, the other dies with it: common/util.h). Arguments that
 * are not --key=value are an error. The --config file must be a regular text
 * file of at most 1 MiB. */
int config_try_parse_args(Config *c, int argc, char **argv, char *err, size_t err_size);
void config_parse_args(Config *c, int argc, char **argv);
/* Set one field from text; returns 0, or -1 with a message in err. */
int config_set(Config *c, const char *key, const char *value, char *err, size_t err_size);
/* A subcommand's option that is also a numeric config key (temperature, top_k,
 * seed): read with that key's bounds through option_number, or die naming cmd. */
double config_number_or_die(const char *cmd, const char *key, const char *value);
/* Apply a preset's fields; returns -1 for an unknown preset name. */
int config_apply_preset(Config *c, const char *name);
void config_defaults(Config *c);
/* Cross-field checks (dim % n_heads, ...); fails naming the keys. */
int config_try_validate(const Config *c, char *err, size_t err_size);
void config_validate(const Config *c);
/* One field's value as text. */
void config_format(const Config *c, const ConfigField *f, char *out, size_t size);
void config_print_help(FILE *out);
/* The startup table: every field, its value, and '*' where it differs from the default. */
void config_print_table(const Config *c, FILE *out);
/* "key=value\n" lines for every field (the checkpoint header); config_set reads them back. */
size_t config_write_text(const Config *c, char *out, size_t size);
const ConfigField *config_find(const char *key);
/* Derived values. */
int config_head_dim(const Config *c);
/* Micro-batches each data-parallel rank runs per step: total_batch_tokens / (batch_size*seq_len*dp). */
int config_grad_accum_steps(const Config *c);
/* Validation sequences an evaluation scores (before the val split's size caps it): eval_tokens/seq_len,
 * at least 1; eval_batches x batch_size where the deprecated eval_batches is given. */
long config_eval_sequences(const Config *c);
/* The activation dtype of a precision: fp32, bf16 (bf16 and fp8: FP8 only multiplies, kernels/fp8.h) or fp16; as kernels/dtype.h's DType. */
int config_act_dtype(int precision);
/* "fp32", "bf16", "fp16" or "fp8". */
const char *config_precision_name(int precision);
