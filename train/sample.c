/* train/sample.c — temperature / top-k sampling over the KV-cache decode. */
#include "sample.h"
#include "../checkpoint/cli.h"
#include "../common/options.h"
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng) {
    int best = 0;
    for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    if (temperature <= 0) return best;
    /* the k-th largest logit is the cut-off (ties kept): a partial selection on a copy */
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *tmp = mallocCheck(sizeof(float) * V);
        memcpy(tmp, logits, sizeof(float) * V);
        int lo = 0, hi = V - 1, k = top_k - 1;          /* quickselect for descending order */
        while (lo < hi) {
            float pivot = tmp[(lo + hi) / 2];
            int i = lo, j = hi;
            while (i <= j) {
                while (tmp[i] > pivot) i++;
                while (tmp[j] < pivot) j--;
                if (i <= j) { float t = tmp[i]; tmp[i] = tmp[j]; tmp[j] = t; i++; j--; }
            }
            if (k <= j) hi = j; else if (k >= i) lo = i; else break;
        }
        cut = tmp[k];
        free(tmp);
    }
    double sum = 0;
    for (int v = 0; v < V; v++) if (logits[v] >= cut) sum += exp((logits[v] - logits[best]) / temperature);
    double r = rng_uniform(rng) * sum;
    for (int v = 0; v < V; v++) {
        if (logits[v] < cut) continue;
        r -= exp((logits[v] - logits[best]) / temperature);
        if (r <= 0) return v;
    }
    return best;
}

int sample_encode_prompt(const Tokenizer *tok, const char *prompt, int seq_len, int **ids) {
    uint32_t *enc = NULL;
    size_t cap = 0, n = tokenizer_encode(tok, (const uint8_t *)prompt, strlen(prompt), &enc, &cap);
    *ids = mallocCheck(sizeof(int) * (n + 1));
    int count = 0;
    (*ids)[count++] = tokenizer_eot(tok);          /* every document starts after end-of-text, as in training */
    for (size_t i = 0; i < n; i++) (*ids)[count++] = (int)enc[i];
    free(enc);
    if (count >= seq_len)
        die("the sample prompt is %d tokens but the context (seq_len) holds %d, leaving no room to generate\n"
            "  hint: shorten sample_prompt to fewer than %d tokens", count, seq_len, seq_len - 1);
    return count;
}

static void put_token(const Tokenizer *tok, int id, FILE *out) {
    size_t len;
    const uint8_t *bytes = tokenizer_token(tok, (uint32_t)id, &len);
    if (bytes && id != tokenizer_eot(tok)) fwrite(bytes, 1, len, out);
}

int sample_generate(Model *m, const Tokenizer *tok, const char *prompt, const SampleOptions *o, Rng *rng, FILE *out) {
    int *ids;
    int n = sample_encode_prompt(tok, prompt, m->T, &ids);
    for (int i = 1; i < n; i++) put_token(tok, ids[i], out);
    const float *logits = model_decode(m, ids, n, 0);
    int pos = n, made = 0;
    while (made < o->max_tokens && pos < m->T) {
        int next = sample_token(logits, m->V, o->temperature, o->top_k, rng);
        made++;
        if (next == tokenizer_eot(tok)) break;
        put_token(tok, next, out);
        fflush(out);
        logits = model_decode(m, &next, 1, pos++);
    }
    free(ids);
    return made;
}

/* ---- build/train sample ---------------------------------------------------------------- */

static const char *sample_usage =
    "usage: build/train sample --model=DIR [--prompt=TEXT] [--tokens=200] [--temperature=0.8] [--top_k=40]\n"
    "                          [--seed=1] [--tokenizer=FILE]\n"
    "  DIR: a checkpoint folder, a run_dir (its newest checkpoint) or a Hugging Face folder\n"
    "  FILE: the vocabulary; by default DIR/tokenizer.bin (export writes it there), else data/corpus/tokenizer.bin\n"
    "  generates text on the CPU through the KV cache; stops at --tokens, end-of-text or a full context\n";

int sample_main(int argc, char **argv) {
    const char *model = NULL, *prompt = "", *tok_path = NULL;
    SampleOptions o = {.temperature = 0.8f, .top_k = 40, .max_tokens = 200};
    long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) { printf("%s", sample_usage); return 0; }
        char key[64];
        const char *v = option_split(a, key, sizeof key);
        if (!v) die("sample: '%s' is not --key=value\n%s", a, sample_usage);
        if (!strcmp(key, "model")) model = v;
        else if (!strcmp(key, "prompt")) prompt = v;
        else if (!strcmp(key, "tokenizer")) tok_path = v;
        /* the bounds of the training keys of the same names (train/config.c), through the same reader */
        else if (!strcmp(key, "tokens")) o.max_tokens = (int)option_number_or_die("sample", key, v, 1, 2147483647.0, 1);
        else if (!strcmp(key, "temperature")) o.temperature = (float)config_number_or_die("sample", key, v);
        else if (!strcmp(key, "top_k")) o.top_k = (int)config_number_or_die("sample", key, v);
        else if (!strcmp(key, "seed")) seed = (long)config_number_or_die("sample", key, v);
        else {
            static const char *const known[] = {"model", "prompt", "tokenizer", "tokens", "temperature", "top_k", "seed"};
            die("sample: unknown option '--%s' (did you mean --%s?)\n%s", key, option_suggest(key, known, 7), sample_usage);
        }
    }
    if (!model) die("sample: --model=DIR is required\n%s", sample_usage);
    char beside[1100];
    snprintf(beside, sizeof beside, "%s/tokenizer.bin", model);
    if (!tok_path && access(beside, R_OK) == 0) tok_path = beside;   /* an exported folder carries its vocabulary */
    if (!tok_path) tok_path = "data/corpus/tokenizer.bin";
    char err[1400];
    int64_t tok_bytes;
    int probe = open_regular(tok_path, "vocabulary", &tok_bytes, err, sizeof err);   /* never blocks on a FIFO */
    if (probe < 0) die("sample: %s\n  hint: pass --tokenizer=PATH (prepare writes OUTDIR/tokenizer.bin)", err);
    close(probe);
    Tokenizer *tok = tokenizer_load(tok_path);
    Model m;
    checkpoint_load_model(model, &m, 0);
    if (tokenizer_vocab_size(tok) > m.V)
        die("sample: the vocabulary '%s' has %d tokens but the model only %d: it is not the one the model was trained with",
            tok_path, tokenizer_vocab_size(tok), m.V);
    Rng rng;
    rng_seed(&rng, (uint64_t)seed);
    sample_generate(&m, tok, prompt, &o, &rng, stdout);
    printf("\n");
    model_free(&m);
    tokenizer_free(tok);
    return 0;
}
