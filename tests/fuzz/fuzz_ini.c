/* tests/fuzz/fuzz_ini.c — a --config file (train/config.h): sections, comments,
 * "key = value" lines of any length, presets, every value parser, then the
 * cross-field validation.
 *
 * Input: the file's text. */
#include "fuzz.h"
#include "../../train/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128], arg[160], err[4096];
    fuzz_write("run.ini", data, size, path, sizeof path);
    snprintf(arg, sizeof arg, "--config=%s", path);
    char *argv[] = {"train", arg, NULL};
    Config c;
    if (config_try_parse_args(&c, 2, argv, err, sizeof err) == 0)
        FUZZ_ASSERT(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0 && c.norm_eps > 0 && c.rope_theta >= 1,
                    "accepted dim %d n_heads %d n_kv_heads %d norm_eps %g rope_theta %g", c.dim, c.n_heads, c.n_kv_heads,
                    (double)c.norm_eps, (double)c.rope_theta);
    return 0;
}
