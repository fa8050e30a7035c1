/* bench/bench_train.c — tokens/s, MFU and device memory of whole training steps
 * (forward, backward, optimizer) on random tokens, for any config.
 *
 *   build/bench/bench_train                      the CPU table of the README (tiny, l15m)
 *   build/bench/bench_train --preset=l124m --device=cuda --precision=bf16 [--steps=20] [--key=value ...]
 *
 * With settings it prints one JSON line (for scripts) after the table row.
 * Under mpirun (e.g. --tp=2) every rank prints its own row and line: the
 * memory of each rank, measured and predicted.
 * A benchmark, not a test: the shard is random tokens, so the loss means nothing. */
#include "../common/options.h"
#include "../common/util.h"
#include "../train/trainer.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef LLM3D_BLAS
#include <cblas.h>
#endif

static char shard[256];

static void bench(Config *c, int steps, int json) {
    snprintf(c->train_data, sizeof c->train_data, "%s", shard);
    c->val_data[0] = 0;
    c->sample_tokens = 0;
    c->warmup_steps = 0;
    c->log_jsonl[0] = 0;
    c->checkpoint_every = -1;
    Trainer tr;
    trainer_init(&tr, c);
    trainer_step(&tr);                        /* warm-up: first touch, algorithm choice, scratch growth */
    trainer_step(&tr);
    tr.be->synchronize();
    double t0 = now_seconds();
    StepSplit sum = {0};   /* where the timed steps went: the loader, the device's forward/backward and optimizer, the host's rest */
    for (int s = 0; s < steps; s++) {
        StepSplit p = trainer_step(&tr).split;
        sum.data += p.data; sum.compute += p.compute; sum.exposed += p.exposed; sum.bubble += p.bubble;
        sum.optimizer += p.optimizer; sum.host += p.host;
    }
    tr.be->synchronize();
    double dt = (now_seconds() - t0) / steps;
    double tok = (double)tr.accum * c->batch_size * c->seq_len;
    double mfu = tr.be->peak_flops > 0 ? tok / dt * model_flops_per_token(&tr.model_cfg) / tr.be->peak_flops : 0;
    char mem[32];
    size_t used = tr.be->memory_in_use(), peak = tr.be->memory_peak();
    char mfu_text[16] = "-";
    if (mfu > 0) snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100 * mfu);
    printf("| %-6s | %-4s %-4s | %10zu | %3d x %4d | %8.2f | %9.0f | %8.3f | %6s | %10s |\n", c->preset, tr.be->name,
           config_precision_name(c->precision), tr.model.n_params, c->batch_size, c->seq_len, dt * 1e3, tok / dt,
           tok / dt * model_flops_per_token(&tr.model_cfg) / 1e12, mfu_text, peak ? format_bytes((double)peak, mem, sizeof mem) : "-");
    if (json)
        printf("{\"preset\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"recompute\": %d, \"params\": %zu, "
               "\"batch\": %d, \"seq_len\": %d, \"step_ms\": %.3f, \"tokens_per_s\": %.0f, \"mfu\": %.4f, "
               "\"device_bytes_in_use\": %zu, \"peak_allocated_bytes\": %zu, \"predicted_bytes\": %zu, \"activation_bytes\": %zu, "
               "\"optimizer\": %d, \"rank\": %d, \"tp\": %d, \"sequence_parallel\": %d, \"split_ms\": {\"data\": %.3f, "
               "\"compute\": %.3f, \"exposed\": %.3f, \"bubble\": %.3f, \"optimizer\": %.3f, \"host\": %.3f}}\n",
               c->preset, tr.be->name, config_precision_name(c->precision), c->recompute, tr.model.n_params, c->batch_size,
               c->seq_len, dt * 1e3, tok / dt, mfu, used, peak, tr.memory.total, tr.model.act_bytes, c->optimizer, tr.comm.rank,
               c->tp, c->sequence_parallel, sum.data * 1e3 / steps, sum.compute * 1e3 / steps, sum.exposed * 1e3 / steps,
               sum.bubble * 1e3 / steps, sum.optimizer * 1e3 / steps, sum.host * 1e3 / steps);
    fflush(stdout);
    trainer_free(&tr);
}

int main(int argc, char **argv) {
    int steps = 3;
    /* --steps=N is ours; everything else is a config key */
    char **args = mallocCheck(sizeof(char *) * (argc + 1));
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "--steps=", 8)) {
            char err[512];
            double v;
            if (option_number("steps", argv[i] + 8, 1, 1e6, 1, &v, err, sizeof err) != 0) die("bench_train: %s\n  hint: --steps=N times N steps", err);
            steps = (int)v;
        }
        else args[n++] = argv[i];
    }
    snprintf(shard, sizeof shard, "/tmp/llm3d_bench_%d.bin", (int)getpid());
    enum { N = 1 << 22 };
    uint32_t *tok = mallocCheck(N * sizeof(uint32_t));
    Rng r;
    rng_seed(&r, 1);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_u64(&r) % 4096);   /* ids < 4096 fit every preset's vocabulary */
    shard_write(shard, tok, N, 0);
    free(tok);
    printf("training steps on random tokens: %d timed after 2 warm-up\n", steps);
#ifdef LLM3D_BLAS
    /* the figures depend on the kernel OpenBLAS chose for this processor (OPENBLAS_CORETYPE overrides its choice) */
    printf("OpenBLAS: %s, kernel %s%s%s\n", openblas_get_config(), openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? ", OPENBLAS_CORETYPE=" : "", getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "");
#endif
    printf("| preset | backend   | params     | B x T      | ms/step  | tokens/s  | TFLOP/s  | MFU    | peak alloc |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    Config c;
    if (n > 1) {
        config_parse_args(&c, n, args);
        if (!c.vocab_size) c.vocab_size = 4096;
        bench(&c, steps, 1);
    } else {   /* the README's CPU table */
        char err[256];
        config_defaults(&c);
        config_set(&c, "preset", "tiny", err, sizeof err);
        c.vocab_size = 4096;                  /* as the README's main job trains it */
        bench(&c, steps, 0);
        config_defaults(&c);
        config_set(&c, "preset", "l15m", err, sizeof err);
        c.batch_size = 8;                     /* instead of 128: a step stays short on a CPU; tokens/s barely moves */
        bench(&c, steps, 0);
    }
    unlink(shard);
    free(args);
    return 0;
}
