/* train/trainer.h — the step loop: what one optimizer step and one evaluation are.
 *
 * The idea: a step loads all of its micro-batches first, so the loss can be the
 * exact mean over every valid target of the step on every rank; then the
 * step's schedule (parallel/schedule.h) runs on this rank — forwards and
 * backwards accumulating fp32 gradients micro-batch by micro-batch, pipeline
 * sends and receives, gradient buckets reduced over the data-parallel ranks as
 * the backward completes them; then the global gradient norm (over all ranks)
 * is clipped, and AdamW updates the fp32 master weights and refreshes their
 * compute copy. One rank is the same code with a one-stage schedule. */
#pragma once
#include <stdio.h>
#include "config.h"
#include "../model/llama.h"
#include "../data/loader.h"
#include "optimizer.h"
#include "memory.h"
#include "../data/tokenizer.h"
#include "../common/util.h"
#include "../parallel/partition.h"
#include "../parallel/executor.h"

/* Where one rank's step went, in seconds (parallel/executor.h's split, plus
 * the loader and the host's own work, which is the rest of the step). */
typedef struct { double step, data, compute, exposed, bubble, optimizer, host, comm_busy; } StepSplit;

typedef struct {
    Config cfg;
    Comm comm;
    const Backend *be;
    PartitionSpec layout;       /* what each rank holds (parallel/partition.h) */
    Schedule schedule;          /* the training step's actions, every stage */
    Ddp ddp;                    /* data-parallel buckets and ZeRO-1 shards */
    Executor exec;
    Model model;
    ModelConfig model_cfg;
    Optimizer opt;
    MemoryPlan memory;          /* the predicted bytes of this run (train/memory.h) */
    Loader train, val;
    int has_val;
    int step;                   /* optimizer steps done */
    int accum;                  /* micro-batches per step */
    int *ids, *targets;         /* (accum, B, T) host staging of a step's batches */
    FILE *jsonl;                /* log_jsonl on rank 0; NULL after a write to it failed */
    char log_error[1400];       /* why the last write or close of log_jsonl failed; "" while none did */
    Tokenizer *tokenizer;       /* for samples; NULL when sample_tokens = 0 */
    Rng sample_rng;
    float loss_scale;           /* fp16 dynamic loss scale (1 when unused), saved in checkpoints */
    int loss_scale_clean_steps; /* steps since the last overflow */
    int skipped_steps;          /* updates skipped for inf/nan gradients, in this process */
    int skipped_in_a_row;       /* ... since the last finite step: max_skipped_steps of them stop the run */
    int fp8_saturated;          /* precision=fp8: tensors whose values passed their FP8 scale's range in the last step (model/fp8.h) */
    int fp8_saturated_total;    /* ... summed over this process's steps */
    int saved_step;             /* step of the newest checkpoint this process wrote or resumed from; -1 none */
    double last_norm;           /* the last optimizer step's gradient norm */
    float last_lr;
    struct { int kind, rank, step, ms; } fault;   /* test-only fault injection (config key fault) */
    double eta_t0;              /* when the first logged step ended (the time left counts from there), 0 before */
    int eta_step0;              /* its step */
    StepSplit *history;         /* profile_out: every step's split */
    int n_history;
} Trainer;
enum { FAULT_NONE, FAULT_STALL, FAULT_EXIT, FAULT_NAN, FAULT_SLOW };

typedef struct {
    double loss, grad_norm, lr, ms, tokens_per_s, mfu;
    size_t device_bytes;
    StepSplit split;            /* this rank's */
    int reported;               /* the split of every rank was gathered (log_every steps, many ranks) */
    int slowest_rank;           /* the rank the others waited for: the most time computing, loading and updating */
    StepSplit slowest;          /* its split */
    double bubble;              /* mean over the ranks of bubble / (compute + exposed comm + bubble): the formula's fraction */
    int straggler_rank;         /* -1, or the rank whose own work most exceeds its peers' median (train/straggler.c) */
    int stragglers;             /* ranks over straggler_pct */
    StepSplit straggler;        /* its split */
    double straggler_median;    /* the median work (data + compute + optimizer) of its peers, seconds */
} StepStats;

/* What each rank holds under config c (parallel/partition.h). */
PartitionSpec trainer_layout(const Config *c);
/* The step's action lists for every stage under config c: the pipeline
 * schedule, then each stage's data-parallel buckets, then the slots. The
 * training run executes exactly this; `build/train schedule` prints it. */
void trainer_schedule(Schedule *s, const Config *c, const ModelConfig *mc, const Comm *comm, const Backend *be);
/* `build/train plan` (train/plan.c), and the profile it reads, written at the end of a run with profile_out. */
int plan_main(int argc, char **argv);
/* `build/train scale` (train/scale.c) and `build/train plot` (train/plot.c). */
int scale_main(int argc, char **argv);
int plot_main(int argc, char **argv);
void plan_write_profile(const Trainer *tr, const char *path);
/* `build/train schedule`: the dry run (train/schedule_cli.c). */
int schedule_main(int argc, char **argv);
/* What the rank at (stage, tp_rank) holds and keeps under config c: its part
 * of the model, the activation slots its schedule s needs, where its master
 * weights live, whether it keeps a compute copy of them. Training allocates
 * it; the memory plans predict it. */
ModelPart trainer_part(const Config *c, const ModelConfig *mc, const Schedule *s, int stage, int tp_rank, DType act);
/* Opens the data, builds and initialises the model and optimizer. */
void trainer_init(Trainer *tr, const Config *cfg);
void trainer_free(Trainer *tr);
/* Checkpoints (checkpoint/checkpoint.h): with resume=1, continue from the newest
 * complete checkpoint in run_dir; else with init_from, load those weights. */
void trainer_restore(Trainer *tr);
/* train/run_dir.c: before anything is written into run_dir (from trainer_restore): rank 0 takes the
 * run_dir lock (a live run's folder is refused naming its pid and host), a fresh start refuses another
 * run's checkpoints and moves this run's aside. config_text: this run's (config_write_text). */
void trainer_claim_run_dir(Trainer *tr, const char *config_text);
/* Rank 0, before log_jsonl is opened: another run's records there are refused; this run's own are
 * continued by a resume, moved aside (said) by a fresh start. trainer_run_id is the log header's run_id:
 * a CRC of the keys that make a run the same run (checkpoint_same_run's). */
void trainer_claim_log(Trainer *tr);
uint32_t trainer_run_id(const Config *c);
/* Writes run_dir/ckpt_<step>/ (weights, AdamW m and v, loader, RNG, loss scale, config). */
void trainer_save_checkpoint(Trainer *tr);
StepStats trainer_step(Trainer *tr);
/* Mean loss over the first eval_tokens of the val split in whole sequences (train/config.h's config_eval_sequences), on every layout the same. */
double trainer_eval(Trainer *tr);
/* fp16 dynamic loss scaling, PyTorch GradScaler's rule: x0.5 and the step
 * skipped on any inf/nan, x2 after LOSS_SCALE_WINDOW clean steps in a row.
 * Other precisions keep a scale of 1; fp8 skips a non-finite step, the rest stop.
 * Skipping is bounded: max_skipped_steps in a row, or an fp16 scale that would
 * fall under LOSS_SCALE_MIN (the gradients overflow unscaled, DeepSpeed's
 * min_loss_scale), stop the run in words with exit 1, on every rank alike (the
 * norm is reduced over all ranks). A checkpoint saved while steps are being
 * skipped prunes none (train/checkpoints.c): the last good one stays.
 * trainer_step calls it with whether the step's gradients were finite. */
#define LOSS_SCALE_WINDOW 2000
#define LOSS_SCALE_MIN 1.0f
void trainer_update_loss_scale(Trainer *tr, int finite);
/* Print sample_tokens of generated text from the current weights. */
void trainer_sample(Trainer *tr);
float lr_at(const Config *c, int step);
void model_config_from(ModelConfig *mc, const Config *c, int vocab_size);
void trainer_log_step(Trainer *tr, const StepStats *s);
/* After a record was written to log_jsonl: flushes it; a failed write (a full
 * disk) closes the log and says why in tr->log_error, which stops the run at the
 * end of this step with a checkpoint (train/main.c) and exit 1. 0, or -1. */
int trainer_log_flush(Trainer *tr);
/* Checks the run's outputs before any work (run_dir, profile_out): dies naming the key. */
void trainer_check_outputs(const Config *c);
/* train/straggler.c: from every rank's split (n ranks, pp stages, a stage's ranks in runs of
 * inner = tp x cp), the straggler of s over pct percent; its log line (nothing when there is none). */
void straggler_find(StepStats *s, const StepSplit *all, int n, int pp, int inner, double pct);
void straggler_print(const StepStats *s, double pct, FILE *out);
