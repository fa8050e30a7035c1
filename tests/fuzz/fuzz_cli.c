/* tests/fuzz/fuzz_cli.c — the command line (train/config.h): --key=value
 * arguments through every field's value parser (ints, floats, bools, strings,
 * choices, presets) and the cross-field validation; and every value through
 * the number reader the subcommands share (option_number, common/options.h)
 * with the bounds of sample, plan, scale, prepare and the numeric config keys:
 * what it accepts must be a finite number in range (whole where asked) that is
 * all of the text (no '+', no hex), and what it refuses must say "KEY=VALUE: why";
 * and every value through the list reader (option_list): what it accepts has
 * no empty item, blank or item starting with '+'.
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
        FUZZ_ASSERT(*value && !isspace((unsigned char)*value) && *value != '+' && !strpbrk(value, "xX") && !*end && again == v && isfinite(v) && v >= lo && v <= hi &&
                    (!whole || v == floor(v)), "%s=%s accepted as %g outside [%g, %g] (whole %d) or not all of the text",
                    key, value, v, lo, hi, whole);
    } else {
        snprintf(want, sizeof want, "%s=%s: ", key, value);
        FUZZ_ASSERT(!strncmp(err, want, strlen(want)) && v == -12345, "%s=%s refused without naming it: %s", key, value, err);
    }
}

/* option_list's promise (pp_layers, logits --ids): what it accepts is 1 to max items, each one option_number
 * accepts, split at single commas: no empty item, no blank, no item starting with '+'. */
static void check_list(const char *key, const char *value) {
    char err[512];
    double v[8];
    int n = option_list(key, value, 0, 1e6, 1, v, 8, err, sizeof err), commas = 0;
    if (n < 0) {
        FUZZ_ASSERT(!strncmp(err, key, strlen(key)) && err[strlen(key)] == '=', "%s=%s refused without naming it: %s", key, value, err);
        return;
    }
    int signed_item = value[0] == '+';   /* a '+' starting an item; an exponent's sign (3e+4) is a number's own */
    for (const char *p = value; *p; p++) commas += *p == ',', signed_item |= p[0] == ',' && p[1] == '+';
    size_t len = strlen(value);
    FUZZ_ASSERT(n >= 1 && n <= 8 && commas == n - 1 && value[0] != ',' && value[len - 1] != ',' && !strstr(value, ",,") &&
                !signed_item && !strpbrk(value, " \t"), "%s=%s accepted as %d items", key, value, n);
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
        check_list(key, value);
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
