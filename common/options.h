/* common/options.h — command-line keys, read the same way by every subcommand.
 *
 * The idea: a key is one word however it is spelled on the command line:
 * "--train-vocab=8" and "--train_vocab=8" are the same key (train, prepare,
 * sample, export and logits all read keys through option_split), and a key
 * nobody knows gets one suggestion, chosen the way a person would: a known
 * key containing what was typed first (--steps -> max_steps), then one
 * sharing a word with it (--num_layers -> n_layers), else the fewest edits. */
#pragma once
#include <stddef.h>

/* arg = "--key=value": writes the key, every '-' made '_', to key (key_size
 * bytes) and returns the value; NULL when arg is not of that form. */
const char *option_split(const char *arg, char *key, size_t key_size);
/* The known name (names[0..n)) nearest to the typed key, by the rule above. */
const char *option_suggest(const char *typed, const char *const *names, int n);
