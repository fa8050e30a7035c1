/* train/memory.c — the memory plan, its report, and the out-of-memory advice. */
#include "memory.h"
#include "optimizer.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include <stdlib.h>

MemoryPlan memory_plan(const Config *c, const ModelConfig *mc, const Backend *be, const Comm *comm, const ModelPart *part,
                       int recompute, int optimizer, int compute_weights, int batch_size) {
    Model m;
    ModelPart q = part ? *part : model_part_whole(mc);
    q.weights_per_layer = compute_weights == COMPUTE_WEIGHTS_PER_LAYER;   /* model_plan drops it in fp32 */
    q.fp8 = c->precision == PRECISION_FP8;
    int zero = c->dp * c->cp > 1 ? c->zero : 0;   /* ZeRO shards over dp x cp */
    int T = c->seq_len / (c->cp > 1 ? c->cp : 1);   /* context parallel: this rank's tokens of each sequence */
    q.grads_elsewhere = zero >= 2;
    q.weights_elsewhere = zero == 3;
    q.cp = c->cp;
    model_plan(&m, mc, be, comm, &q, batch_size, T, recompute);
    MemoryPlan p = {0};
    size_t P = m.n_params;
    Config oc = *c;
    oc.optimizer = optimizer;
    OptimizerCut cut = {&m, &oc};
    Ddp d;
    DdpOptions dopt = {c->bucket_mb, c->zero, c->grad_reduce_dtype == GRAD_REDUCE_BF16, optimizer_cut_rule, &cut};
    ddp_plan(&d, &m, comm, &dopt);
    p.master = (d.zero && be->act != DTYPE_FP32) || d.zero == 3 ? 0 : P * 4;   /* zero=1/2 in bf16, zero=3: in the shard */
    p.compute = m.weight_bytes;                                               /* zero=3: none, the places are in shards */
    p.grads = d.zero >= 2 ? 0 : P * 4;                                        /* zero=2/3: the shard and the places */
    p.places = ddp_place_bytes(&d);
    p.shards = ddp_buffer_bytes(&d, be) - p.places;
    OptPiece *pieces = NULL;
    OptimizerView view = d.zero ? optimizer_zero_view(&d, &pieces) : (OptimizerView){0};
    Optimizer o;
    optimizer_plan(&o, &m, &oc, d.zero ? &view : NULL);   /* the optimizer's own layout arithmetic */
    p.optimizer = optimizer_state_bytes(&o);
    optimizer_free(&o, be);
    free(pieces);
    ddp_free(&d);
    p.activations = m.act_bytes;
    if (be->workspace_bytes) {   /* the CUDA kernels' scratch: attention's per-query statistics, dS tiles and dQ accumulator, the embedding backward's sort */
        size_t N = (size_t)batch_size * T;
        AttentionScratch a = attention_backward_scratch(batch_size, T, m.NH, m.HD, be->act);
        if (c->cp > 1) a.dq_accum = 0;   /* cp's offset-form kernels keep no dQ accumulator */
        p.workspace = be->workspace_bytes + a.row_sums + a.dq_accum + N * 16;
        if (a.ds_tiles > model_attention_work_bytes(&m, batch_size, T)) p.workspace += a.ds_tiles;   /* more than the model lends */
    }
    p.total = p.master + p.compute + p.grads + p.optimizer + p.shards + p.places + p.activations + p.workspace;
    model_plan_free(&m);
    return p;
}

int memory_per_layer_switch(const Config *c, const Backend *be) { return be->act != DTYPE_FP32 && !(c->zero && c->dp * c->cp > 1); }

Backend memory_plan_backend(const Config *c) {
    DType act = config_act_dtype(c->precision);
    if (c->device == DEVICE_CPU) return *backend_cpu_emulated(act);
    Backend b = *backend_cpu();
    b.name = "cuda";
    b.act = act;
    b.emulated = 0;
    b.workspace_bytes = BACKEND_CUDA_WORKSPACE_BYTES;
    b.fp8_bytes = 1;
    b.memory_free = NULL;
    return b;
}

void memory_print(const MemoryPlan *p, size_t measured_peak, FILE *out) {
    char b[32];
    struct { const char *name; size_t bytes; } rows[] = {
        {"weights (compute copy)", p->compute}, {"master weights (fp32)", p->master}, {"gradients (fp32)", p->grads},
        {"optimizer state", p->optimizer}, {"data-parallel buffers", p->shards}, {"ZeRO-2/3 places", p->places}, {"activations", p->activations}, {"workspaces", p->workspace},
    };
    fprintf(out, "memory | predicted:");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].bytes) fprintf(out, " %s %s |", rows[i].name, format_bytes((double)rows[i].bytes, b, sizeof b));
    fprintf(out, " total %s", format_bytes((double)p->total, b, sizeof b));
    if (measured_peak) {
        char m[32];
        fprintf(out, "\nmemory | measured peak allocated %s: prediction %+.1f%%", format_bytes((double)measured_peak, m, sizeof m),
                100.0 * ((double)p->total - (double)measured_peak) / (double)measured_peak);
    }
    fprintf(out, "\n");
    fflush(out);
}

void memory_print_ranks(const MemoryPlan *p, size_t measured_peak, const Comm *comm, FILE *out) {
    if (comm->world_size == 1) return;
    size_t mine[2] = {p->total, measured_peak}, *all = mallocCheck((size_t)comm->world_size * sizeof mine);
    comm_allgather_host(comm, GROUP_WORLD, mine, all, sizeof mine);
    for (int r = 0; comm->rank == 0 && r < comm->world_size; r++) {
        size_t pred = all[2 * r], got = all[2 * r + 1];
        char b1[32], b2[32];
        int cp = comm->cp > 0 ? comm->cp : 1;
        char at[64] = "";   /* the cp coordinate only where there is one */
        if (cp > 1) snprintf(at, sizeof at, ", cp %d", r / comm->tp % cp);
        fprintf(out, "memory | rank %d (dp %d, pp %d%s, tp %d): predicted %zu bytes (%s), measured peak %zu bytes (%s): prediction %+.1f%%\n", r,
                r / (comm->tp * cp * comm->pp), r / (comm->tp * cp) % comm->pp, at, r % comm->tp, pred, format_bytes((double)pred, b1, sizeof b1), got,
                format_bytes((double)got, b2, sizeof b2), got ? 100.0 * ((double)pred - (double)got) / (double)got : 0.0);
    }
    fflush(out);
    free(all);
}

void memory_check_fits(const MemoryPlan *p, const Config *c, const ModelConfig *mc, const Backend *be, const Comm *comm,
                       const ModelPart *part) {
    size_t avail = be->memory_free ? be->memory_free() : 0;
    if (!avail) return;                       /* the CPU: the operating system decides */
    if (p->total <= avail) return;
    char need[32], have[32];
    fprintf(stderr, "error: this run needs about %s of GPU memory and %s is free:\n", format_bytes((double)p->total, need, sizeof need),
            format_bytes((double)avail, have, sizeof have));
    memory_print(p, 0, stderr);
    fprintf(stderr, "  settings that fit, by the same prediction (fewest changes first):\n");
    static const char *rname[] = {"none", "selective", "full"}, *oname[] = {"adamw", "adamw8bit"};
    int shown = 0, last_w = memory_per_layer_switch(c, be) ? COMPUTE_WEIGHTS_PER_LAYER : c->compute_weights;
    for (int changes = 1; changes <= 4 && shown < 6; changes++)
        for (int b = c->batch_size; b >= 1 && shown < 6; b /= 2)
            for (int r = c->recompute; r <= RECOMPUTE_FULL && shown < 6; r++)
                for (int o = c->optimizer; o <= OPTIMIZER_ADAMW8BIT && shown < 6; o++)
                    for (int w = c->compute_weights; w <= last_w && shown < 6; w++) {
                        int n = (b != c->batch_size) + (r != c->recompute) + (o != c->optimizer) + (w != c->compute_weights);
                        if (n != changes) continue;
                        MemoryPlan q = memory_plan(c, mc, be, comm, part, r, o, w, b);
                        if (q.total > avail) continue;
                        fprintf(stderr, "    ");
                        if (r != c->recompute) fprintf(stderr, "--recompute=%s ", rname[r]);
                        if (o != c->optimizer) fprintf(stderr, "--optimizer=%s ", oname[o]);
                        if (w != c->compute_weights) fprintf(stderr, "--compute_weights=per_layer ");
                        if (b != c->batch_size) fprintf(stderr, "--batch_size=%d --total_batch_tokens=%ld ", b,
                                                        c->total_batch_tokens ? (long)c->total_batch_tokens : (long)c->batch_size * c->seq_len);
                        fprintf(stderr, "(%s)\n", format_bytes((double)q.total, need, sizeof need));
                        shown++;
                    }
    for (int z = c->zero + 1; c->dp * c->cp > 1 && z <= 3 && !(z >= 2 && (c->tie_embeddings || c->grad_reduce_dtype == GRAD_REDUCE_BF16)); z++) {
        Config zc = *c;   /* ZeRO-2/3 shard the gradients and weights over the dp ranks (docs/zero.md) */
        zc.zero = z;
        if (z == 3) zc.compute_weights = COMPUTE_WEIGHTS_KEEP;
        ModelPart q = part ? *part : model_part_whole(mc);
        q.grads_elsewhere = z >= 2;
        q.weights_elsewhere = z == 3;
        q.master_in_shard = be->act != DTYPE_FP32 && z < 3;
        q.weights_per_layer = 0;
        MemoryPlan zp = memory_plan(&zc, mc, be, comm, &q, c->recompute, c->optimizer, zc.compute_weights, c->batch_size);
        if (zp.total > avail) continue;
        fprintf(stderr, "    --zero=%d%s (%s)\n", z, z == 3 && c->compute_weights != COMPUTE_WEIGHTS_KEEP ? " --compute_weights=keep" : "",
                format_bytes((double)zp.total, need, sizeof need));
        shown++;
        break;
    }
    if (!shown)
        fprintf(stderr, "    none of recompute, adamw8bit, compute_weights=per_layer, ZeRO or a smaller batch_size: use a smaller model or more GPUs\n");
    exit(1);
}
