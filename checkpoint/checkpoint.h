/* checkpoint/checkpoint.h — run checkpoints: save, find the newest complete one, resume.
 *
 * The idea: a checkpoint is a folder <run_dir>/ckpt_<step, 8 digits>/ holding
 * state.bin (checkpoint/format.h: weights, optimizer state, run state, config)
 * and DONE, the completion marker. It is written as ckpt_<step>.tmp/ — state.bin
 * through a temporary name, flushed and fsync'ed; then DONE, the same way; the
 * folder is fsync'ed and renamed into place, and run_dir is fsync'ed. Only a
 * folder named ckpt_<step> that holds DONE counts, so a crash at any moment
 * leaves every earlier checkpoint as it was, and resume takes the newest
 * complete one. After a save, all but the newest keep_checkpoints are removed,
 * each DONE first, so a folder being removed never looks complete.
 *
 * Tensors are stored whole, by name: weights under their Hugging Face names,
 * optimizer state under "<prefix>/<weight name>" (AdamW: optimizer.adamw.m/...,
 * optimizer.adamw.v/...). A rank reads the rectangle of each tensor that its
 * ParamTensor says it holds (global shape, row0, col0), so a run saved under
 * one dp/tp/pp layout resumes under another.
 *
 * On resume the command line's config must agree with the checkpoint's on the
 * keys that fix the weights' meaning or the data order (checkpoint_fixed_keys:
 * vocab_size dim n_layers n_heads n_kv_heads ffn_dim tie_embeddings rope_theta
 * norm_eps seq_len seed); any other key (max_steps, lr, schedule, batch sizes,
 * eval, logging, device, precision, ...) may change and is reported. */
#pragma once
#include <stdio.h>
#include "format.h"
#include "../model/llama.h"

typedef struct {            /* a device buffer laid out like the model's parameter buffer */
    const char *prefix;     /* its tensors are stored as "<prefix>/<weight name>" */
    float *device;          /* (n_params) fp32 on the model's backend */
} CkptMirror;

/* What a save writes, whatever holds it: the whole model's tensors (names and
 * global shapes) for the weights and for each mirror, fetched whole one at a
 * time — from one rank's buffers, or assembled from many ranks' slices. */
typedef struct {
    const ParamTensor *tensors;   /* the whole model's table (global shapes) */
    int n_tensors;
    const char *const *prefixes;  /* (n_mirrors) prefixes[0] = NULL: the weights; then e.g. "optimizer.adamw.m" */
    int n_mirrors;
    void (*fetch)(void *ctx, int mirror, int tensor, float *dst /* global_rows x global_cols */);
    void *ctx;
    const char *extra_name;       /* NULL, or one more fp32 (rows, cols) tensor of the run's state, written last */
    const float *extra;           /* (extra_rows, extra_cols) e.g. precision=fp8's amax history (model/fp8.h) */
    int64_t extra_rows, extra_cols;
} CkptSource;

/* Keys that must match on resume; NULL-terminated. The first nine alone fix the weights' shapes and meaning. */
extern const char *const checkpoint_fixed_keys[];
#define CHECKPOINT_N_MODEL_KEYS 9

/* Writes <run_dir>/ckpt_<step>/ as described above and applies keep-last-k (keep 0 = keep all).
 * The new folder's path goes to saved (may be NULL). Dies naming the file on any failure;
 * earlier checkpoints are never touched by a failed save.
 * Test hook: LLM3D_CKPT_HOOK=kill:STEP:WHERE (WHERE = a byte count into state.bin, or
 * done | rename | retention) SIGKILLs the process at that point of the save of step STEP;
 * LLM3D_CKPT_HOOK=enospc:STEP:BYTES makes the write fail with "no space left" after BYTES. */
void checkpoint_write(const char *run_dir, int keep, const CkptSource *src, const CkptState *s, const char *config_text,
                      char *saved, size_t saved_size);
/* checkpoint_write of one rank holding the whole model: its weights and device mirrors. */
void checkpoint_save(const char *run_dir, int keep, const Model *m, const CkptMirror *mirrors, int n_mirrors,
                     const CkptState *s, const char *config_text, char *saved, size_t saved_size);
/* mkdir -p: dir and any missing parents; dies naming the folder that cannot be made. */
void checkpoint_make_folder(const char *dir);
/* The newest complete checkpoint folder in run_dir: returns its step and writes its path, or -1 if none. */
long long checkpoint_find_latest(const char *run_dir, char *path, size_t size);
/* Resume: checks the config against config_text (dies naming the first
 * contradicting key; verbose also prints every other key that changed), then
 * reads this rank's slice of every tensor of the weights (host[0]) and of each
 * prefix (host[1+k]) into host arrays laid out like m's buffer (n_params), and
 * the run state. Any layout reads any other's checkpoint this way. */
void checkpoint_read(const char *ckpt_dir, const Model *m, const char *const *prefixes, int n_prefixes, float **host, CkptState *s,
                     const char *config_text, int verbose);
/* checkpoint_read into the model's weights and device mirrors. */
void checkpoint_load(const char *ckpt_dir, Model *m, const CkptMirror *mirrors, int n_mirrors, CkptState *s, const char *config_text);
/* Weights only (init_from=<checkpoint folder>): checks only the model-shape keys. */
void checkpoint_load_weights(const char *ckpt_dir, Model *m, const char *config_text);
/* The same into host (n_params, laid out like m's buffer), the model untouched. */
void checkpoint_read_weights(const char *ckpt_dir, const Model *m, float *host, const char *config_text);
/* Whether the checkpoint at ckpt_dir belongs to the run config_text describes: the same
 * checkpoint_fixed_keys and train_data. Returns 1, or 0 with why (the first key that differs,
 * or why it cannot be read). A fresh start in a run_dir holding another run's checkpoints is
 * refused (train/checkpoints.c), so a new run never writes over another's. */
int checkpoint_same_run(const char *ckpt_dir, const char *config_text, char *why, size_t why_size);
/* Compares keys[] of two config texts. Returns 0, or -1 with a message naming the key in err. */
int checkpoint_check_config(const char *saved, const char *current, const char *const *keys, int n_keys, const char *file,
                            char *err, size_t err_size);
/* The value of key in "key=value\n" text; -1 if absent. */
int checkpoint_config_value(const char *text, const char *key, char *out, size_t size);
/* Two values of a config text alike: the same text, or the same float (1e-5 and an older
 * checkpoint's 9.99999975e-06). */
int checkpoint_same_value(const char *a, const char *b);
/* ModelConfig from a checkpoint's config text; -1 with a message if a key is missing. */
int checkpoint_model_config(const char *text, ModelConfig *mc, char *err, size_t err_size);
/* r's tensor table holds exactly the tensors the model mc has, each with its shape: the weights
 * by name, and each "<prefix>/" set of run state (optimizer moments) whole, besides precision=fp8's
 * history: 0, or -1 naming the first extra, missing or misshaped tensor. A config declaring fewer
 * layers, or a tied head, than the table stores is refused, never half read. */
int checkpoint_check_tensors(const CkptReader *r, const ModelConfig *mc, char *err, size_t err_size);
/* ckpt_open, the model config of its text and checkpoint_check_tensors: the one way a checkpoint is
 * opened to be loaded (resume, init_from, sample, logits, export, inspect). 0, or -1 with err (r closed). */
int checkpoint_open_model(CkptReader *r, const char *path, ModelConfig *mc, char *err, size_t err_size);
/* state.bin inside a checkpoint folder (or path itself when it is a file). */
void checkpoint_state_path(const char *path, char *out, size_t size);
/* Reads a tensor's rectangle for a ParamTensor-shaped slice; -1 with a message on a missing or misshaped tensor. */
int checkpoint_read_slice(CkptReader *r, const char *name, const ParamTensor *t, float *dst, char *err, size_t err_size);
/* Prints header, config, run state and the tensor table with each tensor's CRC
 * check, and checks the table against the config. Returns 0 when everything checks
 * out, 1 otherwise. A tensor holding NaN or inf is refused (naming its first bad
 * element) unless allow_nonfinite, which lists each tensor's count of them. */
int checkpoint_inspect(const char *path, FILE *out);
int checkpoint_inspect_ex(const char *path, int allow_nonfinite, FILE *out);
