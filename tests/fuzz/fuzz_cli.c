/* tests/fuzz/fuzz_cli.c — the command line (train/config.h): --key=value
 * arguments through every field's value parser (ints, floats, bools, strings,
 * choices, presets) and the cross-field validation; and every value through
 * the number reader the subcommands share (option_number, common/options.h)
 * with the bounds of sample, plan, scale, prepare and the numeric config keys:
 * what it accepts must be a finite number in range (whole where asked) that is
 * all of the text, and what it refuses must say "KEY=VALUE: why".
 *
 * Input: arguments separated by newlines (at most 16; --config is skipped:
 * fuzz_ini.c covers files). */
#include "fuzz.h"
#include "../../common/options.h"
#include "../../train/config.h"
#include <ctype.h>
#include <math.h>

/* option_number's promise for one value under one set of bounds. */
static void check_number(const char *key, const char *value, double lo, double hi, int whole) {
    char err[512], want[256];
    double v = -12345;
    if (option_number(key, value, lo, hi, whole, &v, err, sizeof err) == 0) {
        char *end;
        double again = strtod(value, &end);
        FUZZ_ASSERT(*value && !isspace((unsigned char)*value) && !*end && again == v && isfinite(v) && v >= lo && v <= hi &&
                    (!whole || v == floor(v)), "%s=%s accepted as %g outside [%g, %g] (whole %d) or not all of the text",
                    key, value, v, lo, hi, whole);
    } else {
        snprintf(want, sizeof want, "%s=%s: ", key, value);
        FUZZ_ASSERT(!strncmp(err, want, strlen(want)) && v == -12345, "%s=%s refused without naming it: %s", key, value, err);
    }
}

/* The bounds the subcommands read their numbers with (train/sample.c, plan.c, scale.c, data/prepare.c). */
static const struct { const char *key; double lo, hi; int whole; } subcommand_keys[] = {
    {"tokens", 1, 2147483647.0, 1}, {"gpus", 1, 65536, 1}, {"gpu_mem_gib", 0.001, 1e6, 0}, {"link", 0.001, 1e6, 0},
    {"top", 1, 4096, 1}, {"steps", 1, 64, 1}, {"train_vocab", 257, 1 << 20, 1}, {"val_fraction", 0, 0.9, 0},
    {"shard_tokens", 1, 257698037760.0, 1}, {"micro_batches", 1, 100000, 1}};

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), *argv[18] = {"train"}, err[4096];
    memcpy(text, data, size);
    text[size] = 0;
    int argc = 1;
    for (char *p = text, *nl; p && argc < 17; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (strncmp(p, "--config", 8) != 0) argv[argc++] = p;
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) {   /* each value through the shared number reader */
        char key[64];
        const char *value = option_split(argv[i], key, sizeof key);
        if (!value) continue;
        const ConfigField *f = config_find(key);
        if (f && (f->type == FIELD_INT || f->type == FIELD_FLOAT)) check_number(key, value, f->min, f->max, f->type == FIELD_INT);
        for (size_t k = 0; k < sizeof subcommand_keys / sizeof subcommand_keys[0]; k++)
            if (!strcmp(key, subcommand_keys[k].key) || (k == 0 && !f))   /* an unknown key: read as a count anyway */
                check_number(key, value, subcommand_keys[k].lo, subcommand_keys[k].hi, subcommand_keys[k].whole);
    }
    Config c;
    if (config_try_parse_args(&c, argc, argv, err, sizeof err) == 0)
        FUZZ_ASSERT(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0 && (long)c.batch_size * c.seq_len <= 2147483647L &&
                    c.adam_eps >= (float)CONFIG_MIN_ADAM_EPS, "accepted dim %d n_heads %d n_kv_heads %d batch %d x %d adam_eps %g",
                    c.dim, c.n_heads, c.n_kv_heads, c.batch_size, c.seq_len, c.adam_eps);
    free(text);
    return 0;
}
