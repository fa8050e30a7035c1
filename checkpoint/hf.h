/* checkpoint/hf.h — Hugging Face LLaMA interop: model.safetensors + config.json.
 *
 * The idea: llm3d's parameter names already are the Hugging Face names and its
 * RoPE is HF's rotate-half, so export is a change of container, not of
 * numbers: each weight of a checkpoint is streamed into model.safetensors (fp32,
 * bf16 or fp16) beside a LlamaForCausalLM config.json, and import reads each
 * tensor back (any of the three dtypes) into this rank's slice, checking every
 * name, dtype, shape and byte range against the model first. lm_head.weight is
 * written only when the head is untied. */
#pragma once
#include <stdio.h>
#include "../model/llama.h"

/* checkpoint: a checkpoint folder or its state.bin; out_dir is created.
 * dtype: CKPT_F32 | CKPT_BF16 | CKPT_F16. Dies naming the file on any problem. */
void hf_export(const char *checkpoint, const char *out_dir, int dtype);
/* Reads dir/config.json. Returns 0, or -1 with a message naming the file and key. */
int hf_read_config(const char *dir, ModelConfig *mc, char *err, size_t err_size);
/* Compares an HF folder's config with the run's model; -1 with a message naming the key. */
int hf_check_config(const char *dir, const ModelConfig *run, char *err, size_t err_size);
/* Loads dir/model.safetensors into the model (this rank's slices). Returns 0, or -1
 * with a message naming the file and the tensor (missing, misshaped, bad dtype, out of bounds). */
int hf_load_weights(const char *dir, Model *m, char *err, size_t err_size);
/* The same into host (n_params, laid out like m's buffer), the model untouched. */
int hf_read_weights(const char *dir, const Model *m, float *host, char *err, size_t err_size);
/* Prints a safetensors file's tensor table; returns 0, or 1 if it is malformed or a float
 * tensor holds NaN or inf (named with its first bad element) — unless allow_nonfinite, which
 * lists each tensor's count of them. */
int hf_inspect(const char *path, FILE *out);
int hf_inspect_ex(const char *path, int allow_nonfinite, FILE *out);
