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
#include "../comm/launch.h"
#include "../doctor/doctor.h"
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* SIGTERM, SIGINT, SIGUSR1 (Slurm's --signal, and what the --nproc launcher sends: comm/launch.h):
 * finish the current step, save a checkpoint, exit 0. The step in flight is finished, not abandoned:
 * the ranks agree to stop only at a step's end (the comm_max below), since a rank that left a step
 * alone would leave the others waiting in its collectives; the cost is one step's time in the window
 * the run needs (README, "Stopping and resuming"). The handler only sets a flag, so a signal
 * during a checkpoint's writing or pruning lets it complete (SA_RESTART: no call fails with EINTR).
 * One stop often arrives more than once: to a process group (timeout sends to the process and to its
 * group), from Slurm to every process of a job and from mpirun's abort sequence after it. A rank of
 * many ignores every repeat: nothing but SIGKILL cuts its save short (mpirun's kill timeout, or a
 * repeat to the launcher). A run of one process takes a repeat LAUNCH_STOP_REPEAT_S or more after the
 * first as "stop now": it ends unsaved, the last complete checkpoint untouched. */
static volatile sig_atomic_t stop_signal, repeat_ends_now = 1;   /* until launch_init says how many ranks: nothing is written before */
static struct timespec stop_signal_at;
static void on_stop_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!stop_signal) { stop_signal_at = now; stop_signal = sig; return; }
    if (!repeat_ends_now || now.tv_sec - stop_signal_at.tv_sec < LAUNCH_STOP_REPEAT_S) return;
    signal(sig, SIG_DFL);
    raise(sig);   /* delivered as the handler returns */
}

static void catch_stop_signals(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static const char *stop_reason(int stop) {
    return stop == SIGTERM ? "SIGTERM" : stop == SIGINT ? "SIGINT" : stop == SIGUSR1 ? "SIGUSR1" : "the log failed";
}

/* After a stop by a signal, every rank: how long the slowest rank took from its signal to the end of the
 * save (the window the run needs between SIGTERM and SIGKILL: README, "Stopping and resuming"). */
static void report_stop(Trainer *tr, int stop) {
    double ms = -1;
    if (stop_signal) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        ms = (double)(now.tv_sec - stop_signal_at.tv_sec) * 1e3 + (double)(now.tv_nsec - stop_signal_at.tv_nsec) / 1e6;
    }
    ms = comm_max(&tr->comm, GROUP_WORLD, ms);
    if (tr->comm.rank != 0) return;
    if (tr->cfg.checkpoint_every < 0)
        printf("stop  | checkpoint_every=-1: no checkpoint saved; %s holds what it held\n", tr->cfg.run_dir);
    else
        printf("stop  | %s to checkpoint: %.0f ms (from the signal to the end of the save of step %d, slowest rank)\n", stop_reason(stop), ms,
               tr->saved_step);
    fflush(stdout);
}

static void print_banner(const Trainer *tr) {
    const Model *m = &tr->model;
    const Config *c = &tr->cfg;
    char b1[32], b2[32];
    printf("llm3d | device %s (%s) | %zu parameters (%s fp32) | activations %s\n", tr->be->name, dtype_name(tr->be->act),
           m->n_params, format_bytes(m->n_params * 4.0, b1, sizeof b1), format_bytes((double)m->act_bytes, b2, sizeof b2));
    if (tr->comm.world_size > 1) {
        char split[256];
        partition_describe(&tr->model_cfg, &tr->layout, split, sizeof split);
        if (c->cp > 1)
            printf("ranks | %d = dp %d x pp %d x cp %d x tp %d through %s | rank 0 holds %zu parameters and %d of each sequence's %d tokens",
                   tr->comm.world_size, c->dp, c->pp, c->cp, c->tp, comm_transport_name(&tr->comm), m->n_params, c->seq_len / c->cp, c->seq_len);
        else
            printf("ranks | %d = dp %d x pp %d x tp %d through %s | rank 0 holds %zu parameters", tr->comm.world_size, c->dp, c->pp, c->tp,
                   comm_transport_name(&tr->comm), m->n_params);
        if (c->pp > 1) printf(" | layers per stage %s | %s, %d micro-batches%s", split, schedule_name(c->pp_schedule),
                              tr->accum, c->pp_schedule != PP_ZB1 ? "" : c->zb1_memory == ZB1_MEMORY_BUSIEST ?
                              ", zb1_memory=busiest (ZB-H1's order, up to pp micro-batches a stage)" : ", zb1_memory=1f1b (1F1B's micro-batches a stage)");
        if (tr->ddp.zero) printf(" | ZeRO-%d", tr->ddp.zero);
        printf("\n");
    }
    printf("data  | train %lld samples of %d tokens in %d shard(s)", (long long)tr->train.n_samples, c->seq_len, tr->train.n_shards);
    if (tr->has_val) printf(" | val %lld samples", (long long)tr->val.n_samples);
    printf("\nbatch | %d x %d tokens x %d micro-batches x %d ranks = %ld tokens per step\n", c->batch_size, c->seq_len,
           tr->accum, tr->comm.dp, (long)tr->accum * c->batch_size * c->seq_len * tr->comm.dp);
    fflush(stdout);
}

/* What a run prints before its first step: every key, the banner, the memory plan. */
static void print_start(const Trainer *tr) {
    config_print_table(&tr->cfg, stdout);
    print_banner(tr);
    memory_print(&tr->memory, 0, stdout);
    if (tr->cfg.warmup_clamped_from)
        printf("note  | warmup_steps=%d is longer than max_steps=%d: the learning rate warms up over all %d step%s\n",
               tr->cfg.warmup_clamped_from, tr->cfg.max_steps, tr->cfg.max_steps, tr->cfg.max_steps == 1 ? "" : "s");
}

static void log_eval(Trainer *tr, double val) {
    printf("eval  | step %d | val_loss %.4f | val_ppl %.2f\n", tr->step, val, exp(val));
    fflush(stdout);
    if (tr->jsonl) {
        char v[32];
        fprintf(tr->jsonl, "{\"step\": %d, \"val_loss\": %s}\n", tr->step, json_real(v, sizeof v, "%.6f", val));
        trainer_log_flush(tr);
    }
}

/* --nproc=N: the config, its layout (dp x pp x cp x tp = N) and the outputs are checked
 * here, once, before N ranks are started to find the same mistake N times. */
static void check_before_launch(int argc, char **argv) {
    int asked = 0;
    for (int i = 1; i < argc; i++) asked |= !strncmp(argv[i], "--nproc=", 8);
    if (!asked || getenv("OMPI_COMM_WORLD_SIZE")) return;   /* under mpirun: launch_nproc compares N with the world */
    Config c;
    config_parse_args(&c, argc, argv);
    long long want = (long long)c.dp * c.pp * c.cp * c.tp;
    if (c.nproc > 1 && want != c.nproc && c.cp > 1)
        die("--nproc=%d starts %d ranks, but the layout dp=%d x pp=%d x cp=%d x tp=%d takes %lld\n  hint: use --nproc=%lld, or set dp, pp, "
            "cp and tp so that their product is %d", c.nproc, c.nproc, c.dp, c.pp, c.cp, c.tp, want, want, c.nproc);
    if (c.nproc > 1 && want != c.nproc)
        die("--nproc=%d starts %d ranks, but the layout dp=%d x pp=%d x tp=%d takes %lld\n  hint: use --nproc=%lld, or set dp, pp and tp "
            "so that their product is %d", c.nproc, c.nproc, c.dp, c.pp, c.tp, want, want, c.nproc);
    trainer_check_outputs(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "prepare")) return prepare_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "export")) return checkpoint_export_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "inspect")) return checkpoint_inspect_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "logits")) return checkpoint_logits_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "sample")) return sample_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "schedule")) return schedule_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plan")) return plan_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "scale")) return scale_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plot")) return plot_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "memory")) return memory_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "doctor")) {   /* --nproc=N: re-run under mpirun first, as training does */
        doctor_check_before_launch(argc - 1, argv + 1);
        launch_nproc(argc, argv);
        return doctor_main(argc - 1, argv + 1);
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { config_print_help(stdout); return 0; }
    catch_stop_signals();              /* from the start: a stop during start-up is kept for after the first step */
    check_before_launch(argc, argv);
    launch_nproc(argc, argv);          /* --nproc=N: run this under mpirun with N ranks (the launcher has its own handlers) */
    launch_init(&argc, &argv);
    repeat_ends_now = launch_info()->world == 1;
    long rss_before_kib = memory_rss_peak_kib();
    Config cfg;
    launch_errors_rank0_only(1);       /* a bad config is the same on every rank: say it once */
    config_parse_args(&cfg, argc, argv);
    char *text = mallocCheck(65536);
    config_write_text(&cfg, text, 65536);
    launch_check_same_config(text);
    free(text);
    launch_errors_rank0_only(0);
    Trainer tr;
    trainer_init(&tr, &cfg);
    int lead = tr.comm.rank == 0;
    if (cfg.memory_report) {   /* one step, then what the allocator measured next to the prediction */
        if (lead) print_start(&tr);
        memory_report_step(&tr, rss_before_kib);
        memory_print_ranks(&tr.memory, tr.be->memory_peak(), &tr.comm, stdout);   /* every rank's, under mpirun */
        trainer_free(&tr);
        return 0;
    }
    trainer_restore(&tr);   /* first: a refused start or a finished run says so before the 70-row table */
    if (lead && (tr.step < cfg.max_steps || cfg.max_steps == 0)) print_start(&tr);
    if (tr.step >= cfg.max_steps) {   /* nothing to train: say so, and leave run_dir as it is */
        if (!lead) {}
        else if (tr.step == 0) printf("done  | max_steps=0: nothing to train; nothing written to %s\n", cfg.run_dir);
        else if (tr.step == cfg.max_steps) printf("run already at step %d of %d; raise max_steps to continue\n", tr.step, cfg.max_steps);
        else if (lead) printf("run already at step %d, past max_steps=%d; raise max_steps to continue\n", tr.step, cfg.max_steps);
        trainer_free(&tr);
        return 0;
    }
    int stop = 0;
    while (tr.step < cfg.max_steps) {
        StepStats s = trainer_step(&tr);
        trainer_log_step(&tr, &s);
        if (tr.has_val && (tr.step % cfg.eval_every == 0 || tr.step == cfg.max_steps)) {
            double val = trainer_eval(&tr);
            if (lead) log_eval(&tr, val);
        }
        if ((cfg.sample_every && tr.step % cfg.sample_every == 0) || tr.step == cfg.max_steps) trainer_sample(&tr);
        if (cfg.checkpoint_every > 0 && tr.step % cfg.checkpoint_every == 0) trainer_save_checkpoint(&tr);
        /* a signal to any rank stops every rank; so does a failed write of the log (1) */
        stop = (int)comm_max(&tr.comm, GROUP_WORLD, stop_signal ? (double)stop_signal : tr.log_error[0] ? 1 : 0);
        if (stop) {
            if (lead) printf("stop  | %s after step %d\n", stop_reason(stop), tr.step);
            break;
        }
    }
    if (cfg.checkpoint_every >= 0 && tr.saved_step != tr.step) trainer_save_checkpoint(&tr);
    if (stop > 1) report_stop(&tr, stop);
    if (cfg.profile_out[0]) plan_write_profile(&tr, cfg.profile_out);
    trainer_free(&tr);
    if (tr.log_error[0]) {   /* after the checkpoint above: the weights are kept, the run says what went wrong */
        fprintf(stderr, "error: %s\n", tr.log_error);
        return 1;
    }
    return 0;
}
