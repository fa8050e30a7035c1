/* tests/fuzz/fuzz_safetensors.c — a Hugging Face folder (checkpoint/hf.h):
 * config.json, model.safetensors's header, tensor table and data, `inspect`,
 * and loading the weights into the model config.json describes (when small).
 * The two must agree with each other and with any other JSON reader: what the
 * JSON reader accepts names each key of an object once (Python's json takes the
 * last of two, a first-match lookup the first) and hands out no string holding
 * a NUL as a C string; weights that load also inspect clean, are finite, and
 * come from a file holding the model's tensors and no others.
 *
 * Input: 2-byte length, config.json, then model.safetensors (fuzz.h: fuzz_split). */
#include "fuzz.h"
#include <math.h>
#include "../../checkpoint/hf.h"
#include "../../checkpoint/json.h"

/* If json_parse accepts text, no object of it gives a key twice (compared decoded, small objects). */
static void check_keys_once(const char *text, size_t n) {
    Json j;
    char err[512], a[256], b[256];
    if (json_parse(&j, text, n, err, sizeof err) != 0) return;
    for (int o = 0; o < j.n; o++) {
        if (j.nodes[o].type != JSON_OBJECT || j.nodes[o].n_children > 128) continue;
        for (int k = j.nodes[o].first; k >= 0; k = j.nodes[j.nodes[k].next].next) {
            int rk = json_string(&j, k, a, sizeof a);
            if (rk != 0) continue;   /* too long, or holding a NUL (-2): never handed out as a C string */
            for (int q = j.nodes[o].first; q != k; q = j.nodes[j.nodes[q].next].next)
                FUZZ_ASSERT(json_string(&j, q, b, sizeof b) != 0 || strcmp(a, b), "key \"%s\" accepted twice in one object", a);
        }
    }
    json_free(&j);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc, (void)argv; fuzz_init(); return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *config, *st;
    size_t n_config, n_st;
    fuzz_split(data, size, &config, &n_config, &st, &n_st);
    char path[128], err[4096];
    fuzz_write("config.json", config, n_config, path, sizeof path);
    fuzz_write("model.safetensors", st, n_st, path, sizeof path);
    hf_inspect(path, fuzz_devnull());
    int inspected = hf_inspect_ex(path, 1, fuzz_devnull());   /* a tensor no loader reads (rotary_emb.inv_freq) may hold NaN */
    check_keys_once((const char *)config, n_config);
    uint64_t header = 0;
    for (int i = 0; i < 8 && (size_t)i < n_st; i++) header |= (uint64_t)st[i] << (8 * i);
    if (n_st >= 8 && header <= n_st - 8 && header <= (1 << 16)) check_keys_once((const char *)st + 8, (size_t)header);
    ModelConfig mc;
    if (hf_read_config(fuzz_dir, &mc, err, sizeof err) != 0) return 0;
    FUZZ_ASSERT(model_config_check(&mc, err, sizeof err) == 0, "hf_read_config accepted what model_config_check refuses: %s", err);
    if (model_count_params(&mc) > (1 << 16) || mc.seq_len > 64) return 0;   /* big models: slow, and config.json alone is covered */
    Model m;
    Comm comm;
    comm_init_one(&comm);
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, 2, RECOMPUTE_NONE);
    hf_check_config(fuzz_dir, &mc, err, sizeof err);
    float *host = malloc((m.n_params + 1) * sizeof(float));
    if (hf_read_weights(fuzz_dir, &m, host, err, sizeof err) == 0) {
        FUZZ_ASSERT(inspected == 0, "weights that load do not inspect clean (--allow_nonfinite=1)");
        /* what loads is finite, and the file held the model's tensors and no others */
        for (size_t i = 0; i < m.n_params; i++) FUZZ_ASSERT(isfinite(host[i]), "non-finite value loaded at %zu", i);
            const char *h = (const char *)st + 8;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)st[i] << (8 * i);
        Json hj;
        char perr[256];
        if (json_parse(&hj, h, (size_t)len, perr, sizeof perr) == 0) {
            for (int k = hj.nodes[0].first; k >= 0; k = hj.nodes[hj.nodes[k].next].next) {
                char name[256];
                if (json_string(&hj, k, name, sizeof name) != 0 || !strcmp(name, "__metadata__") || strstr(name, "rotary_emb.inv_freq")) continue;
                FUZZ_ASSERT(model_find_tensor(&m, name) != NULL, "tensor '%s' accepted, which config.json has no place for", name);
            }
            json_free(&hj);
        }
    }
    free(host);
    model_free(&m);
    comm_free(&comm);
    return 0;
}
