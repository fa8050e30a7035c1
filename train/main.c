/* train/main.c — the `train` program: `build/train [--config=F] [--key=value ...]`
 * trains; `build/train prepare ...` turns text into token shards; `build/train
 * memory ...` prints the memory plan without training; sample, export, inspect
 * and logits work on checkpoints.
 * Everything a run does is decided by the Config (train/config.h). */
#include "config.h"
#include "trainer.h"
#include "sample.h"
#include "memory.h"
#include "memory_report.h"
#include "../common/util.h"
#include "../data/prepare.h"
#include "../checkpoint/cli.h"
#include <math.h>
#include <signal.h>
#include <string.h>

/* SIGTERM / SIGINT: finish the current step, save a checkpoint, exit 0. A second signal kills as usual. */
static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig) { stop_signal = sig; }

static void print_banner(const Trainer *tr) {
    const Model *m = &tr->model;
    const Config *c = &tr->cfg;
    char b1[32], b2[32];
    printf("llm3d | device %s (%s) | %zu parameters (%s fp32) | activations %s\n", tr->be->name, dtype_name(tr->be->act),
           m->n_params, format_bytes(m->n_params * 4.0, b1, sizeof b1), format_bytes((double)m->act_bytes, b2, sizeof b2));
    printf("data  | train %lld samples of %d tokens in %d shard(s)", (long long)tr->train.n_samples, c->seq_len, tr->train.n_shards);
    if (tr->has_val) printf(" | val %lld samples", (long long)tr->val.n_samples);
    printf("\nbatch | %d x %d tokens x %d micro-batches x %d ranks = %ld tokens per step\n", c->batch_size, c->seq_len,
           tr->accum, tr->comm.dp, (long)tr->accum * c->batch_size * c->seq_len * tr->comm.dp);
    fflush(stdout);
}

static void log_eval(Trainer *tr, double val) {
    printf("eval  | step %d | val_loss %.4f | val_ppl %.2f\n", tr->step, val, exp(val));
    fflush(stdout);
    if (tr->jsonl) {
        fprintf(tr->jsonl, "{\"step\": %d, \"val_loss\": %.6f}\n", tr->step, val);
        fflush(tr->jsonl);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "prepare")) return prepare_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "export")) return checkpoint_export_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "inspect")) return checkpoint_inspect_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "logits")) return checkpoint_logits_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "sample")) return sample_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "memory")) return memory_main(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { config_print_help(stdout); return 0; }
    long rss_before_kib = memory_rss_peak_kib();
    Config cfg;
    config_parse_args(&cfg, argc, argv);
    Trainer tr;
    trainer_init(&tr, &cfg);
    config_print_table(&tr.cfg, stdout);
    print_banner(&tr);
    memory_print(&tr.memory, 0, stdout);
    if (cfg.memory_report) {   /* one step, then what the allocator measured next to the prediction above */
        memory_report_step(&tr, rss_before_kib);
        trainer_free(&tr);
        return 0;
    }
    trainer_restore(&tr);
    if (tr.step >= cfg.max_steps) {   /* nothing to train: say so, and leave run_dir as it is */
        if (tr.step == 0) printf("done  | max_steps=0: nothing to train; nothing written to %s\n", cfg.run_dir);
        else if (tr.step == cfg.max_steps) printf("run already at step %d of %d; raise max_steps to continue\n", tr.step, cfg.max_steps);
        else printf("run already at step %d, past max_steps=%d; raise max_steps to continue\n", tr.step, cfg.max_steps);
        trainer_free(&tr);
        return 0;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    while (tr.step < cfg.max_steps) {
        StepStats s = trainer_step(&tr);
        trainer_log_step(&tr, &s);
        if (tr.has_val && (tr.step % cfg.eval_every == 0 || tr.step == cfg.max_steps)) log_eval(&tr, trainer_eval(&tr));
        if ((cfg.sample_every && tr.step % cfg.sample_every == 0) || tr.step == cfg.max_steps) trainer_sample(&tr);
        if (cfg.checkpoint_every > 0 && tr.step % cfg.checkpoint_every == 0) trainer_save_checkpoint(&tr);
        if (stop_signal) {
            printf("stop  | %s after step %d\n", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", tr.step);
            break;
        }
    }
    if (cfg.checkpoint_every >= 0 && tr.saved_step != tr.step) trainer_save_checkpoint(&tr);
    trainer_free(&tr);
    return 0;
}
