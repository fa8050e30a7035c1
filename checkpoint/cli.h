/* checkpoint/cli.h — the `train` program's checkpoint verbs.
 *
 *   build/train export --checkpoint=DIR --out=DIR [--dtype=f32|bf16|f16]
 *       a checkpoint folder (or a run_dir: its newest checkpoint) -> Hugging Face folder
 *   build/train inspect PATH
 *       a checkpoint folder, state.bin, run_dir, HF folder or .safetensors file:
 *       header, config, run state, tensor table with CRC checks; exit 1 on damage
 *   build/train inspect --row_norms=NAME PATH
 *       one tensor of an llm3d checkpoint: its rows' L2 norms, largest, mean, smallest
 *   build/train logits --model=DIR --ids=1,2,3 --out=FILE
 *       runs the model of an HF folder or a checkpoint on one sequence (CPU, fp32)
 *       and writes its logits: 256 x int32 header (magic LOGITS_MAGIC, version 1,
 *       T, V), then T int32 ids, then T x V float32 logits
 * Each takes argv with argv[0] = the verb and returns the exit code. */
#pragma once
#include "../model/llama.h"
#include <stdio.h>

#define LOGITS_MAGIC 0x5354474c    /* "LGTS" little-endian */

int checkpoint_export_main(int argc, char **argv);
int checkpoint_inspect_main(int argc, char **argv);
/* One line to out: the L2 norms of tensor name's rows (ckpt_entry_dims' rows) in a checkpoint folder or
 * state.bin: the largest and its row, the mean, the smallest and its row (checkpoint/row_norms.c).
 * 0, or 1 with one line on stderr (no such tensor: naming it and how to list them; a damaged file). */
int checkpoint_row_norms(const char *path, const char *name, FILE *out);
int checkpoint_logits_main(int argc, char **argv);
/* A one-sequence CPU model (micro-batch 1 x T; T = 0: the model's seq_len) with
 * the weights of a Hugging Face folder, a checkpoint folder or a run_dir's newest. */
void checkpoint_load_model(const char *dir, Model *m, int T);
