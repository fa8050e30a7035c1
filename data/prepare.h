/* data/prepare.h — `build/train prepare`: a file or folder of text -> token shards.
 *
 * The idea: one deterministic pass from raw text to what the loader reads.
 * Documents (one per file, further split at the literal "<|endoftext|>") are
 * tokenized with GPT-2's or an own vocabulary, each preceded by the
 * end-of-text id, held out by document into a validation split, and written as
 * OUTDIR/train_NNN.bin and OUTDIR/val_NNN.bin (data/shard.h) beside
 * OUTDIR/tokenizer.bin, the vocabulary that made them. `prepare --help` lists
 * the options. */
#pragma once

/* argv[0] is "prepare"; options are --key=value. Returns 0, or exits non-zero
 * through die() with a one-line reason. */
int prepare_main(int argc, char **argv);
