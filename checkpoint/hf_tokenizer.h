/* checkpoint/hf_tokenizer.h — the vocabulary beside an exported model: llm3d's
 * tokenizer.bin, and the same vocabulary as Hugging Face's tokenizer.json.
 *
 * The idea: llm3d's tokenizer is GPT-2's algorithm (the same pre-tokenization
 * regex, byte-level BPE applied by merge rank), so Hugging Face's `tokenizers`
 * reproduces it from a tokenizer.json that holds each token's bytes in GPT-2's
 * byte-to-unicode alphabet, the merges in rank order and <|endoftext|> as a
 * special token. `build/train export` writes both files (and
 * tokenizer_config.json, generation_config.json naming the end-of-text id)
 * beside model.safetensors, so the weights travel with the vocabulary they
 * were trained on. */
#pragma once
#include <stddef.h>

/* The vocabulary of the run whose checkpoint config text is given: its
 * `tokenizer` key, else tokenizer.bin beside the first shard of `train_data`
 * (paths as the run saw them). Writes the path to out; returns 0 if that file
 * exists, -1 if not (out then names where it looked). */
int hf_find_tokenizer(const char *config_text, char *out, size_t size);
/* Writes out_dir/tokenizer.bin (llm3d's format), tokenizer.json,
 * tokenizer_config.json and generation_config.json from the vocabulary at
 * path; max_length is the model's context. Dies naming the file on a problem. */
void hf_export_tokenizer(const char *path, const char *out_dir, int max_length);
