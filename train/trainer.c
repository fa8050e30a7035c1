/* train/trainer.c — one optimizer step, evaluation, LR schedule, step logging. */
#include "trainer.h"
#include "../common/util.h"
#include "sample.h"
#include "memory.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/hf.h"
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

float lr_at(const Config *c, int step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->lr_schedule == SCHEDULE_CONSTANT || c->max_steps <= c->warmup_steps) return c->lr;
    float p = (float)(step - c->warmup_steps) / (float)(c->max_steps - c->warmup_steps);
    if (p > 1) p = 1;
    float lo = c->lr * c->min_lr_ratio;
    if (c->lr_schedule == SCHEDULE_LINEAR) return c->lr - (c->lr - lo) * p;
    return lo + (c->lr - lo) * 0.5f * (1.0f + cosf(3.14159265358979f * p));
}

void model_config_from(ModelConfig *mc, const Config *c, int vocab_size) {
    memset(mc, 0, sizeof *mc);
    mc->vocab_size = vocab_size;
    mc->dim = c->dim; mc->n_layers = c->n_layers; mc->n_heads = c->n_heads; mc->n_kv_heads = c->n_kv_heads;
    mc->ffn_dim = c->ffn_dim; mc->seq_len = c->seq_len; mc->tie_embeddings = c->tie_embeddings;
    mc->rope_theta = c->rope_theta; mc->norm_eps = c->norm_eps;
}

void trainer_init(Trainer *tr, const Config *cfg) {
    memset(tr, 0, sizeof *tr);
    tr->loss_scale = 1.0f;
    tr->saved_step = -1;
    tr->cfg = *cfg;
    const Config *c = &tr->cfg;
    comm_init(&tr->comm, 1, 1, 1);
    DType act = c->precision == PRECISION_BF16 ? DTYPE_BF16 : c->precision == PRECISION_FP16 ? DTYPE_FP16 : DTYPE_FP32;
    tr->be = c->device == DEVICE_CUDA ? backend_cuda(act) : backend_cpu_emulated(act);
    if (c->precision == PRECISION_FP16) tr->loss_scale = c->loss_scale_init;
    tr->accum = config_grad_accum_steps(c, tr->comm.dp);

    loader_open(&tr->train, c->train_data, c->batch_size, c->seq_len, tr->comm.dp_rank, tr->comm.dp, c->seed, 1, c->vocab_size);
    int vocab = c->vocab_size ? c->vocab_size : loader_header_vocab(&tr->train);
    if (vocab <= 0)
        die("vocab_size=0 asks to read the vocabulary size from '%s', but its header records none\n  hint: set --vocab_size", c->train_data);
    tr->train.vocab_size = vocab;
    tr->cfg.vocab_size = vocab;
    if (c->val_data[0] && c->eval_every > 0) {
        loader_open(&tr->val, c->val_data, c->batch_size, c->seq_len, tr->comm.dp_rank, tr->comm.dp, c->seed, 0, vocab);
        tr->has_val = 1;
    }

    model_config_from(&tr->model_cfg, c, vocab);
    tr->memory = memory_plan(c, &tr->model_cfg, tr->be, &tr->comm, c->recompute, c->optimizer, c->batch_size);
    memory_check_fits(&tr->memory, c, &tr->model_cfg, tr->be, &tr->comm);   /* before allocating: say what would fit */
    model_create(&tr->model, &tr->model_cfg, tr->be, &tr->comm, c->batch_size, c->seq_len, c->recompute);
    model_init_weights(&tr->model, (uint64_t)c->seed, c->init_std);
    optimizer_init(&tr->opt, &tr->model, c);
    size_t per_step = (size_t)tr->accum * c->batch_size * c->seq_len;
    tr->ids = mallocCheck(per_step * sizeof(int));
    tr->targets = mallocCheck(per_step * sizeof(int));
    if (c->log_jsonl[0]) tr->jsonl = fopenCheck(c->log_jsonl, "a");
    if (c->sample_tokens > 0) {   /* load the vocabulary and check the prompt now, not after training */
        char path[1100];
        if (c->tokenizer[0]) snprintf(path, sizeof path, "%s", c->tokenizer);
        else {
            char shard[1024];
            snprintf(shard, sizeof shard, "%s", tr->train.shards[0].path);
            snprintf(path, sizeof path, "%s/tokenizer.bin", dirname(shard));
        }
        if (access(path, R_OK) != 0) die("sample_tokens=%d needs the vocabulary the shards were made with, and '%s' cannot be read\n"
                    "  hint: set --tokenizer=PATH, or --sample_tokens=0 to train without samples", c->sample_tokens, path);
        tr->tokenizer = tokenizer_load(path);
        if (tokenizer_vocab_size(tr->tokenizer) > vocab)
            die("the tokenizer '%s' has %d tokens but the model's vocab_size is %d", path, tokenizer_vocab_size(tr->tokenizer), vocab);
        int *ids;
        sample_encode_prompt(tr->tokenizer, c->sample_prompt, c->seq_len, &ids);
        free(ids);
        rng_seed(&tr->sample_rng, (uint64_t)c->seed + 17);
    }
}

void trainer_sample(Trainer *tr) {
    const Config *c = &tr->cfg;
    if (!tr->tokenizer || tr->comm.rank != 0) return;
    SampleOptions o = {.temperature = c->temperature, .top_k = c->top_k, .max_tokens = c->sample_tokens};
    printf("sample | step %d | temperature %.2f top_k %d\n---\n", tr->step, c->temperature, c->top_k);
    double t0 = now_seconds();
    int n = sample_generate(&tr->model, tr->tokenizer, c->sample_prompt, &o, &tr->sample_rng, stdout);
    printf("\n--- %d tokens, %.0f tokens/s\n", n, n / (now_seconds() - t0));
    fflush(stdout);
}

void trainer_free(Trainer *tr) {
    if (tr->jsonl) fclose(tr->jsonl);
    if (tr->tokenizer) tokenizer_free(tr->tokenizer);
    optimizer_free(&tr->opt, tr->be);
    model_free(&tr->model);
    loader_close(&tr->train);
    if (tr->has_val) loader_close(&tr->val);
    free(tr->ids); free(tr->targets);
    comm_free(&tr->comm);
}

void trainer_update_loss_scale(Trainer *tr, int finite) {
    int dynamic = tr->cfg.precision == PRECISION_FP16;
    if (!finite) {
        tr->skipped_steps++;
        tr->loss_scale_clean_steps = 0;
        if (dynamic) tr->loss_scale *= 0.5f;
        fprintf(stderr, "warning: step %d: inf/nan in the gradients; the update is skipped%s\n", tr->step + 1,
                dynamic ? " and the loss scale halved" : "");
        return;
    }
    if (dynamic && ++tr->loss_scale_clean_steps == LOSS_SCALE_WINDOW) {
        tr->loss_scale *= 2.0f;
        tr->loss_scale_clean_steps = 0;
    }
}

StepStats trainer_step(Trainer *tr) {
    const Config *c = &tr->cfg;
    Model *m = &tr->model;
    StepStats s = {0};
    double t0 = now_seconds();
    int B = c->batch_size, T = c->seq_len, BT = B * T;

    /* every micro-batch of the step first: the loss is the mean over all valid targets */
    long valid = 0;
    for (int k = 0; k < tr->accum; k++) {
        loader_next(&tr->train, tr->ids + (size_t)k * BT, tr->targets + (size_t)k * BT);
        for (int i = 0; i < BT; i++) valid += tr->targets[(size_t)k * BT + i] != IGNORE_INDEX;
    }
    double total_valid = comm_allreduce_scalar(&tr->comm, GROUP_DP, (double)valid);
    float dloss = total_valid > 0 ? (float)(tr->loss_scale / total_valid) : 0.0f;   /* gradients come out x loss_scale */

    model_zero_grads(m);
    double loss_sum = 0;
    for (int k = 0; k < tr->accum; k++) {
        loss_sum += model_forward(m, tr->ids + (size_t)k * BT, tr->targets + (size_t)k * BT, B, T, dloss);
        model_backward(m);
    }
    comm_allreduce_sum(&tr->comm, GROUP_DP, m->grads, m->n_params);
    loss_sum = comm_allreduce_scalar(&tr->comm, GROUP_DP, loss_sum);

    float lr = lr_at(c, tr->step);
    double norm = optimizer_step(&tr->opt, m, lr, tr->loss_scale);
    trainer_update_loss_scale(tr, isfinite(norm));
    tr->be->synchronize();
    tr->step++;

    s.loss = total_valid > 0 ? loss_sum / total_valid : 0;
    s.grad_norm = norm;
    s.lr = lr;
    s.ms = (now_seconds() - t0) * 1e3;
    s.tokens_per_s = (double)tr->accum * BT * tr->comm.dp / (s.ms / 1e3);
    s.mfu = tr->be->peak_flops > 0 ? s.tokens_per_s * model_flops_per_token(&tr->model_cfg) / (tr->be->peak_flops * tr->comm.world_size) : 0;
    s.device_bytes = tr->be->memory_in_use();
    return s;
}

double trainer_eval(Trainer *tr) {
    if (!tr->has_val) return NAN;
    const Config *c = &tr->cfg;
    int BT = c->batch_size * c->seq_len;
    int *ids = mallocCheck(BT * sizeof(int)), *targets = mallocCheck(BT * sizeof(int));
    loader_reset(&tr->val);
    int batches = c->eval_batches;
    int64_t avail = tr->val.n_samples / ((int64_t)c->batch_size * tr->comm.dp);
    if (batches > avail) batches = (int)avail;
    double sum = 0, count = 0;
    for (int b = 0; b < batches; b++) {
        loader_next(&tr->val, ids, targets);
        sum += model_forward(&tr->model, ids, targets, c->batch_size, c->seq_len, 0.0f);
        for (int i = 0; i < BT; i++) count += targets[i] != IGNORE_INDEX;
    }
    free(ids); free(targets);
    sum = comm_allreduce_scalar(&tr->comm, GROUP_DP, sum);
    count = comm_allreduce_scalar(&tr->comm, GROUP_DP, count);
    return count > 0 ? sum / count : NAN;
}

void trainer_log_step(Trainer *tr, const StepStats *s) {
    const Config *c = &tr->cfg;
    if (tr->comm.rank != 0) return;
    if (tr->step % c->log_every == 0 || tr->step == c->max_steps) {
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s", tr->step, c->max_steps, s->loss,
               s->lr, s->grad_norm, s->ms, s->tokens_per_s);
        if (s->mfu > 0) printf(" | mfu %4.1f%%", 100 * s->mfu);
        if (s->device_bytes) { char b[32]; printf(" | mem %s", format_bytes((double)s->device_bytes, b, sizeof b)); }
        if (c->precision == PRECISION_FP16) printf(" | scale %g", tr->loss_scale);
        if (tr->skipped_steps) printf(" | skipped %d", tr->skipped_steps);
        printf("\n");
        fflush(stdout);
    }
    if (tr->jsonl) {
        fprintf(tr->jsonl, "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6f, \"ms\": %.3f, \"tokens_per_s\": %.1f",
                tr->step, s->loss, s->lr, s->grad_norm, s->ms, s->tokens_per_s);
        if (s->mfu > 0) fprintf(tr->jsonl, ", \"mfu\": %.4f", s->mfu);
        if (s->device_bytes) fprintf(tr->jsonl, ", \"device_bytes\": %zu", s->device_bytes);
        fprintf(tr->jsonl, ", \"loss_scale\": %g, \"skipped_steps\": %d", tr->loss_scale, tr->skipped_steps);
        fprintf(tr->jsonl, "}\n");
        fflush(tr->jsonl);
    }
}

/* ------------------------------------------------------------- checkpoints */

#define CONFIG_TEXT_BYTES 65536

/* Both optimizers' moments are stored as fp32 optimizer.adamw.{m,v}/<weight name>:
 * adamw8bit's go through optimizer_moments_to_fp32 / _from_fp32 (dequantize to
 * save, quantize to load: exact for its own checkpoints, see train/optimizer.h),
 * in temporary (n_params) buffers; so either optimizer resumes from either's
 * checkpoint, the moments converted. */
static void moments_fp32(Trainer *tr, float **m, float **v) {
    if (tr->opt.m) { *m = tr->opt.m; *v = tr->opt.v; return; }
    *m = tr->be->alloc(tr->model.n_params * sizeof(float), "checkpoint: fp32 first moment of adamw8bit");
    *v = tr->be->alloc(tr->model.n_params * sizeof(float), "checkpoint: fp32 second moment of adamw8bit");
}
static void moments_release(Trainer *tr, float *m, float *v) {
    if (m != tr->opt.m) { tr->be->free(m); tr->be->free(v); }
}

void trainer_save_checkpoint(Trainer *tr) {
    char *text = mallocCheck(CONFIG_TEXT_BYTES), path[1200];
    config_write_text(&tr->cfg, text, CONFIG_TEXT_BYTES);
    LoaderState ls = loader_get_state(&tr->train);
    CkptState s = {.kind = CKPT_KIND_TRAIN, .step = tr->step, .loader_epoch = ls.epoch, .loader_cursor = ls.cursor,
                   .rng_state = tr->sample_rng.s, .has_rng = tr->tokenizer != NULL, .loss_scale = tr->loss_scale,
                   .clean_steps = tr->loss_scale_clean_steps, .optimizer = CKPT_OPT_ADAMW, .optimizer_step = tr->opt.step};
    double t0 = now_seconds();
    float *m, *v;
    moments_fp32(tr, &m, &v);
    if (m != tr->opt.m) optimizer_moments_to_fp32(&tr->opt, &tr->model, m, v);
    CkptMirror mirrors[2] = {{"optimizer.adamw.m", m}, {"optimizer.adamw.v", v}};
    checkpoint_save(tr->cfg.run_dir, tr->cfg.keep_checkpoints, &tr->model, mirrors, 2, &s, text, path, sizeof path);
    moments_release(tr, m, v);
    tr->saved_step = tr->step;
    if (tr->comm.rank == 0) {
        printf("ckpt  | step %d | %s | %.0f ms\n", tr->step, path, (now_seconds() - t0) * 1e3);
        fflush(stdout);
    }
    free(text);
}

void trainer_restore(Trainer *tr) {
    const Config *c = &tr->cfg;
    char *text = mallocCheck(CONFIG_TEXT_BYTES), path[1200], err[2048];
    config_write_text(&tr->cfg, text, CONFIG_TEXT_BYTES);
    if (c->resume && checkpoint_find_latest(c->run_dir, path, sizeof path) >= 0) {
        CkptState s;
        float *m, *v;
        moments_fp32(tr, &m, &v);
        CkptMirror mirrors[2] = {{"optimizer.adamw.m", m}, {"optimizer.adamw.v", v}};
        checkpoint_load(path, &tr->model, mirrors, 2, &s, text);
        if (s.optimizer != CKPT_OPT_ADAMW) die("checkpoint '%s' holds no AdamW state; this run uses AdamW", path);
        if (m != tr->opt.m) optimizer_moments_from_fp32(&tr->opt, &tr->model, m, v);   /* quantized into 8-bit state */
        moments_release(tr, m, v);
        tr->step = (int)s.step;
        tr->opt.step = (int)s.optimizer_step;
        loader_set_state(&tr->train, (LoaderState){s.loader_epoch, s.loader_cursor});
        if (s.has_rng) tr->sample_rng.s = s.rng_state;
        tr->loss_scale = s.loss_scale;
        tr->loss_scale_clean_steps = s.clean_steps;
        tr->saved_step = tr->step;
        printf("resume | step %d from %s\n", tr->step, path);
    } else if (c->resume) {
        printf("resume | no complete checkpoint in '%s'; starting fresh\n", c->run_dir);
    }
    if (tr->saved_step < 0 && c->init_from[0]) {
        char probe[1200];
        snprintf(probe, sizeof probe, "%s/config.json", c->init_from);
        if (access(probe, F_OK) == 0) {   /* a Hugging Face folder */
            if (hf_check_config(c->init_from, &tr->model_cfg, err, sizeof err) != 0) die("init_from: %s", err);
            if (hf_load_weights(c->init_from, &tr->model, err, sizeof err) != 0) die("init_from: %s", err);
        } else {
            checkpoint_load_weights(c->init_from, &tr->model, text);
        }
        printf("init  | weights from %s\n", c->init_from);
    }
    fflush(stdout);
    free(text);
}
