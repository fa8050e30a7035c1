/* tests/fuzz/fuzz_cli.c — the command line (train/config.h): --key=value
 * arguments through every field's value parser (ints, floats, bools, strings,
 * choices, presets) and the cross-field validation.
 *
 * Input: arguments separated by newlines (at most 16; --config is skipped:
 * fuzz_ini.c covers files). */
#include "fuzz.h"
#include "../../train/config.h"

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
    Config c;
    if (config_try_parse_args(&c, argc, argv, err, sizeof err) == 0)
        FUZZ_ASSERT(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0 && (long)c.batch_size * c.seq_len <= 2147483647L,
                    "accepted dim %d n_heads %d n_kv_heads %d batch %d x %d", c.dim, c.n_heads, c.n_kv_heads, c.batch_size, c.seq_len);
    free(text);
    return 0;
}
