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
/* The one number reader of every key, the config table's and each subcommand's:
 * the whole of value a finite number in [lo, hi], a whole one when whole is set.
 * Refused: empty, leading blanks, a '+', hex, trailing junk, nan, inf, overflow (1e309),
 * fractions where a count is wanted, out of range. 0 and *out set, or -1 with
 * "KEY=VALUE: why" in err. */
int option_number(const char *key, const char *value, double lo, double hi, int whole, double *out, char *err, size_t err_size);
/* A comma list of numbers, each read by option_number ("4,4,3"): at most max of them into out.
 * Refused: an empty list, an empty item (a trailing, leading or doubled comma), blanks, '+', and
 * every refusal of option_number. Returns the count, or -1 with "KEY=VALUE: why" in err. */
int option_list(const char *key, const char *value, double lo, double hi, int whole, double *out, int max, char *err, size_t err_size);
/* option_number for a subcommand: on a bad value dies "CMD: KEY=VALUE: why" and a hint. */
double option_number_or_die(const char *cmd, const char *key, const char *value, double lo, double hi, int whole);
/* The known name (names[0..n)) nearest to the typed key, by the rule above. */
const char *option_suggest(const char *typed, const char *const *names, int n);
