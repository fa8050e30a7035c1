/* train/checkpoints.c — a run's state to disk and back, from one rank or many.
 *
 * The idea: whatever the layout, a checkpoint holds whole tensors by name
 * (checkpoint/checkpoint.h): the fp32 weights and AdamW's two moments in fp32
 * (adamw8bit dequantizes to save and quantizes to load, which is exact for its
 * own checkpoints: train/optimizer.h). To save, every rank first puts its
 * share in host arrays laid out like its parameter buffer — ZeRO-1 shards are
 * unsharded onto data-parallel rank 0 of their group — and rank 0 writes the
 * file, assembling each tensor from the ranks of replica 0 as it goes
 * (parallel/assemble.h). To resume, every rank reads its own slices straight
 * from the file, so any layout continues any other's run. */
#include "trainer.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/hf.h"
#include "../parallel/assemble.h"
#include "../comm/watchdog.h"
#include "../comm/launch.h"
#include <stdlib.h>
#include <string.h>

_Static_assert(CKPT_MAX_CLEAN_STEPS == LOSS_SCALE_WINDOW, "a checkpoint's clean-step bound is the loss-scale window");
#include <unistd.h>

#define CONFIG_TEXT_BYTES 65536
static const char *const moment_prefixes[2] = {"optimizer.adamw.m", "optimizer.adamw.v"};

/* This rank's weights, m and v as host arrays (n_params each, laid out like
 * its buffer) on the ranks that hold them for the save (data-parallel rank 0);
 * returns whether this rank is one. */
static int local_state(Trainer *tr, float **host) {
    Model *m = &tr->model;
    Ddp *d = &tr->ddp;
    const Comm *c = &tr->comm;
    int me = comm_group_rank(c, comm_replica_group(c)), replicas = comm_group_size(c, comm_replica_group(c));   /* ranks holding the same weights */
    if (!d->zero) {
        if (me != 0) return 0;
        model_get_params(m, host[0]);
        optimizer_moments_get(&tr->opt, m, host[1], host[2]);
        return 1;
    }
    float *view[3];
    for (int k = 0; k < 3; k++) view[k] = mallocCheck((d->shard_n + 1) * sizeof(float));
    tr->be->download(view[0], d->master_shard, d->shard_n * sizeof(float));
    optimizer_moments_get(&tr->opt, m, view[1], view[2]);
    int holder = comm_world_rank(c, 0, c->pp_rank, 0, c->tp_rank);
    if (me != 0) {
        for (int k = 0; k < 3; k++) comm_send_host(c, holder, view[k], d->shard_n * sizeof(float));
    } else {
        for (int k = 0; k < 3; k++) ddp_view_to_full(d, 0, view[k], host[k]);
        for (int r = 1; r < replicas; r++) {
            size_t n = ddp_view_size(d, r);
            float *theirs = mallocCheck((n + 1) * sizeof(float));
            for (int k = 0; k < 3; k++) {
                comm_recv_host(c, comm_world_rank(c, r / c->cp, c->pp_rank, r % c->cp, c->tp_rank), theirs, n * sizeof(float));
                ddp_view_to_full(d, r, theirs, host[k]);
            }
            free(theirs);
        }
    }
    for (int k = 0; k < 3; k++) free(view[k]);
    return me == 0;
}

/* Where the writer takes each whole tensor from: this rank's arrays (one rank), or the assembler (many). */
typedef struct { Trainer *tr; float **host; Assembler *a; } Source;

static void fetch(void *ctx, int mirror, int tensor, float *dst) {
    Source *s = ctx;
    if (s->a) { assemble_tensor(s->a, tensor, s->host[mirror], dst); return; }
    const ParamTensor *t = &s->tr->model.tensors[tensor];
    memcpy(dst, s->host[mirror] + t->offset, (size_t)t->rows * t->cols * sizeof(float));
}

/* precision=fp8: the scales' history from the checkpoint (every rank reads it), or, from a run of another
 * precision, none: the next step runs the block matmuls in bf16 and starts it, said once. */
static void resume_fp8(Trainer *tr, const char *ckpt_dir, int verbose) {
    char path[1300], err[1024];
    snprintf(path, sizeof path, "%s/state.bin", ckpt_dir);
    CkptReader r;
    if (ckpt_open(&r, path, err, sizeof err) != 0) die("%s", err);
    const CkptEntry *e = ckpt_find(&r, FP8_CHECKPOINT_NAME);
    long cols = model_fp8_tensors(&tr->model);
    float *h = mallocCheck((size_t)FP8_HISTORY * cols * sizeof(float));
    int64_t rows = 0, ecols = 0;
    if (e) ckpt_entry_dims(e, &rows, &ecols);
    if (e && (rows != FP8_HISTORY || ecols != cols))
        die("checkpoint '%s': %s is %lld x %lld, and this model's is %d x %ld\n  hint: the checkpoint is damaged or of another "
            "llm3d; resume it with --precision=bf16", path, FP8_CHECKPOINT_NAME, (long long)rows, (long long)ecols, FP8_HISTORY, cols);
    if (e && ckpt_read_f32(&r, e, 0, rows, 0, ecols, h, err, sizeof err) != 0) die("%s", err);
    for (size_t i = 0; e && i < (size_t)rows * ecols; i++)   /* maxima: finite, >= 0 (a huge one would zero every FP8 cast) */
        if (!(h[i] >= 0 && h[i] <= FP8_E5M2_MAX * 1e6f))
            die("checkpoint '%s': %s holds %g at step %zu, tensor %zu: a max |value| is finite, >= 0 and not absurd\n"
                "  hint: the checkpoint is damaged; resume an earlier one, or this one with --precision=bf16", path, FP8_CHECKPOINT_NAME,
                h[i], i / (size_t)ecols, i % (size_t)ecols);
    if (e) model_fp8_history_set(&tr->model, h);
    else if (verbose)
        printf("resume | precision=fp8 from a checkpoint without FP8 scales (another precision saved it): step %d runs the block "
               "matmuls in bf16 to start their history\n", tr->step + 1);
    free(h);
    ckpt_close(&r);
}

void trainer_save_checkpoint(Trainer *tr) {
    const Comm *c = &tr->comm;
    if (tr->cfg.comm_ablate) {   /* the weights are wrong on purpose */
        if (c->rank == 0) printf("ckpt  | not written: comm_ablate=1 trains on wrong values\n");
        tr->saved_step = tr->step;
        return;
    }
    char *text = mallocCheck(CONFIG_TEXT_BYTES), path[1200] = "";
    tr->comm.timeout_s = tr->cfg.comm_timeout_s * WATCHDOG_FIRST_FACTOR;   /* the others wait while rank 0 writes */
    config_write_text(&tr->cfg, text, CONFIG_TEXT_BYTES);
    LoaderState ls = loader_get_state(&tr->train);
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = tr->step, .loader_epoch = ls.epoch, .loader_cursor = ls.cursor,
                   .rng_state = tr->sample_rng.s, .has_rng = tr->tokenizer != NULL, .loss_scale = tr->loss_scale,
                   .clean_steps = tr->loss_scale_clean_steps, .optimizer = tr->opt.kind == OPTIMIZER_ADAMW8BIT ? CKPT_OPT_ADAMW8BIT_SQRT : CKPT_OPT_ADAMW,
                   .optimizer_step = tr->opt.step};
    double t0 = now_seconds();
    /* prune only after a finite step: a checkpoint saved while steps are being skipped pushes out none of the
     * earlier ones (the last good one stays for a resume); the next finite step's checkpoint prunes as usual */
    int keep = tr->skipped_in_a_row > 0 ? 0 : tr->cfg.keep_checkpoints;
    if (keep != tr->cfg.keep_checkpoints && c->rank == 0)
        printf("ckpt  | step %d was skipped (inf/nan gradients): this checkpoint removes none of the earlier ones\n", tr->step);
    size_t P = tr->model.n_params;
    float *host[3];
    for (int k = 0; k < 3; k++) host[k] = mallocCheck((P + 1) * sizeof(float));
    local_state(tr, host);
    const char *prefixes[3] = {NULL, moment_prefixes[0], moment_prefixes[1]};
    Source src = {tr, host, NULL};
    /* precision=fp8: the scales' history, the same on every rank, written by rank 0 */
    long fp8_cols = tr->model.part.fp8 ? model_fp8_tensors(&tr->model) : 0;
    float *fp8 = fp8_cols ? mallocCheck((size_t)FP8_HISTORY * fp8_cols * sizeof(float)) : NULL;
    if (fp8) model_fp8_history_get(&tr->model, fp8);
    if (c->world_size == 1) {
        CkptSource cs = {tr->model.tensors, tr->model.n_tensors, prefixes, 3, fetch, &src, fp8 ? FP8_CHECKPOINT_NAME : NULL, fp8,
                         FP8_HISTORY, fp8_cols};
        checkpoint_write(tr->cfg.run_dir, keep, &cs, &s, text, path, sizeof path);
    } else {
        Assembler a;
        assemble_open(&a, c, &tr->model_cfg, &tr->layout, &tr->model);
        src.a = &a;
        if (c->rank == 0) {
            CkptSource cs = {a.whole.tensors, a.whole.n_tensors, prefixes, 3, fetch, &src, fp8 ? FP8_CHECKPOINT_NAME : NULL, fp8,
                             FP8_HISTORY, fp8_cols};
            checkpoint_write(tr->cfg.run_dir, keep, &cs, &s, text, path, sizeof path);
        } else {   /* walk the same tensors in the same order, sending what this rank holds */
            for (int k = 0; k < 3; k++)
                for (int i = 0; i < a.whole.n_tensors; i++) assemble_tensor(&a, i, host[k], NULL);
        }
        assemble_close(&a);
        comm_barrier(c, GROUP_WORLD);   /* every rank returns once the checkpoint is complete on disk */
    }
    for (int k = 0; k < 3; k++) free(host[k]);
    free(fp8);
    tr->saved_step = tr->step;
    tr->comm.timeout_s = tr->cfg.comm_timeout_s;
    if (c->rank == 0) {
        printf("ckpt  | step %d | %s | %.0f ms\n", tr->step, path, (now_seconds() - t0) * 1e3);
        fflush(stdout);
    }
    free(text);
}

/* Whether the checkpoint was written by 8-bit AdamW before the whole-tensor block rule: optimizer
 * CKPT_OPT_ADAMW in the header, optimizer=adamw8bit in its config. */
static int saved_by_old_8bit(const char *path) {
    char state[1400], err[1024], value[64] = "";
    CkptReader r;
    checkpoint_state_path(path, state, sizeof state);
    if (ckpt_open(&r, state, err, sizeof err) != 0) return 0;   /* checkpoint_read has read it already */
    int old = checkpoint_config_value(r.config_text, "optimizer", value, sizeof value) == 0 && !strcmp(value, "adamw8bit");
    ckpt_close(&r);
    return old;
}

/* Weights read for this rank (n_params host values) into the model and, with ZeRO-1, the master shard. */
static void set_weights(Trainer *tr, const float *host) {
    model_set_params(&tr->model, host);
    ddp_load_master(&tr->ddp, host);
}

void trainer_restore(Trainer *tr) {
    const Config *c = &tr->cfg;
    const Comm *comm = &tr->comm;
    int verbose = comm->rank == 0;
    char *text = mallocCheck(CONFIG_TEXT_BYTES), path[1200] = "", err[2048];
    config_write_text(&tr->cfg, text, CONFIG_TEXT_BYTES);
    size_t P = tr->model.n_params;
    trainer_claim_run_dir(tr, text);   /* the lock, and a fresh start's rules (train/run_dir.c) */
    /* rank 0 finds the newest checkpoint; every rank reads that one (run_dir must be shared across hosts) */
    long long found = comm->rank == 0 && c->resume ? checkpoint_find_latest(c->run_dir, path, sizeof path) : -1;
    found = (long long)comm_max(comm, GROUP_WORLD, (double)found);
    comm_broadcast_host(comm, GROUP_WORLD, path, sizeof path, 0);
    if (c->resume && found >= 0) {
        float *host[3];
        for (int k = 0; k < 3; k++) host[k] = mallocCheck((P + 1) * sizeof(float));
        CkptState s;
        checkpoint_read(path, &tr->model, moment_prefixes, 2, host, &s, text, verbose);
        if (s.optimizer != CKPT_OPT_ADAMW && s.optimizer != CKPT_OPT_ADAMW8BIT_ROWS && s.optimizer != CKPT_OPT_ADAMW8BIT_SQRT)
            die("checkpoint '%s' holds no AdamW state; this run uses AdamW", path);
        int old_blocks = s.optimizer == CKPT_OPT_ADAMW && saved_by_old_8bit(path);
        if (verbose && old_blocks && c->optimizer == OPTIMIZER_ADAMW8BIT)
            printf("resume | %s: its 8-bit AdamW moments were quantized under the old block rule (rank-local 256-element runs);\n"
                   "         converting: they are requantized in blocks of the whole tensor, so this run continues from nearly,\n"
                   "         not exactly, the saved state (the next checkpoint is in the new form)\n", path);
        if (old_blocks || s.optimizer == CKPT_OPT_ADAMW8BIT_ROWS) {   /* v on its own map: issue 52's hole */
            size_t lost = optimizer_drop_lost_moments(host[1], host[2], P);
            if (verbose)
                printf("resume | %s: its 8-bit AdamW moments were saved with v on its own map (before issue 52), where a v far\n"
                       "         below its block's largest decoded to 0 under a live m; %s; %zu elements of this rank had v = 0 under\n"
                       "         m != 0 and get m = 0 (else they would step by the cap every step)\n", path,
                       c->optimizer == OPTIMIZER_ADAMW8BIT ? "converting: requantized with v kept as sqrt(v), so this run continues\n"
                       "         from nearly, not exactly, the saved state (the next checkpoint is in the new form)"
                       : "loaded as fp32 moments", lost);
        }
        set_weights(tr, host[0]);
        if (tr->ddp.zero) {   /* my pieces of the moments */
            for (int k = 1; k < 3; k++) ddp_full_to_view(&tr->ddp, comm_group_rank(comm, comm_replica_group(comm)), host[k], host[k]);
        }
        optimizer_moments_set(&tr->opt, &tr->model, host[1], host[2]);   /* quantized into 8-bit state for adamw8bit */
        for (int k = 0; k < 3; k++) free(host[k]);
        tr->step = (int)s.step;
        tr->opt.step = (int)s.optimizer_step;
        loader_set_state(&tr->train, (LoaderState){s.loader_epoch, s.loader_cursor});
        if (s.has_rng) tr->sample_rng.s = s.rng_state;
        tr->loss_scale = s.loss_scale;
        tr->loss_scale_clean_steps = s.clean_steps;
        tr->saved_step = tr->step;
        if (verbose) printf("resume | step %d from %s\n", tr->step, path);
        if (tr->model.part.fp8) resume_fp8(tr, path, verbose);
    } else if (c->resume && verbose) {
        printf("resume | no complete checkpoint in '%s'; starting fresh\n", c->run_dir);
    }
    if (tr->saved_step < 0 && c->init_from[0]) {
        char probe[1200];
        snprintf(probe, sizeof probe, "%s/config.json", c->init_from);
        float *host = mallocCheck((P + 1) * sizeof(float));
        if (access(probe, F_OK) == 0) {   /* a Hugging Face folder (not fopen: a FIFO would block it) */
            if (hf_check_config(c->init_from, &tr->model_cfg, err, sizeof err) != 0) die("init_from: %s", err);
            if (hf_read_weights(c->init_from, &tr->model, host, err, sizeof err) != 0) die("init_from: %s", err);
        } else {
            checkpoint_read_weights(c->init_from, &tr->model, host, text);
        }
        set_weights(tr, host);
        free(host);
        if (verbose) printf("init  | weights from %s\n", c->init_from);
    }
    fflush(stdout);
    free(text);
}
