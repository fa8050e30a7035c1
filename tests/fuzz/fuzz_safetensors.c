/* tests/fuzz/fuzz_safetensors.c — a Hugging Face folder (checkpoint/hf.h):
 * config.json, model.safetensors's header, tensor table and data, `inspect`,
 * and loading the weights into the model config.json describes (when small).
 *
 * Input: 2-byte length, config.json, then model.safetensors (fuzz.h: fuzz_split). */
#include "fuzz.h"
#include "../../checkpoint/hf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *config, *st;
    size_t n_config, n_st;
    fuzz_split(data, size, &config, &n_config, &st, &n_st);
    char path[128], err[4096];
    fuzz_write("config.json", config, n_config, path, sizeof path);
    fuzz_write("model.safetensors", st, n_st, path, sizeof path);
    hf_inspect(path, fuzz_devnull());
    ModelConfig mc;
    if (hf_read_config(fuzz_dir, &mc, err, sizeof err) != 0) return 0;
    FUZZ_ASSERT(model_config_check(&mc, err, sizeof err) == 0, "hf_read_config accepted what model_config_check refuses: %s", err);
    if (model_count_params(&mc) > (1 << 16) || mc.seq_len > 64) return 0;   /* big models: slow, and config.json alone is covered */
    Model m;
    Comm comm;
    comm_init_one(&comm);
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 2, RECOMPUTE_NONE);
    hf_check_config(fuzz_dir, &mc, err, sizeof err);
    hf_load_weights(fuzz_dir, &m, err, sizeof err);
    model_free(&m);
    comm_free(&comm);
    return 0;
}
