/* tests/test_sample.c — from text to generated text with the real binary:
 * prepare a small sample of the corpus with a learned vocabulary, train a tiny
 * model a few steps with a sample at the end, then `build/train sample` from
 * its checkpoint: deterministic for a seed, and clear errors for a missing
 * model, a missing or wrong vocabulary, a prompt longer than the context and
 * bad options. Also sample_token's temperature-0 and top-k rules. */
#include "test.h"
#include "../common/util.h"
#include "../train/sample.h"
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

int main(void) {
    test_sample_token();
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train_bin, sizeof train_bin, "%s/train", build);
    snprintf(dir, sizeof dir, "/tmp/llm3d_sample_%d", (int)getpid());
    char args[2048], cmd[600];
    int rc = run(ARGS("prepare --input=tests/data/sotu_sample.txt --out=%s/data --train-vocab=300 --val-fraction=0", dir));
    CHECK(rc == 0, "prepare the sample text (rc %d):\n%s", rc, out);
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
    CHECK(rc == 1 && strstr(out, "cannot read the vocabulary") && strstr(out, "--tokenizer"), "missing vocabulary (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/train_000.bin", dir, dir));
    CHECK(rc == 1 && strstr(out, "error:") && strstr(out, "train_000.bin"), "a shard given as the vocabulary (rc %d):\n%s", rc, out);
    char longp[400];
    memset(longp, 'x', sizeof longp);
    for (int i = 0; i < (int)sizeof longp - 1; i += 2) longp[i] = ' ';
    longp[sizeof longp - 1] = 0;
    rc = run(ARGS("sample --model=%s/run --tokenizer=%s/data/tokenizer.bin '--prompt=%s'", dir, dir, longp));
    CHECK(rc == 1 && strstr(out, "the context (seq_len) holds 32"), "a prompt longer than the context (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --tokens=-4", dir));
    CHECK(rc == 1 && strstr(out, "--tokens must be a positive whole number"), "bad --tokens (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --colour=red", dir));
    CHECK(rc == 1 && strstr(out, "unknown option '--colour'"), "unknown option (rc %d):\n%s", rc, out);
    rc = run(ARGS("sample --model=%s/run --k=5", dir));
    CHECK(rc == 1 && strstr(out, "unknown option '--k' (did you mean --top_k?)"), "unknown option, suggestion (rc %d):\n%s", rc, out);
    rc = run(ARGS("%s --train_data=%s/data/train_*.bin --max_steps=2 --warmup_steps=1 --run_dir=%s/run2 --sample_tokens=5 "
                  "--tokenizer=%s/none.bin", model, dir, dir, dir));
    CHECK(rc == 1 && strstr(out, "cannot be read") && !strstr(out, "step "), "a missing vocabulary stops the run before training (rc %d):\n%s", rc, out);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}
