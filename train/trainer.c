/* train/trainer.c — set-up of a run on this rank (grid, model part, schedule,
 * data parallelism, optimizer), one optimizer step, evaluation, LR schedule,
 * step logging. Checkpoints are train/checkpoints.c. */
#include "trainer.h"
#include "../common/util.h"
#include "../common/options.h"
#include "sample.h"
#include "memory.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/hf.h"
#include "../comm/launch.h"
#include "../comm/flight.h"
#include "../comm/watchdog.h"
#include "../model/context.h"
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

PartitionSpec trainer_layout(const Config *c) {
    return (PartitionSpec){c->tp, c->pp, c->pp > 1 ? c->pp_schedule : PP_1F1B, c->pp_virtual, c->pp_layers, c->sequence_parallel};
}

/* What schedule_add_zero needs of one stage's model part and buckets: which bucket each forward and backward step
 * reads and writes, each bucket's place and size. */
typedef struct { ZeroUnits units; int *place, *steps, *fr, *br, *bw; size_t *elements; } ZeroTables;

static void zero_tables(ZeroTables *t, const Model *m, const Ddp *d) {
    int nc = m->part.n_chunks, most = 1, nb = d->n_buckets;
    for (int k = 0; k < nc; k++) if (model_forward_steps(m, k) > most) most = model_forward_steps(m, k);
    t->place = mallocCheck(((size_t)nb + 1) * sizeof(int));
    t->elements = mallocCheck(((size_t)nb + 1) * sizeof(size_t));
    t->steps = mallocCheck((size_t)nc * sizeof(int));
    t->fr = mallocCheck((size_t)nc * most * sizeof(int));
    t->br = mallocCheck((size_t)nc * most * sizeof(int));
    t->bw = mallocCheck((size_t)nc * most * sizeof(int));
    for (int b = 0; b < nb; b++) { t->place[b] = d->buckets[b].place; t->elements[b] = d->buckets[b].count; }
    for (int k = 0; k < nc; k++) {
        t->steps[k] = model_forward_steps(m, k);
        for (int j = 0; j < most; j++) {
            int fu = j < t->steps[k] ? model_forward_step_unit(m, k, j) : -1;
            int bu = j < model_backward_steps(m, k) ? model_backward_step_unit(m, k, j) : -1;
            t->fr[k * most + j] = fu >= 0 ? d->bucket_of_unit[fu] : -1;
            t->br[k * most + j] = bu >= 0 ? d->bucket_of_unit[bu] : -1;
            /* the step writes its unit's gradient; the embedding's backward (no weights read) writes the embedding's */
            t->bw[k * most + j] = j < model_backward_steps(m, k) ? (bu >= 0 ? t->br[k * most + j] : d->bucket_of_unit[0]) : -1;
        }
    }
    t->units = (ZeroUnits){nb, t->place, t->elements, most, t->steps, t->fr, t->br, t->bw,
                           m->part.has_head ? d->bucket_of_unit[m->n_units - 1] : -1};
}

static void zero_tables_free(ZeroTables *t) { free(t->place); free(t->elements); free(t->steps); free(t->fr); free(t->br); free(t->bw); }

/* The evaluation's forward-only schedule; with zero=3 its gathers and releases too. */
static void eval_schedule(Schedule *ev, const Trainer *tr, int micro_batches) {
    schedule_build_forward(ev, tr->schedule.kind, tr->schedule.stages, micro_batches, tr->schedule.chunks);
    if (tr->ddp.zero == 3) {
        ZeroTables z;
        zero_tables(&z, &tr->model, &tr->ddp);
        schedule_add_zero(ev, tr->comm.pp_rank, &z.units, 3);
        zero_tables_free(&z);
    }
    schedule_assign_slots(ev);
}

void trainer_schedule(Schedule *s, const Config *c, const ModelConfig *mc, const Comm *comm, const Backend *be) {
    PartitionSpec layout = trainer_layout(c);
    int p = c->pp, v = schedule_chunks(layout.pp_schedule, c->pp_virtual);
    int *steps = mallocCheck((size_t)p * v * sizeof(int));
    for (int st = 0; st < p; st++) {   /* backward steps of every chunk of every stage */
        ModelPart part = partition_part(mc, &layout, st, 0);
        for (int k = 0; k < v; k++) steps[st * v + k] = part.chunks[k].n_layers + (k == 0 && part.has_embedding);
    }
    schedule_build(s, layout.pp_schedule, p, config_grad_accum_steps(c), v, steps, c->zb1_memory);
    free(steps);
    int zero = c->dp * c->cp > 1 ? c->zero : 0;   /* ZeRO shards over dp x cp */
    for (int st = 0; st < p; st++) {   /* where each stage's buckets start reducing (zero=2/3: and its units gather) */
        ModelPart part = partition_part(mc, &layout, st, comm->tp_rank);
        Model plan;
        Ddp d;
        model_plan(&plan, mc, be, comm, &part, 1, 1, RECOMPUTE_NONE);
        DdpOptions o = {.bucket_mb = c->bucket_mb, .zero = zero};
        ddp_plan(&d, &plan, comm, &o);
        if (zero >= 2) {
            ZeroTables z;
            zero_tables(&z, &plan, &d);
            schedule_add_zero(s, st, &z.units, zero);
            zero_tables_free(&z);
        } else {
            BucketReady *ready = callocCheck(d.n_buckets + 1, sizeof(BucketReady));
            for (int b = 0; b < d.n_buckets; b++) ready[b] = d.buckets[b].ready;
            schedule_add_data_parallel(s, st, ready, d.n_buckets, zero);
            free(ready);
        }
        ddp_free(&d);
        model_plan_free(&plan);
    }
    schedule_assign_slots(s);
}

ModelPart trainer_part(const Config *c, const ModelConfig *mc, const Schedule *s, int stage, int tp_rank, DType act) {
    PartitionSpec layout = trainer_layout(c);
    ModelPart part = partition_part(mc, &layout, stage, tp_rank);
    part.n_slots = s->slots[stage];
    if (c->pp > 1 && part.n_slots < 2) part.n_slots = 2;   /* evaluation receives the next micro-batch while sending the last */
    int replicas = c->dp * c->cp;   /* ranks holding the same weights: ZeRO shards over dp x cp */
    part.master_in_shard = c->zero && replicas > 1 && act != DTYPE_FP32 && c->zero < 3;
    part.grads_elsewhere = c->zero >= 2 && replicas > 1;
    part.weights_elsewhere = c->zero == 3 && replicas > 1;
    part.cp = c->cp;   /* cp_rank: the caller's (the same sizes on every cp rank) */
    part.weights_per_layer = c->compute_weights == COMPUTE_WEIGHTS_PER_LAYER && act != DTYPE_FP32;
    part.fp8 = c->precision == PRECISION_FP8;
    part.split_backward = s->split;   /* zb1, zbv: what W reads is kept from each B to its W */
    part.n_keeps = s->split && s->keeps ? s->keeps[stage] : 0;
    return part;
}

/* The step's schedule for every stage, checked as `build/train schedule` checks it. */
static void build_schedule(Trainer *tr) {
    trainer_schedule(&tr->schedule, &tr->cfg, &tr->model_cfg, &tr->comm, tr->be);
    ScheduleSim sim;
    char err[1024];
    if (schedule_check(&tr->schedule, &sim, err, sizeof err) != 0) die("internal: the step's schedule is unsound: %s", err);
    schedule_sim_free(&sim);
}

static void optimizer_action(void *ctx) {
    Trainer *tr = ctx;
    tr->last_lr = lr_at(&tr->cfg, tr->step);
    tr->last_norm = optimizer_step(&tr->opt, &tr->model, tr->last_lr, tr->loss_scale);
    trainer_update_loss_scale(tr, isfinite(tr->last_norm));
    if (tr->model.part.fp8) {   /* the step's maxima make the next step's scales (a collective over the world) */
        tr->fp8_saturated = model_fp8_step_end(&tr->model, isfinite(tr->last_norm));
        tr->fp8_saturated_total += tr->fp8_saturated;
    }
}

/* fault=KIND:rank=R[:step=S][:ms=M] — stall | exit | nan | slow: what a test makes go wrong on one rank */
static void parse_fault(Trainer *tr) {
    const char *f = tr->cfg.fault;
    if (!f[0]) return;
    static const char *kinds[] = {"", "stall", "exit", "nan", "slow"};
    tr->fault.rank = 0; tr->fault.step = 1; tr->fault.ms = 200;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", f);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        int k;
        for (k = 1; k < 5 && strcmp(tok, kinds[k]); k++) {}
        if (k < 5) { tr->fault.kind = k; continue; }
        char key[16], why[256];
        const char *eq = strchr(tok, '=');
        snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - tok) : 0, tok);
        int *field = !strcmp(key, "rank") ? &tr->fault.rank : !strcmp(key, "step") ? &tr->fault.step : !strcmp(key, "ms") ? &tr->fault.ms : NULL;
        double v;
        if (field && option_number(key, eq + 1, 0, 2147483647.0, 1, &v, why, sizeof why) != 0)
            die("fault='%s': %s\n  hint: rank=R, step=S and ms=M take whole numbers >= 0 (e.g. fault=stall:rank=1:step=3)", f, why);
        if (field) *field = (int)v;
        else die("fault='%s': '%s' is not stall|exit|nan|slow, rank=R, step=S or ms=M (e.g. fault=stall:rank=1:step=3)", f, tok);
    }
    if (!tr->fault.kind) die("fault='%s' names no fault: use stall, exit, nan or slow (e.g. fault=slow:rank=1)", f);
    if (tr->fault.rank < 0 || tr->fault.rank >= tr->comm.world_size)
        die("fault='%s': rank=%d, but the run has ranks 0..%d", f, tr->fault.rank, tr->comm.world_size - 1);
    if (tr->comm.rank == 0)
        fprintf(stderr, "warning: fault injection (a test setting): %s on rank %d%s\n", kinds[tr->fault.kind], tr->fault.rank,
                tr->fault.kind == FAULT_SLOW ? ", every step" : "");
}

static int fault_now(const Trainer *tr, int kind) {
    return tr->fault.kind == kind && tr->comm.rank == tr->fault.rank && (kind == FAULT_SLOW || tr->step + 1 == tr->fault.step);
}

int trainer_log_flush(Trainer *tr) {
    if (!tr->jsonl) return 0;
    int failed = fflush(tr->jsonl) != 0 || ferror(tr->jsonl), e = errno;
    if (!failed) return 0;
    fclose(tr->jsonl);
    tr->jsonl = NULL;
    snprintf(tr->log_error, sizeof tr->log_error, "writing the log log_jsonl=%s failed at step %d: %s; its last record may be cut short\n"
             "  hint: is the disk full? free space (or give --log_jsonl another path)%s", tr->cfg.log_jsonl, tr->step, strerror(e),
             tr->cfg.checkpoint_every >= 0 ? " and continue from the checkpoint the run saves as it stops, with --resume=1"
                                           : "; with checkpoint_every=-1 this run saves no checkpoint");
    return -1;
}

void trainer_check_outputs(const Config *c) {
    char err[4400];
    if (c->checkpoint_every >= 0 && c->max_steps > 0 && !c->memory_report && check_writable(c->run_dir, 1, "run_dir", err, sizeof err) != 0)
        die("%s\n  (checkpoints go there: checked now rather than after the run has trained; --checkpoint_every=-1 writes none)", err);
    if (c->profile_out[0] && check_writable(c->profile_out, 0, "profile_out", err, sizeof err) != 0) die("%s", err);
    if (c->log_jsonl[0] && check_writable(c->log_jsonl, 0, "log_jsonl", err, sizeof err) != 0) die("%s", err);
}

void trainer_init(Trainer *tr, const Config *cfg) {
    memset(tr, 0, sizeof *tr);
    tr->loss_scale = 1.0f;
    tr->saved_step = -1;
    tr->cfg = *cfg;
    const Config *c = &tr->cfg;
    launch_init(NULL, NULL);
    launch_errors_rank0_only(1);   /* what follows fails alike on every rank: rank 0 says it */
    trainer_check_outputs(c);
    comm_init(&tr->comm, c->dp, c->pp, c->cp, c->tp, c->comm_backend, c->device == DEVICE_CUDA);
    tr->comm.timeout_s = c->comm_timeout_s * WATCHDOG_FIRST_FACTOR;   /* start-up and the first step; trainer_step sets the rest */
    watchdog_start(&tr->comm, c->run_dir);
    DType act = config_act_dtype(c->precision);
    tr->be = c->device == DEVICE_CUDA ? backend_cuda(act) : backend_cpu_emulated(act);
    const char *no_fp8 = c->precision == PRECISION_FP8 ? tr->be->fp8_unsupported() : NULL;
    if (no_fp8) die("%s", no_fp8);
    comm_attach(&tr->comm, tr->be);
    if (c->precision == PRECISION_FP16) tr->loss_scale = c->loss_scale_init;
    tr->accum = config_grad_accum_steps(c);

    loader_open(&tr->train, c->train_data, c->batch_size, c->seq_len, tr->comm.dp_rank, tr->comm.dp, c->seed, 1, c->vocab_size);
    int vocab = c->vocab_size ? c->vocab_size : loader_header_vocab(&tr->train);
    if (vocab <= 0)
        die("vocab_size=0 asks to read the vocabulary size from '%s', but its header records none\n  hint: set --vocab_size", c->train_data);
    tr->train.vocab_size = vocab;
    tr->cfg.vocab_size = vocab;
    if (c->val_data[0] && c->eval_every > 0) {
        loader_open(&tr->val, c->val_data, 1, c->seq_len, 0, 1, c->seed, 0, vocab);   /* one sequence a fetch: trainer_eval */
        tr->has_val = 1;
        if (c->eval_batches && tr->comm.rank == 0)
            fprintf(stderr, "warning: eval_batches=%d is deprecated: it scores eval_batches x batch_size sequences, which change with "
                    "batch_size; use --eval_tokens=%ld (the same %ld sequences of %d tokens here)\n", c->eval_batches,
                    config_eval_sequences(c) * c->seq_len, config_eval_sequences(c), c->seq_len);
    }

    model_config_from(&tr->model_cfg, c, vocab);
    tr->layout = trainer_layout(&tr->cfg);
    build_schedule(tr);
    ModelPart part = trainer_part(c, &tr->model_cfg, &tr->schedule, tr->comm.pp_rank, tr->comm.tp_rank, act);
    part.cp_rank = tr->comm.cp_rank;
    int zero = c->zero && c->dp * c->cp > 1;
    if (c->cp > 1 && !tr->be->attention_forward_at)
        die("cp=%d runs attention on a chunk of queries at an offset against the gathered K/V, and the %s backend has no such kernel "
            "yet\n  hint: use --cp=1 on this device, or --device=cpu", c->cp, tr->be->name);
    tr->memory = memory_plan(c, &tr->model_cfg, tr->be, &tr->comm, &part, c->recompute, c->optimizer, c->compute_weights, c->batch_size);
    memory_check_fits(&tr->memory, c, &tr->model_cfg, tr->be, &tr->comm, &part);   /* before allocating: say what would fit */
    model_create(&tr->model, &tr->model_cfg, tr->be, &tr->comm, &part, c->batch_size, c->seq_len / c->cp, c->recompute);   /* cp: my share */
    OptimizerCut cut = {&tr->model, &tr->cfg};
    DdpOptions ddp = {c->bucket_mb, c->zero, c->grad_reduce_dtype == GRAD_REDUCE_BF16, optimizer_cut_rule, &cut};
    ddp_create(&tr->ddp, &tr->model, &tr->comm, &ddp);
    float *host = mallocCheck(tr->model.n_params * sizeof(float));
    model_init_values(&tr->model, (uint64_t)c->seed, c->init_std, host);
    model_set_params(&tr->model, host);
    ddp_load_master(&tr->ddp, host);
    free(host);
    OptPiece *pieces = NULL;
    OptimizerView view = zero ? optimizer_zero_view(&tr->ddp, &pieces) : (OptimizerView){0};
    optimizer_init(&tr->opt, &tr->model, c, zero ? &view : NULL);
    free(pieces);
    if (tr->opt.kind == OPTIMIZER_ADAMW8BIT && tr->comm.rank == 0)   /* the optimizer's own accounting (tests assert on it) */
        printf("optim | adamw8bit on rank 0: %d tensors 8-bit, %zu elements in %zu blocks, %zu elements fp32 | %.2f bytes of state a parameter\n",
               tr->opt.n_q8_tensors, tr->opt.n_quantized, tr->opt.n_blocks, tr->opt.n_fp32,
               (double)tr->opt.state_bytes / (double)(tr->opt.view.n ? tr->opt.view.n : 1));
    launch_errors_rank0_only(0);
    tr->exec = (Executor){.model = &tr->model, .comm = &tr->comm, .ddp = &tr->ddp, .optimizer = optimizer_action, .ctx = tr};
    tr->comm.ablate = c->comm_ablate;
    if (c->comm_ablate && tr->comm.rank == 0)
        fprintf(stderr, "warning: comm_ablate=1: every device collective and pipeline message is skipped, so the results are WRONG;\n"
                        "         it only measures the step without communication, and no checkpoint is written\n");
    parse_fault(tr);
    if (tr->model.poison_grads && tr->comm.rank == 0)   /* the layout tests assert that their runs said this */
        fprintf(stderr, "warning: LLM3D_POISON_GRADS=1 (a test setting): the gradients a step leaves unwritten are NaN\n");
    if (c->profile_out[0] && tr->comm.world_size > 1)
        die("profile_out writes a one-GPU profile for `build/train plan`, and this run has %d ranks\n"
            "  hint: profile with dp=tp=pp=1 on one GPU", tr->comm.world_size);

    size_t per_step = (size_t)tr->accum * c->batch_size * c->seq_len;
    tr->ids = mallocCheck(per_step * sizeof(int));
    tr->targets = mallocCheck(per_step * sizeof(int));
    trainer_claim_log(tr);   /* another run's records refused, this run's own kept (train/run_dir.c) */
    if (c->log_jsonl[0] && tr->comm.rank == 0) {   /* a first line saying what ran, for `build/train scale` and `plot` */
        char err[4400];
        if (!(tr->jsonl = append_open(c->log_jsonl, "log_jsonl", err, sizeof err))) die("%s", err);   /* the output door's checks */
        fprintf(tr->jsonl, "{\"run\": \"llm3d\", \"world\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"params\": %zu, "
                           "\"tokens_per_step\": %ld, \"memory_bytes\": %zu, \"device\": \"%s\", \"precision\": \"%s\", \"run_id\": \"%08x\"}\n",
                tr->comm.world_size, c->dp, c->tp, c->pp, c->cp, model_count_params(&tr->model_cfg), (long)per_step * tr->comm.dp,
                tr->memory.total, tr->be->name, dtype_name(tr->be->act), (unsigned)trainer_run_id(c));
        if (trainer_log_flush(tr) != 0) die("%s", tr->log_error);   /* before any step: nothing to lose */
    }
    if (c->sample_tokens > 0) {   /* load the vocabulary and check the prompt now, not after training */
        char path[1100];
        if (c->tokenizer[0]) snprintf(path, sizeof path, "%s", c->tokenizer);
        else {
            char shard[1024];
            snprintf(shard, sizeof shard, "%s", tr->train.shards[0].path);
            snprintf(path, sizeof path, "%s/tokenizer.bin", dirname(shard));
        }
        char err[1400];
        int64_t bytes;
        int fd = open_regular(path, "vocabulary", &bytes, err, sizeof err);   /* never blocks on a FIFO */
        if (fd < 0) die("sample_tokens=%d needs the vocabulary the shards were made with: %s\n"
                        "  hint: set --tokenizer=PATH, or --sample_tokens=0 to train without samples", c->sample_tokens, err);
        close(fd);
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
    if (c->tp > 1 || c->pp > 1 || c->cp > 1 || tr->ddp.zero == 3) {   /* rank 0 holds only part of the model, or of the sequence */
        printf("sample | skipped: with tp, pp or cp > 1 or zero=3 no rank holds the whole model and sequence; "
               "after training, `build/train sample --model=%s` samples from the checkpoint\n", c->run_dir);
        return;
    }
    SampleOptions o = {.temperature = c->temperature, .top_k = c->top_k, .max_tokens = c->sample_tokens};
    printf("sample | step %d | temperature %.2f top_k %d\n---\n", tr->step, c->temperature, c->top_k);
    double t0 = now_seconds();
    int n = sample_generate(&tr->model, tr->tokenizer, c->sample_prompt, &o, &tr->sample_rng, stdout);
    printf("\n--- %d tokens, %.0f tokens/s\n", n, n / (now_seconds() - t0));
    fflush(stdout);
}

void trainer_free(Trainer *tr) {
    if (tr->jsonl && fclose(tr->jsonl) != 0 && !tr->log_error[0])
        snprintf(tr->log_error, sizeof tr->log_error, "closing the log log_jsonl=%s failed: %s; its last records may be lost\n"
                 "  hint: is the disk full?", tr->cfg.log_jsonl, strerror(errno));
    tr->jsonl = NULL;
    if (tr->tokenizer) tokenizer_free(tr->tokenizer);
    optimizer_free(&tr->opt, tr->be);
    executor_free(&tr->exec);
    free(tr->history);
    ddp_free(&tr->ddp);
    schedule_free(&tr->schedule);
    model_free(&tr->model);
    loader_close(&tr->train);
    if (tr->has_val) loader_close(&tr->val);
    free(tr->ids); free(tr->targets);
    comm_free(&tr->comm);
}

void trainer_update_loss_scale(Trainer *tr, int finite) {
    int dynamic = tr->cfg.precision == PRECISION_FP16;
    int skips = dynamic || tr->cfg.precision == PRECISION_FP8;   /* fp8: a spike past the scales skips the step, as fp16 does */
    if (!finite && !skips) {   /* the same global norm on every rank: every rank stops here alike */
        launch_errors_rank0_only(1);
        die("step %d: the gradients are not finite (global norm %g) and precision=%s has no loss scale to lower: the run stops "
            "rather than train on them\n  hint: look for a NaN in the data or the loss, a learning rate too high (lr=%g) or a rank that "
            "misbehaves; the last complete checkpoint in %s is untouched: resume from it (--resume=1), perhaps with a lower lr",
            tr->step + 1, tr->last_norm, config_precision_name(tr->cfg.precision), tr->cfg.lr, tr->cfg.run_dir);
    }
    if (!finite) {
        tr->skipped_steps++;
        tr->skipped_in_a_row++;
        tr->loss_scale_clean_steps = 0;
        int at_floor = dynamic && tr->loss_scale * 0.5f < LOSS_SCALE_MIN;
        if (at_floor || tr->skipped_in_a_row >= tr->cfg.max_skipped_steps) {   /* the same on every rank: they stop alike */
            char why[160];
            if (at_floor) snprintf(why, sizeof why, "the loss scale %g would fall under its minimum %g (the gradients overflow even unscaled)",
                                tr->loss_scale, (double)LOSS_SCALE_MIN);
            else snprintf(why, sizeof why, "%d steps in a row were skipped (max_skipped_steps=%d)", tr->skipped_in_a_row,
                          tr->cfg.max_skipped_steps);
            launch_errors_rank0_only(1);
            die("step %d: inf/nan in the gradients, and %s: the run stops rather than skip on (%d steps skipped in all)\n"
                "  hint: lower the learning rate (lr=%g) or look for a NaN in the data; no checkpoint in %s was pruned while steps "
                "were skipped, so the last one from before the trouble is still there: resume (--resume=1), perhaps with a lower lr",
                tr->step + 1, why, tr->skipped_steps, tr->cfg.lr, tr->cfg.run_dir);
        }
        if (dynamic) tr->loss_scale *= 0.5f;
        if (tr->comm.rank == 0)
            fprintf(stderr, "warning: step %d: inf/nan in the gradients; the update is skipped%s\n", tr->step + 1,
                    dynamic ? " and the loss scale halved" : " and adds nothing to the FP8 scales' history");
        return;
    }
    tr->skipped_in_a_row = 0;
    if (dynamic && ++tr->loss_scale_clean_steps == LOSS_SCALE_WINDOW) {
        tr->loss_scale *= 2.0f;
        tr->loss_scale_clean_steps = 0;
    }
}

StepStats trainer_step(Trainer *tr) {
    const Config *c = &tr->cfg;
    Model *m = &tr->model;
    StepStats s = {.straggler_rank = -1};
    double t0 = now_seconds();
    int B = c->batch_size, T = c->seq_len, BT = B * T, stage = tr->comm.pp_rank;
    flight_set_step(tr->step + 1);   /* the step the watchdog names */

    /* every micro-batch of the step first: the loss is the mean over all valid targets of all ranks */
    if (fault_now(tr, FAULT_SLOW)) { struct timespec ts = {tr->fault.ms / 1000, (tr->fault.ms % 1000) * 1000000L}; nanosleep(&ts, NULL); }
    loader_next_step(&tr->train, tr->accum, tr->ids, tr->targets);
    s.split.data = now_seconds() - t0;
    long valid = 0;
    for (size_t i = 0; i < (size_t)tr->accum * BT; i++) valid += tr->targets[i] != IGNORE_INDEX;
    double total_valid = comm_sum(&tr->comm, GROUP_DP, (double)valid);   /* counted on whole sequences: every cp rank has them */
    context_slice_tokens(tr->ids, tr->accum, B, T, c->cp, tr->comm.cp_rank);   /* cp: my chunks of each sequence (model/context.h) */
    context_slice_tokens(tr->targets, tr->accum, B, T, c->cp, tr->comm.cp_rank);
    float dloss = total_valid > 0 ? (float)(tr->loss_scale / total_valid) : 0.0f;   /* gradients come out x loss_scale */
    if (fault_now(tr, FAULT_NAN)) dloss = NAN;
    if (fault_now(tr, FAULT_EXIT)) { fprintf(stderr, "fault: rank %d exits at step %d\n", tr->comm.rank, tr->step + 1); _exit(3); }
    if (fault_now(tr, FAULT_STALL)) {   /* a GPU rank on NCCL: its comm stream stops, its collectives never complete; else it sleeps */
        fprintf(stderr, "fault: rank %d stalls at step %d\n", tr->comm.rank, tr->step + 1);
        if (!comm_fault_hang(&tr->comm)) for (;;) pause();
    }

    model_zero_grads(m);
    double loss_sum = executor_run(&tr->exec, tr->schedule.list[stage], tr->schedule.n[stage], tr->ids, tr->targets, B, T / c->cp, dloss);
    loss_sum = comm_sum(&tr->comm, GROUP_PP, loss_sum);   /* the last stage computed it */
    loss_sum = comm_sum(&tr->comm, GROUP_CP, loss_sum);   /* each cp rank its tokens' */
    loss_sum = comm_sum(&tr->comm, GROUP_DP, loss_sum);
    tr->be->synchronize();
    tr->step++;
    tr->comm.timeout_s = c->comm_timeout_s;   /* past the first step: the plain deadline */

    s.loss = total_valid > 0 ? loss_sum / total_valid : 0;
    s.grad_norm = tr->last_norm;
    s.lr = tr->last_lr;
    s.ms = (now_seconds() - t0) * 1e3;
    s.tokens_per_s = (double)tr->accum * BT * tr->comm.dp / (s.ms / 1e3);
    s.mfu = tr->be->peak_flops > 0 ? s.tokens_per_s * model_flops_per_token(&tr->model_cfg) / (tr->be->peak_flops * tr->comm.world_size) : 0;
    s.device_bytes = tr->be->memory_in_use();
    /* the split: the executor's device-clock pieces, the loader, and the host's own work as the rest */
    const ExecSplit *x = &tr->exec.split;
    StepSplit *p = &s.split;
    p->step = s.ms / 1e3;
    p->compute = x->compute_s; p->exposed = x->exposed_s; p->bubble = x->bubble_s; p->optimizer = x->optimizer_s;
    p->comm_busy = x->comm_busy_s;
    p->host = p->step - p->data - p->compute - p->exposed - p->bubble - p->optimizer;
    if (c->profile_out[0]) {
        tr->history = realloc(tr->history, (size_t)(tr->n_history + 1) * sizeof(StepSplit));
        if (!tr->history) die("out of host memory for the step profile");
        tr->history[tr->n_history++] = *p;
    }
    if (tr->step % c->log_every == 0 || tr->step == c->max_steps) {   /* every rank's split, to name the slowest */
        int n = tr->comm.world_size;
        StepSplit *all = mallocCheck((size_t)n * sizeof(StepSplit));
        comm_allgather_host(&tr->comm, GROUP_WORLD, p, all, sizeof(StepSplit));
        double most = -1;
        for (int r = 0; r < n; r++) {
            double busy = all[r].data + all[r].compute + all[r].optimizer;
            if (busy > most) { most = busy; s.slowest_rank = r; }
            double pipeline = all[r].compute + all[r].exposed + all[r].bubble;   /* what the formula's fraction is of */
            s.bubble += all[r].bubble / (pipeline > 0 ? pipeline : 1) / n;
        }
        s.slowest = all[s.slowest_rank];
        s.reported = 1;
        straggler_find(&s, all, n, c->pp, c->tp * c->cp, c->straggler_pct);   /* a stage's ranks: tp x cp apart */
        free(all);
    }
    return s;
}

/* The first config_eval_sequences() sequences of the val split (eval_tokens of them in tokens), the same
 * on every layout and batch size: they make micro-batches of batch_size in order, micro-batch j runs on
 * data-parallel rank j % dp, through the pipeline with a forwards-only schedule. Every rank runs the same
 * number of micro-batches (with zero=3 each one gathers weights over the data-parallel group), so the
 * places past the last sequence are padding: token 0 in, IGNORE_INDEX out, counted nowhere. The loss is
 * the sum over every scored token of every rank over their count: the token-weighted mean, whatever the
 * layout; only the order of the fp32 sums differs. */
double trainer_eval(Trainer *tr) {
    if (!tr->has_val) return NAN;
    const Config *c = &tr->cfg;
    int B = c->batch_size, T = c->seq_len, dp = tr->comm.dp, me = tr->comm.dp_rank;
    size_t BT = (size_t)B * T;
    long n = config_eval_sequences(c);
    if (n > tr->val.n_samples) n = (long)tr->val.n_samples;
    long batches = (n + B - 1) / B;
    int mine = (int)((batches + dp - 1) / dp);
    int *ids = mallocCheck((mine + 1) * BT * sizeof(int)), *targets = mallocCheck((mine + 1) * BT * sizeof(int));
    loader_reset(&tr->val);
    double count = 0;
    for (int k = 0; k < mine; k++)
        for (int b = 0; b < B; b++) {
            long sequence = ((long)k * dp + me) * B + b;
            int *in = ids + k * BT + (size_t)b * T, *out = targets + k * BT + (size_t)b * T;
            if (sequence < n) loader_fetch(&tr->val, sequence, in, out);   /* the val loader reads one sequence at a time */
            else for (int t = 0; t < T; t++) { in[t] = 0; out[t] = IGNORE_INDEX; }
            for (int t = 0; t < T; t++) count += out[t] != IGNORE_INDEX;
        }
    context_slice_tokens(ids, mine, B, T, c->cp, tr->comm.cp_rank);   /* counted above on whole sequences */
    context_slice_tokens(targets, mine, B, T, c->cp, tr->comm.cp_rank);
    Schedule ev;
    eval_schedule(&ev, tr, mine);
    if (ev.slots[tr->comm.pp_rank] > tr->model.part.n_slots) die("internal: evaluation needs %d activation slots", ev.slots[tr->comm.pp_rank]);
    double sum = executor_run(&tr->exec, ev.list[tr->comm.pp_rank], ev.n[tr->comm.pp_rank], ids, targets, B, T / c->cp, 0.0f);
    schedule_free(&ev);
    free(ids); free(targets);
    sum = comm_sum(&tr->comm, GROUP_PP, sum);
    sum = comm_sum(&tr->comm, GROUP_CP, sum);
    sum = comm_sum(&tr->comm, GROUP_DP, sum);
    count = comm_sum(&tr->comm, GROUP_DP, count);
    return count > 0 ? sum / count : NAN;
}

static double pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

/* " | 4m12s left" on a run that has gone 10 s or more: the steps to go at the mean pace since the
 * first logged step (evaluations, samples and checkpoints included), so a long first run says when it ends. */
static void print_time_left(Trainer *tr) {
    double now = now_seconds();
    if (tr->eta_t0 == 0) { tr->eta_t0 = now; tr->eta_step0 = tr->step; return; }
    double spent = now - tr->eta_t0;
    int done = tr->step - tr->eta_step0, to_go = tr->cfg.max_steps - tr->step;
    if (spent < 10 || done < 1 || to_go < 1) return;
    long left = lround(spent / done * to_go);
    if (left >= 3600) printf(" | %ldh%02ldm left", left / 3600, left / 60 % 60);
    else if (left >= 60) printf(" | %ldm%02lds left", left / 60, left % 60);
    else printf(" | %lds left", left);
}

void trainer_log_step(Trainer *tr, const StepStats *s) {
    const Config *c = &tr->cfg;
    if (tr->comm.rank != 0) return;
    const StepSplit *w = &s->slowest;
    if (tr->step % c->log_every == 0 || tr->step == c->max_steps) {
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s", tr->step, c->max_steps, s->loss,
               s->lr, s->grad_norm, s->ms, s->tokens_per_s);
        print_time_left(tr);
        if (s->mfu > 0) printf(" | mfu %4.1f%%", 100 * s->mfu);
        if (s->device_bytes) { char b[32]; printf(" | mem %s", format_bytes((double)s->device_bytes, b, sizeof b)); }
        if (c->precision == PRECISION_FP16) printf(" | scale %g", tr->loss_scale);
        if (tr->skipped_steps) printf(" | skipped %d", tr->skipped_steps);
        if (tr->model.part.fp8) printf(" | fp8 %d/%d", model_fp8_scaled(&tr->model), model_fp8_tensors(&tr->model));
        if (tr->fp8_saturated_total) printf(" | fp8 saturated %d (last step %d)", tr->fp8_saturated_total, tr->fp8_saturated);
        if (c->comm_ablate) printf(" | ABLATED");
        printf("\n");
        if (s->reported && tr->comm.world_size > 1) {   /* where the slowest rank's step went */
            printf("split | rank %d: compute %.1f%% | comm exposed %.1f%% of %.1f%% busy | bubble %.1f%%", s->slowest_rank,
                   pct(w->compute, w->step), pct(w->exposed, w->step), pct(w->comm_busy, w->step), pct(w->bubble, w->step));
            if (c->pp > 1) printf(" (of the pipeline's time, mean over ranks %.1f%%, formula %.1f%%)", 100 * s->bubble,
                                  100 * schedule_bubble_formula(&tr->schedule));
            printf(" | optimizer %.1f%% | data %.1f%% | host %.1f%%\n", pct(w->optimizer, w->step), pct(w->data, w->step),
                   pct(w->host, w->step));
        }
        straggler_print(s, c->straggler_pct, stdout);
        fflush(stdout);
    }
    if (tr->jsonl) {
        char loss[32], norm[32];   /* a diverged step's nan is JSON's null, so the log stays JSON and `plot` draws up to it */
        fprintf(tr->jsonl, "{\"step\": %d, \"loss\": %s, \"lr\": %.6g, \"grad_norm\": %s, \"ms\": %.3f, \"tokens_per_s\": %.1f",
                tr->step, json_real(loss, sizeof loss, "%.6f", s->loss), s->lr, json_real(norm, sizeof norm, "%.6f", s->grad_norm), s->ms,
                s->tokens_per_s);
        if (s->mfu > 0) fprintf(tr->jsonl, ", \"mfu\": %.4f", s->mfu);
        if (s->device_bytes) fprintf(tr->jsonl, ", \"device_bytes\": %zu", s->device_bytes);
        fprintf(tr->jsonl, ", \"loss_scale\": %g, \"skipped_steps\": %d", tr->loss_scale, tr->skipped_steps);
        if (tr->model.part.fp8) fprintf(tr->jsonl, ", \"fp8_tensors\": %d, \"fp8_scales\": %ld, \"fp8_saturated\": %d",
                                        model_fp8_scaled(&tr->model), model_fp8_fingerprint(&tr->model), tr->fp8_saturated);
        if (s->reported)
            fprintf(tr->jsonl, ", \"slowest_rank\": %d, \"split_step_ms\": %.3f, \"compute_ms\": %.3f, \"comm_exposed_ms\": %.3f, \"comm_busy_ms\": %.3f, "
                               "\"bubble_ms\": %.3f, \"bubble_mean\": %.4f, \"optimizer_ms\": %.3f, \"data_ms\": %.3f, \"host_ms\": %.3f",
                    s->slowest_rank, 1e3 * w->step, 1e3 * w->compute, 1e3 * w->exposed, 1e3 * w->comm_busy, 1e3 * w->bubble, s->bubble,
                    1e3 * w->optimizer, 1e3 * w->data, 1e3 * w->host);
        if (s->straggler_rank >= 0)
            fprintf(tr->jsonl, ", \"straggler_rank\": %d, \"straggler_work_ms\": %.3f, \"straggler_median_ms\": %.3f", s->straggler_rank,
                    1e3 * (s->straggler.data + s->straggler.compute + s->straggler.optimizer), 1e3 * s->straggler_median);
        if (c->comm_ablate) fprintf(tr->jsonl, ", \"comm_ablate\": 1");
        fprintf(tr->jsonl, "}\n");
        trainer_log_flush(tr);
    }
}
