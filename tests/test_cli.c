/* tests/test_cli.c — bad input to build/train: each case must end with one clear
 * error naming the key or file, a non-zero exit, and never a crash. Also the
 * good path: --help, a short run, and its --log_jsonl lines. */
#include "test.h"
#include "../common/util.h"
#include "../data/shard.h"
#include "../train/config.h"
#include "../model/llama.h"
#include "../kernels/adamw.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char train_bin[512], dir[256], out[1 << 16];

/* build/train with args; what it printed lands in out. */
static int run(const char *args) { return test_run(train_bin, args, out, sizeof out); }
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

static void expect_error(const char *args, const char *needle) {
    int rc = run(args);
    CHECK(rc == 1 && strstr(out, needle) && strstr(out, "error:"), "`train %s`: want exit 1 and '%s', got exit %d:\n%s", args, needle, rc, out);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(data, 1, n, f, path);
    fclose(f);
}

/* Bytes from "10.7 GiB" / "439.2 KiB" (format_bytes's units); -1 if unreadable. */
static double parse_bytes(const char *text) {
    double v;
    char unit[8];
    if (sscanf(text, "%lf %7s", &v, unit) != 2) return -1;
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    for (int i = 0; i < 5; i++, v *= 1024) if (!strcmp(unit, units[i])) return v;
    return -1;
}

/* `build/train memory`: the plan at once, no training, nothing written; --memory_report=1: one step, a measured peak. */
static void test_memory(const char *small, const char *good) {
    char args[2048], want[512], b[32];
    int rc = run(ARGS("memory --preset=l124m --device=cuda --precision=bf16 --run_dir=%s/memrun", dir));
    Config c;
    config_defaults(&c);
    config_apply_preset(&c, "l124m");
    ModelConfig mc = {.vocab_size = c.vocab_size, .dim = c.dim, .n_layers = c.n_layers, .n_heads = c.n_heads,
                      .n_kv_heads = c.n_kv_heads, .ffn_dim = c.ffn_dim, .seq_len = c.seq_len};
    size_t P = model_count_params(&mc);
    snprintf(want, sizeof want, "master weights (fp32) %s | ", format_bytes(4.0 * P, b, sizeof b));
    CHECK(rc == 0 && strstr(out, want) && strstr(out, "workspaces") && !strstr(out, "step "),
          "memory l124m on cuda: the plan (want '%s'), no GPU needed, nothing trained (rc %d):\n%s", want, rc, out);
    snprintf(want, sizeof want, "weights (compute copy) %s | ", format_bytes(2.0 * P, b, sizeof b));
    CHECK(strstr(out, want) != NULL, "bf16: a 2-byte compute copy of the %zu parameters (want '%s')", P, want);
    double total[3][2][2] = {{{0}}};   /* [recompute][optimizer][compute_weights] */
    int rows = 0;
    for (const char *l = strstr(out, "  --recompute="); l; l = strstr(l + 1, "  --recompute=")) {
        char r[16], o[16], w[16], t[32];
        if (sscanf(l, "  --recompute=%15s --optimizer=%15s --compute_weights=%15s total %31[^\n(]", r, o, w, t) != 4) continue;
        int ri = !strcmp(r, "none") ? 0 : !strcmp(r, "selective") ? 1 : 2, oi = !strcmp(o, "adamw8bit"), wi = !strcmp(w, "per_layer");
        total[ri][oi][wi] = parse_bytes(t);
        rows++;
    }
    CHECK(rows == 12 && total[0][0][0] > total[1][0][0] && total[1][0][0] > total[2][0][0] && total[0][1][0] < total[0][0][0] &&
          total[2][1][0] < total[2][0][0] && total[0][0][1] < total[0][0][0] && total[2][1][1] < total[2][1][0],
          "the other switches: recompute, adamw8bit and per-layer compute weights each need less (%d rows):\n%s", rows, out);
    rc = run("memory --preset=l350m --device=cuda --precision=bf16 --recompute=full --compute_weights=per_layer");
    const char *line = strstr(out, "weights (compute copy) ");
    double copy = line ? parse_bytes(line + 23) : -1;
    CHECK(rc == 0 && copy > 20 * 1048576.0 && copy < 23 * 1048576.0 && strstr(out, "compute weights per_layer"),
          "l350m, compute_weights=per_layer: the compute line is one layer's 21.5 MiB, not the 641 MiB copy (rc %d):\n%s", rc, out);
    rc = run("memory --preset=l124m --dp=2 --zero=1 --device=cuda --precision=bf16");
    CHECK(rc == 0 && strstr(out, "  --recompute=full      --optimizer=adamw     total") && !strstr(out, "--compute_weights="),
          "zero=1 with dp=2: per_layer is no switch there, and the list says none (rc %d):\n%s", rc, out);
    /* ZeRO-2/3 (docs/zero.md): the plan counts the shards and places, and lists every stage over these dp ranks */
    rc = run("memory --preset=l350m --dp=4 --zero=3 --device=cuda --precision=bf16");
    double z[4] = {-1, -1, -1, -1};
    for (int k = 0; k < 4; k++) {
        char key[32];
        snprintf(key, sizeof key, "  --zero=%d  total ", k);
        const char *at = strstr(out, key);
        if (at) z[k] = parse_bytes(at + strlen(key));
    }
    CHECK(rc == 0 && strstr(out, "(dp 4 x pp 1 x tp 1) ZeRO-3") && strstr(out, "ZeRO-2/3 places") && !strstr(out, "gradients (fp32)") &&
          !strstr(out, "weights (compute copy)") && z[3] > 0 && z[3] < z[2] && z[2] < z[1] && z[1] < z[0],
          "l350m dp=4 zero=3: no whole weights or gradients, its places counted, each ZeRO stage less (%.0f %.0f %.0f %.0f bytes; rc %d):\n%s",
          z[0], z[1], z[2], z[3], rc, out);
    rc = run("plan --preset=l350m --gpus=4 --gpu_mem_gib=6 --device=cuda --precision=bf16 --top=40");
    CHECK(rc == 0 && strstr(out, "ZeRO-3: fits only with weights, gradients and optimizer state sharded over dp=4"),
          "plan ranks zero=3 layouts with their reason (rc %d):\n%s", rc, out);
    expect_error("--dp=2 --zero=1 --precision=bf16 --compute_weights=per_layer", "compute_weights=per_layer");
    CHECK(strstr(out, "zero=1") && strstr(out, "--compute_weights=keep") && strstr(out, "--zero=0"),
          "per_layer with zero=1: the message names both keys and both ways out:\n%s", out);
    snprintf(want, sizeof want, "%s/memrun", dir);
    CHECK(access(want, F_OK) != 0, "memory writes nothing to run_dir");
    expect_error(ARGS("memory --train_data=%s/nothing_*.bin", dir), "vocab_size=0 means the vocabulary of the train shards");
    expect_error("memory --preset=l124m --dimm=3", "did you mean 'dim'");

    rc = run(ARGS("%s --train_data=%s --memory_report=1", small, good));
    const char *m = strstr(out, "prediction off by ");
    double off = m ? atof(m + 18) : strstr(out, "the prediction is exact to 0.05%") ? 0 : 99;
    CHECK(rc == 0 && strstr(out, "measured: peak allocated") && fabs(off) < 5 && strstr(out, "peak resident set grew by"),
          "--memory_report=1 on the CPU: the allocator's peak within 5%% of the prediction (%.1f%%) (rc %d):\n%s", off, rc, out);
    const char *first = strstr(out, "predicted:");
    CHECK(first && !strstr(first + 1, "predicted:") && !strstr(out, "step     1/"), "--memory_report=1: the prediction printed once, no step log");
    snprintf(want, sizeof want, "%s/run/ckpt_00000001", dir);
    CHECK(access(want, F_OK) != 0, "--memory_report=1 writes no checkpoint");
}

/* build/train args under `timeout 20`: a program that blocks (on a FIFO) fails the test with 124, never hangs it. */
static int run_bounded(const char *args) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "timeout 20 %s", train_bin);
    return test_run(cmd, args, out, sizeof out);
}

/* issue 30: no reader blocks on a FIFO; every output is checked before the work (run_dir, log_jsonl, --nproc). */
static void test_inputs_and_outputs(const char *small, const char *good) {
    char args[2048], fifo[300], path[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    int rc = run_bounded(ARGS("export --checkpoint=%s/none --out=%s/exp --tokenizer=%s", dir, dir, fifo));
    CHECK(rc == 1 && strstr(out, "--tokenizer=") && strstr(out, "not a regular file"), "export --tokenizer=FIFO: refused, not blocked (rc %d):\n%s", rc, out);
    rc = run_bounded(ARGS("plot %s", fifo));
    CHECK(rc == 1 && strstr(out, "plot:") && strstr(out, "not a regular file"), "plot FIFO: refused, not blocked (rc %d):\n%s", rc, out);
    rc = run_bounded(ARGS("plan --preset=tiny --gpus=1 --profile=%s", fifo));
    CHECK(rc == 1 && strstr(out, "--profile") && strstr(out, "not a regular file"), "plan --profile=FIFO: refused (rc %d):\n%s", rc, out);
    rc = run_bounded(ARGS("sample --model=%s --tokenizer=%s", dir, fifo));
    CHECK(rc == 1 && strstr(out, "not a regular file"), "sample --tokenizer=FIFO: refused (rc %d):\n%s", rc, out);
    rc = run_bounded(ARGS("%s --train_data=%s --max_steps=1 --warmup_steps=0 --sample_tokens=4 --tokenizer=%s", small, good, fifo));
    CHECK(rc == 1 && strstr(out, "sample_tokens=4") && strstr(out, "not a regular file"), "--tokenizer=FIFO: refused (rc %d):\n%s", rc, out);

    /* run_dir a file (or on a read-only filesystem): refused at start-up, not at the first checkpoint after training */
    snprintf(path, sizeof path, "%s/afile", dir);
    write_bytes(path, "x", 1);
    rc = run(ARGS("%s --train_data=%s --max_steps=2 --warmup_steps=0 --run_dir=%s", small, good, path));
    CHECK(rc == 1 && strstr(out, "run_dir=") && strstr(out, "is a file") && !strstr(out, "step     1/"),
          "run_dir a file: refused before step 1 (rc %d):\n%s", rc, out);
    rc = run(ARGS("%s --train_data=%s --max_steps=2 --warmup_steps=0 --run_dir=%s/sub/run", small, good, path));
    CHECK(rc == 1 && strstr(out, "run_dir=") && strstr(out, "is a file, not a folder") && !strstr(out, "step     1/"),
          "run_dir under a file: refused before step 1 (rc %d):\n%s", rc, out);
    rc = run(ARGS("%s --train_data=%s --max_steps=2 --warmup_steps=0 --run_dir=/proc/llm3d_run", small, good));
    CHECK(rc == 1 && strstr(out, "run_dir=/proc/llm3d_run") && !strstr(out, "step     1/"),
          "run_dir on a read-only filesystem (/proc): refused before step 1 (rc %d):\n%s", rc, out);
    /* log_jsonl onto a device: refused in words before step 1 (the output door writes regular files only;
     * a write that fails mid-run is the file-size-limit case below) */
    rc = run(ARGS("%s --train_data=%s --max_steps=2 --warmup_steps=0 --log_jsonl=/dev/full", small, good));
    CHECK(rc == 1 && strstr(out, "log_jsonl=/dev/full") && strstr(out, "a character device, not a regular file") && !strstr(out, "step     1/"),
          "log_jsonl=/dev/full: refused before step 1 (rc %d):\n%s", rc, out);
    rc = run(ARGS("%s --train_data=%s --max_steps=2 --warmup_steps=0 --log_jsonl=%s/nodir/log.jsonl", small, good, dir));
    CHECK(rc == 1 && strstr(out, "log_jsonl=") && strstr(out, "does not exist"), "log_jsonl in a missing folder: refused (rc %d):\n%s", rc, out);
    /* a log that fills up mid-run (a file-size limit stands in for a full disk): the run stops, saves, says why, exits 1 */
    char jsonl[300];
    snprintf(jsonl, sizeof jsonl, "%s/full.jsonl", dir);
    static char pad[511 * 1024];
    memset(pad, ' ', sizeof pad);
    pad[sizeof pad - 1] = '\n';
    write_bytes(jsonl, pad, sizeof pad);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "bash -c 'trap \"\" XFSZ; ulimit -f 512; exec \"$0\" \"$@\"' %s", train_bin);   /* 512 KiB a file */
    rc = test_run(cmd, ARGS("%s --train_data=%s --max_steps=400 --warmup_steps=0 --log_every=100 --run_dir=%s/fullrun --log_jsonl=%s",
                           small, good, dir, jsonl), out, sizeof out);
    const char *stop = strstr(out, "stop  | the log failed after step ");
    int at = stop ? atoi(stop + 34) : -1;
    snprintf(path, sizeof path, "%s/fullrun/ckpt_%08d", dir, at);
    CHECK(rc == 1 && stop && at > 0 && at < 400 && strstr(out, "writing the log log_jsonl=") && strstr(out, "File too large") &&
          access(path, F_OK) == 0, "a log write failing mid-run: stops at step %d with a checkpoint there, says why, exit 1 (rc %d):\n%s",
          at, rc, out);

    /* --nproc=N checks that the layout takes N before starting any rank (--nproc=4096 was still starting at 60 s) */
    rc = run_bounded("--nproc=4096 --dp=2");
    CHECK(rc == 1 && strstr(out, "--nproc=4096") && strstr(out, "takes 2") && !strstr(out, "launch |"),
          "--nproc=4096 with dp=2: refused before launching (rc %d):\n%s", rc, out);
    rc = run_bounded("--nproc=2 --dp=2 --dimm=3");
    CHECK(rc == 1 && strstr(out, "did you mean 'dim'") && !strstr(out, "launch |"), "--nproc: a bad key refused once, before launching:\n%s", out);
}

/* issue 30: every subcommand's numbers go through the config table's reader: "KEY=VALUE: why", exit 1 */
static void test_subcommand_numbers(void) {
    const char *cases[][2] = {
        {"sample --model=none --tokens=4294967297", "sample: tokens=4294967297: is out of range [1, 2147483647]"},
        {"sample --model=none --top_k=4294967296", "sample: top_k=4294967296: is out of range"},
        {"sample --model=none --temperature=nan", "sample: temperature=nan: is not a number"},
        {"sample --model=none --temperature=inf", "sample: temperature=inf: is not a number"},
        {"sample --model=none --temperature=1e309", "sample: temperature=1e309: is not a number"},
        {"sample --model=none --temperature=", "sample: temperature=: is empty"},
        {"sample --model=none --seed=", "sample: seed=: is empty"},
        {"sample --model=none --tokens=2.5", "sample: tokens=2.5: is not a whole number"},
        {"prepare --train_vocab=300.9", "prepare: train_vocab=300.9: is not a whole number"},
        {"prepare --shard_tokens=12abc", "prepare: shard_tokens=12abc: is not a whole number"},
        {"plan --preset=tiny --gpus=1e309", "plan: gpus=1e309: is not a number"},
        {"plan --preset=tiny --gpus=8 --top=abc", "plan: top=abc: is not a whole number"},
        {"plan --preset=tiny --gpus=8 --gpu_mem_gib=inf", "plan: gpu_mem_gib=inf: is not a number"},
        {"plan --preset=tiny --gpus=8 --link=inf", "plan: link=inf: is not a number"},
        {"plan --preset=tiny --gpus=8 --net=-3", "plan: net=-3: is out of range"},
        {"plan --preset=tiny --gpus= ", "plan: gpus=: is empty"},
        {"scale --ranks=1 --steps=1e309", "scale: steps=1e309: is not a number"},
        {"scale --ranks=1 --warmup=1.5", "scale: warmup=1.5: is not a whole number"},
        {"schedule --micro_batches=2.5", "schedule: micro_batches=2.5: is not a whole number"},
        {"doctor --timeout=nan", "doctor: --timeout=nan: is not a number"},
        {"doctor --max_bytes=1e400G", "doctor: --max_bytes=1e400G: is not a number"},
        {"--nproc=abc", "nproc=abc: is not a whole number"},
        {"--nproc=2.5", "nproc=2.5: is not a whole number"},
        {"--lr= ", "lr=: is empty"}, {"--dim=64junk", "dim=64junk: is not a whole number"}, {"--dim=' 64'", "dim= 64: is not a whole number"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_bounded(cases[i][0]);
        CHECK(rc == 1 && strstr(out, cases[i][1]) && strstr(out, "error:"), "`train %s`: want exit 1 and '%s', got %d:\n%s",
              cases[i][0], cases[i][1], rc, out);
    }
}

/* issue 30, 8: adam_eps=0 (and 1e-320, 0 as a float) passed the range check and the run stopped at step 2 "the gradients
 * are not finite". Where the NaN starts: a weight whose gradient is 0 (an embedding row of a token not in the batch) has
 * m = v = 0, and the update m / (sqrt(v) + eps) is 0/0. Refused at start-up with that reason; the smallest eps taken trains. */
static void test_adam_eps(const char *small, const char *good) {
    AdamWHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 0, .grad_scale = 1, .step = 1};
    float m = 0, v = 0, p = adamw_element(0.5f, 0.0f, &m, &v, 1.0f, h.lr / (1 - h.beta1), sqrtf(1 - h.beta2), &h);
    CHECK(isnan(p), "the origin: a zero gradient with eps=0 makes the weight 0/0 = NaN (got %g)", p);
    h.eps = (float)CONFIG_MIN_ADAM_EPS, m = v = 0;
    p = adamw_element(0.5f, 0.0f, &m, &v, 1.0f, h.lr / (1 - h.beta1), sqrtf(1 - h.beta2), &h);
    CHECK(p == 0.5f, "with the smallest eps taken, a zero gradient leaves the weight as it was (got %g)", p);
    char args[2048];
    const char *bad[] = {"0", "1e-320", "1e-21"};
    for (int i = 0; i < 3; i++) {
        int rc = run(ARGS("%s --train_data=%s --max_steps=3 --warmup_steps=0 --checkpoint_every=-1 --adam_eps=%s", small, good, bad[i]));
        CHECK(rc == 1 && strstr(out, "adam_eps=") && strstr(out, "0/0") && strstr(out, "hint: use --adam_eps=1e-8") && !strstr(out, "step     1/"),
              "--adam_eps=%s: refused before training, with the reason (rc %d):\n%s", bad[i], rc, out);
    }
    int rc = run(ARGS("%s --train_data=%s --max_steps=3 --warmup_steps=0 --checkpoint_every=-1 --adam_eps=1e-20", small, good));
    CHECK(rc == 0 && strstr(out, "step     3/3 | loss") && !strstr(out, "nan"), "--adam_eps=1e-20 trains 3 finite steps (rc %d):\n%s", rc, out);
}

int main(void) {
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(train_bin, sizeof train_bin, "%s/train", build);
    snprintf(dir, sizeof dir, "/tmp/llm3d_cli_%d", (int)getpid());
    char cmd[600], good[300], args[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) die("cannot make %s", dir);

    /* a good shard and its broken relatives */
    enum { N = 5000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 7919u) % 50);
    snprintf(good, sizeof good, "%s/good.bin", dir);
    shard_write(good, tok, N, 50);
    FILE *f = fopenCheck(good, "rb");
    static uint8_t bytes[1024 + 2 * N];
    freadCheck(bytes, 1, sizeof bytes, f, good);
    fclose(f);
    char path[300];
    snprintf(path, sizeof path, "%s/truncated.bin", dir);
    write_bytes(path, bytes, sizeof bytes - 333);
    snprintf(path, sizeof path, "%s/short.bin", dir);
    write_bytes(path, bytes, 100);
    bytes[0] ^= 0xff;
    snprintf(path, sizeof path, "%s/magic.bin", dir);
    write_bytes(path, bytes, sizeof bytes);
    bytes[0] ^= 0xff;
    bytes[4] = 9;
    snprintf(path, sizeof path, "%s/version.bin", dir);
    write_bytes(path, bytes, sizeof bytes);
    snprintf(path, sizeof path, "%s/tiny.bin", dir);
    shard_write(path, tok, 20, 50);
    snprintf(path, sizeof path, "%s/bad.ini", dir);
    write_bytes(path, "# a config\n[model]\ndim = 64\nthis line has no equals sign\n", 55);

    char small[512];   /* every run writes its checkpoints under dir, never into the user's runs/ */
    snprintf(small, sizeof small, "--dim=32 --n_layers=1 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=2 "
                                  "--val_data= --run_dir=%s/run", dir);
    expect_error("--dimm=64", "unknown config key 'dimm' (did you mean 'dim'?)");
    expect_error("--steps=5", "unknown config key 'steps' (did you mean 'max_steps'?)");       /* a key containing the word */
    expect_error("--num_layers=2", "unknown config key 'num_layers' (did you mean 'n_layers'?)"); /* a key sharing a word */
    expect_error("--learning-rate=2", "unknown config key 'learning_rate'");
    expect_error("--dim=abc", "dim=abc: is not a whole number");
    expect_error("--lr=fast", "lr=fast: is not a number");
    expect_error("--n_layers=0", "out of range");
    expect_error("--lr_schedule=cosin", "'cosin' is not one of cosine|linear|constant");
    expect_error("--tie_embeddings=maybe", "is not a boolean");
    expect_error("--preset=huge", "unknown preset 'huge'");
    expect_error("--dim=100 --n_heads=3", "dim=100 does not divide by n_heads=3");
    expect_error("--n_heads=4 --n_kv_heads=3", "n_heads=4 does not divide by n_kv_heads=3");
    expect_error("--dim=36 --n_heads=4 --n_kv_heads=2", "is odd");
    expect_error("--batch_size=4 --seq_len=16 --total_batch_tokens=100", "total_batch_tokens=100 is not a multiple");
    expect_error("--precision=bf17", "'bf17' is not one of fp32|bf16|fp16");
    expect_error("oops", "unexpected argument 'oops'");
    expect_error("--dim", "has no value");
    expect_error(ARGS("--config=%s/bad.ini", dir), "bad.ini:4: expected 'key = value'");
    expect_error(ARGS("--config=%s/none.ini", dir), "cannot open config file");
    expect_error(ARGS("%s --train_data=%s/missing.bin", small, dir), "no token shard matches");
    expect_error(ARGS("%s --train_data=%s/magic.bin", small, dir), "is not a token shard");
    expect_error(ARGS("%s --train_data=%s/version.bin", small, dir), "has version 9");
    expect_error(ARGS("%s --train_data=%s/truncated.bin", small, dir), "the file is truncated");
    expect_error(ARGS("%s --train_data=%s/short.bin", small, dir), "shorter than its 1024-byte header");
    expect_error(ARGS("%s --train_data=%s/tiny.bin", small, dir), "fewer than one step needs");
    expect_error(ARGS("%s --train_data=%s --vocab_size=20", small, good), "but vocab_size is 20");

    if (system("nvidia-smi >/dev/null 2>&1") != 0) {   /* no GPU here: device=cuda must say so in words */
        int rc = run(ARGS("%s --train_data=%s --device=cuda", small, good));
        CHECK(rc == 1 && (strstr(out, "no usable NVIDIA GPU") || strstr(out, "has no CUDA backend")) && strstr(out, "device=cpu"),
              "--device=cuda without a GPU: want a clear error, got exit %d:\n%s", rc, out);
    }

    /* good paths */
    int rc = run("--help");
    CHECK(rc == 0 && strstr(out, "--n_kv_heads") && strstr(out, "--lr_schedule") && strstr(out, "l124m"), "--help lists the keys and presets (rc %d)", rc);
    /* every subcommand main.c dispatches, with a line each */
    const char *subcommands[] = {"prepare", "sample", "export", "inspect", "logits", "memory", "schedule", "plan", "scale", "plot", "doctor"};
    for (int i = 0; i < (int)(sizeof subcommands / sizeof *subcommands); i++) {
        char line[32];
        snprintf(line, sizeof line, "\n  %-10s ", subcommands[i]);
        CHECK(strstr(out, line) != NULL, "--help has a line for the subcommand '%s'", subcommands[i]);
    }
    /* a short try of a preset whose warm-up is longer than the run: warms up over the whole run, saying so */
    rc = run(ARGS("%s --train_data=%s --val_data= --max_steps=2 --warmup_steps=30 --lr=1e-3 --log_every=1 --checkpoint_every=-1", small, good));
    CHECK(rc == 0 && strstr(out, "note  | warmup_steps=30 is longer than max_steps=2: the learning rate warms up over all 2 steps") &&
          strstr(out, "step     1/2 | loss") && strstr(out, "| lr 5.00e-04 |") && strstr(out, "step     2/2 | loss") && strstr(out, "| lr 1.00e-03 |"),
          "warmup_steps > max_steps: cut to max_steps with a note, the lr reaching its peak at the last step (rc %d):\n%s", rc, out);
    char jsonl[300];
    snprintf(jsonl, sizeof jsonl, "%s/log.jsonl", dir);
    rc = run(ARGS("%s --train_data=%s --val_data=%s --eval_every=2 --eval_batches=2 --max-steps=3 --warmup_steps=1 --log_jsonl=%s "
                  "--lr=0.003 --beta2=0.99", small, good, good, jsonl));
    CHECK(rc == 0 && strstr(out, "step     3/3 | loss") && strstr(out, "tok/s") && strstr(out, "val_loss"), "a 3-step run logs steps and eval (rc %d):\n%s", rc, out);
    CHECK(strstr(out, "| dim                  | 32 ") != NULL, "the startup table shows the settings");
    /* floats as --help writes them: the default's text, else the shortest that reads back; no float noise */
    CHECK(strstr(out, "| lr                   | 0.003 ") && strstr(out, "| beta2                | 0.99 ") &&
          strstr(out, "| norm_eps             | 1e-5 ") && strstr(out, "| adam_eps             | 1e-8 ") &&
          strstr(out, "| rope_theta           | 10000 ") && !strstr(out, "0.0030000") && !strstr(out, "e-06"),
          "the startup table prints floats without noise:\n%s", out);
    /* a config file: sections and comments ignored, its keys over the preset, --key=value over the file */
    snprintf(path, sizeof path, "%s/good.ini", dir);
    const char *ini = "# run settings\n[model]\npreset = l15m\ndim = 48   # narrower\nn_heads=4\nn_kv_heads = 2\n[training]\nlr = 0.002\n";
    write_bytes(path, ini, strlen(ini));
    rc = run(ARGS("--config=%s --train_data=%s --val_data= --vocab_size=50 --seq_len=16 --batch_size=2 --max_steps=1 --warmup_steps=0 "
                  "--lr=0.003 --n_layers=1 --ffn_dim=32 --checkpoint_every=-1", path, good));
    CHECK(rc == 0 && strstr(out, "| preset               | l15m") && strstr(out, "| dim                  | 48 ") &&
          strstr(out, "| lr                   | 0.003") && strstr(out, "| n_kv_heads           | 2 "),
          "config file over preset, command line over file (rc %d):\n%s", rc, out);
    f = fopenCheck(jsonl, "r");
    char line[512];
    int steps = 0, evals = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"val_loss\"")) evals++;
        else if (strstr(line, "\"step\"") && strstr(line, "\"loss\"") && strstr(line, "\"lr\"") && strstr(line, "\"grad_norm\"") && strstr(line, "\"tokens_per_s\"")) steps++;
    }
    fclose(f);
    CHECK(steps == 3 && evals == 2, "jsonl has 3 step lines (%d) and 2 eval lines (%d)", steps, evals);

    test_memory(small, good);
    test_inputs_and_outputs(small, good);
    test_subcommand_numbers();
    test_adam_eps(small, good);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}
