/* tests/test_sample.c — from text to generated text with the real binary:
 * prepare a small sample of the corpus with a learned vocabulary, train a tiny
 * model a few steps with a sample at the end, then `build/train sample` from
 * its checkpoint: deterministic for a seed, and clear errors for a missing
 * model, a missing or wrong vocabulary, a prompt longer than the context and
 * bad options. Also sample_token's temperature-0 and top-k rules, and that
 * decode steps wake no OpenMP team. */
#include "test.h"
#include "../common/util.h"
#include "../train/sample.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char train_bin[512], dir[256], out[1 << 16];

static int run(const char *args) { return test_run(train_bin, args, out, sizeof out); }
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

static void test_sample_token(void) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f, 1.95f};
    Rng r;
    rng_seed(&r, 1);
    CHECK(sample_token(logits, 6, 0.0f, 0, &r) == 1, "temperature 0 takes the most likely token");
    int seen[6] = {0};
    for (int i = 0; i < 2000; i++) seen[sample_token(logits, 6, 1.0f, 3, &r)]++;
    CHECK(seen[0] == 0 && seen[2] == 0 && seen[4] == 0, "top_k=3 never draws outside the 3 largest (%d %d %d)", seen[0], seen[2], seen[4]);
    CHECK(seen[1] > 0 && seen[3] > 0 && seen[5] > 0, "top_k=3 draws each of the 3 largest");
}

/* Threads of this process, from /proc/self/status; 0 if unreadable. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

/* Decode steps are small: they must run on the calling thread and wake no
 * OpenMP team (kernels/cpu/parallel.h), or every token waits at barriers for
 * threads a busy machine has not scheduled. OpenMP starts its team's threads
 * at the first parallel region that uses them, so the process's thread count
 * tells: one after 200 decode steps of the tiny preset's shape; two once a
 * training-sized op has run. Must run before anything else in this process. */
static void test_decode_threads(void) {
    omp_set_num_threads(2);
    ModelConfig mc = {.vocab_size = 4096, .dim = 128, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 352,
                      .seq_len = 256, .rope_theta = 10000, .norm_eps = 1e-5f};
    Comm comm;
    comm_init_one(&comm);
    Model m;
    model_create(&m, &mc, backend_cpu(), &comm, NULL, 1, mc.seq_len, RECOMPUTE_NONE);
    model_init_weights(&m, 7, 0.02f);
    int before = process_threads(), id = 1;
    const float *logits = model_decode(&m, &id, 1, 0);
    for (int pos = 1; pos < 200; pos++) {
        id = sample_token(logits, mc.vocab_size, 0.0f, 0, NULL);
        logits = model_decode(&m, &id, 1, pos);
    }
    int after = process_threads();
    CHECK(before == 1 && after == 1, "200 decode steps woke no OpenMP team: threads %d before, %d after", before, after);
    size_t n = (size_t)1 << 21;
    float *a = callocCheck(n, sizeof(float));
    backend_cpu()->add(a, a, a, n);
    CHECK(process_threads() == 2, "a training-sized op (a 2M-element add) still runs on 2 threads: %d", process_threads());
    free(a);
    model_free(&m);
    comm_free(&comm);
}

int main(void) {
    test_decode_threads();
    test_sample_token();
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train_bin, sizeof train_bin, "%s/train", build);
    snprintf(dir, sizeof dir, "/tmp/llm3d_sample_%d", (int)getpid());
    char args[2048], cmd[600];
    int rc = run(ARGS("prepare --input=tests/data/sotu_sample.txt --out=%s/data --train-vocab=300 --val-fraction=0", dir));
    CHECK(rc == 0, "prepare the sample text (rc %d):\n%s", rc, out);
    CHECK(strstr(out, "train on them with: build/train --train_data='") && strstr(out, "/data/train_*.bin' --val_data= ["),
          "prepare prints the keys to train on its shards, no val_data without a validation split:\n%s", out);
    /* an unprompted sample starts at a document boundary: the end-of-text id prepare puts before every
     * document (a learned vocabulary reserves its last id for it; GPT-2's is 50256) */
    char tok_path[400];
    snprintf(tok_path, sizeof tok_path, "%s/data/tokenizer.bin", dir);
    Tokenizer *tok = tokenizer_load(tok_path);
    int *ids, eot = tokenizer_eot(tok);
    int n = sample_encode_prompt(tok, "", 32, &ids);
    CHECK(n == 1 && ids[0] == eot && eot == tokenizer_vocab_size(tok) - 1, "empty prompt: just the end-of-text id %d (got %d ids, %d)", eot, n, ids[0]);
    free(ids);
    n = sample_encode_prompt(tok, "Congress", 32, &ids);
    CHECK(n > 1 && ids[0] == eot, "a prompt follows the end-of-text id, as a document does in the shards");
    free(ids);
    tokenizer_free(tok);
    const char *model = "--dim=32 --n_layers=1 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=32 --batch_size=4 --val_data=";
    rc = run(ARGS("%s --train_data=%s/data/train_*.bin --max_steps=5 --warmup_steps=1 --run_dir=%s/run --sample_tokens=20 "
                  "--sample_prompt=Congress", model, dir, dir));
    CHECK(rc == 0 && strstr(out, "sample | step 5") && strstr(out, "---\nCongress"), "training ends with a sample after the prompt (rc %d):\n%s", rc, out);

    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/tokenizer.bin --prompt=The --tokens=15 --seed=3", dir, dir));
    static char first[sizeof out];
    memcpy(first, out, sizeof out);
    CHECK(rc == 0 && !strncmp(out, "The", 3) && strlen(out) > 4, "sample from the checkpoint (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/tokenizer.bin --prompt=The --tokens=15 --seed=3 --top-k=40", dir, dir));
    CHECK(rc == 0 && !strcmp(out, first), "the same seed gives the same text (--top-k=40 is --top_k=40, the default)");

    rc = run(ARGS("sample --model=%s/nothing --tokenizer=%s/data/tokenizer.bin", dir, dir));
    CHECK(rc == 1 && strstr(out, "error:"), "missing model: a clear error (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/none.bin", dir, dir));
    CHECK(rc == 1 && strstr(out, "cannot open vocabulary") && strstr(out, "--tokenizer"), "missing vocabulary (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/train_000.bin", dir, dir));
    CHECK(rc == 1 && strstr(out, "error:") && strstr(out, "train_000.bin"), "a shard given as the vocabulary (rc %d):\n%s", rc, out);
    char longp[400];
    memset(longp, 'x', sizeof longp);
    for (int i = 0; i < (int)sizeof longp - 1; i += 2) longp[i] = ' ';
    longp[sizeof longp - 1] = 0;
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/tokenizer.bin '--prompt=%s'", dir, dir, longp));
    CHECK(rc == 1 && strstr(out, "the context (seq_len) holds 32"), "a prompt longer than the context (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokens=-4", dir));
    CHECK(rc == 1 && strstr(out, "tokens=-4: is out of range [1, 2147483647]"), "bad --tokens (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --colour=red", dir));
    CHECK(rc == 1 && strstr(out, "unknown option '--colour'"), "unknown option (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --k=5", dir));
    CHECK(rc == 1 && strstr(out, "unknown option '--k' (did you mean --top_k?)"), "unknown option, suggestion (rc %d):\n%s", rc, out);
    rc = run(ARGS("%s --train_data=%s/data/train_*.bin --max_steps=2 --warmup_steps=1 --run_dir=%s/run2 --sample_tokens=5 "
                  "--tokenizer=%s/none.bin", model, dir, dir, dir));
    CHECK(rc == 1 && strstr(out, "cannot open vocabulary") && !strstr(out, "step "), "a missing vocabulary stops the run before training (rc %d):\n%s", rc, out);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}
