/* tests/mpi/zero_overlap.c — run under `mpirun -np 2` (tests/test_mpi.sh):
 * ZeRO-3's gathers run ahead of the compute that needs them (docs/zero.md).
 *
 * From the executor's own log of one step on 2 data-parallel ranks with
 * zero=3 (4 layers, 3 micro-batches a rank): the gather of the next unit's
 * weights starts before this unit's compute ends, for every layer of every
 * forward; every layer is gathered again in each micro-batch (two places
 * serve all layers in turn) and each gather is released; every unit's gradient
 * is reduce-scattered once per micro-batch, starting right after the action
 * that wrote it, before the backward is over. The first micro-batch's part of
 * the log is printed as a timeline. */
#include "../test.h"
#include "../../common/util.h"
#include "../../data/shard.h"
#include "../../comm/launch.h"
#include "../../train/trainer.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    launch_init(&argc, &argv);
    const LaunchInfo *li = launch_info();
    if (li->world != 2) die("run me under mpirun -np 2");
    char shard[256];   /* each rank its own copy of the same tokens */
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_zero_overlap_%d.bin", (int)getpid());
    uint32_t tok[4096];
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 4096; i++) tok[i] = (uint32_t)(rng_u64(&r) % 61);
    shard_write(shard, tok, 4096, 61);
    Config c;
    config_defaults(&c);
    c.dim = 32; c.n_layers = 4; c.n_heads = 4; c.n_kv_heads = 2; c.ffn_dim = 64; c.seq_len = 16; c.vocab_size = 61;
    c.batch_size = 2; c.dp = 2; c.zero = 3; c.total_batch_tokens = 2 * 16 * 2 * 3;   /* 3 micro-batches per rank */
    c.max_steps = 1; c.warmup_steps = 0; c.val_data[0] = 0;
    snprintf(c.train_data, sizeof c.train_data, "%s", shard);
    Trainer tr;
    trainer_init(&tr, &c);
    trainer_step(&tr);
    const Executor *e = &tr.exec;
    const Model *m = &tr.model;
    int units = m->n_units, micro = 3, gathers = 0, frees = 0, reduces = 0, layer_uses = 0, prefetched = 0, last_backward = -1;
    int first_reduce = -1;
    for (int i = 0; i < e->n_log; i++) {
        const ExecEvent *v = &e->log[i];
        gathers += v->kind == ACT_GATHER;
        frees += v->kind == ACT_FREE;
        reduces += v->kind == ACT_REDUCE;
        if (v->kind == ACT_REDUCE && first_reduce < 0) first_reduce = i;
        if (v->kind == ACT_BACKWARD) last_backward = i;
        if (v->kind != ACT_FORWARD) continue;
        int u = model_forward_step_unit(m, v->chunk, v->from);
        if (u == 0 || u == units - 1) continue;   /* the layers: the unit after each is another layer or the head */
        layer_uses++;
        /* the next unit's weights: their latest gather before its forward started no later than this forward's end
         * (earlier still when they stayed from the previous micro-batch's backward, which read them last) */
        int next = tr.ddp.bucket_of_unit[u + 1], g = -1, j = i + 1;
        while (j < e->n_log && e->log[j].kind != ACT_FORWARD) j++;
        for (int k = 0; k < j; k++)
            if (e->log[k].kind == ACT_GATHER && e->log[k].bucket == next) g = k;
        if (g >= 0 && e->log[g].start <= v->end) prefetched++;
    }
    if (li->rank == 0) {
        printf("rank 0's step with zero=3, micro-batch 0 (time in ms from the step's start):\n");
        for (int i = 0; i < e->n_log; i++) {
            const ExecEvent *v = &e->log[i];
            if ((v->kind == ACT_FORWARD || v->kind == ACT_BACKWARD) && v->mb > 0) break;
            printf("  %8.3f %8.3f  %-11s", 1e3 * v->start, 1e3 * v->end, action_names[v->kind]);
            if (v->kind == ACT_FORWARD || v->kind == ACT_BACKWARD) printf(" micro-batch %d step %d", v->mb, v->from);
            else printf(" bucket %d", v->bucket);
            printf("\n");
        }
    }
    CHECK(tr.ddp.zero == 3 && !m->params && !m->params_compute && !m->grads, "zero=3: the model holds no whole weights or gradients");
    CHECK(layer_uses == micro * c.n_layers, "every layer's forward ran once a micro-batch: %d", layer_uses);
    CHECK(prefetched == layer_uses, "the next unit's gather started before this layer's forward ended: %d of %d", prefetched, layer_uses);
    /* two layer places taken in turn: every layer's weights are gathered again in every micro-batch; the embedding and
     * the head, alone in their places, stay there from one use to the next (released at the step's end) */
    int fewest = micro * 9;
    for (int u = 1; u < units - 1; u++) {
        int n = 0;
        for (int i = 0; i < e->n_log; i++) n += e->log[i].kind == ACT_GATHER && e->log[i].bucket == tr.ddp.bucket_of_unit[u];
        if (n < fewest) fewest = n;
    }
    CHECK(fewest >= micro && gathers == frees, "each layer is gathered again every micro-batch (at least %d times for %d micro-batches); "
          "%d gathers, each released (%d frees)", fewest, micro, gathers, frees);
    CHECK(reduces == micro * tr.ddp.n_buckets, "each unit's gradient reduced once a micro-batch: %d reductions, %d buckets", reduces,
          tr.ddp.n_buckets);
    CHECK(first_reduce >= 0 && first_reduce < last_backward, "the first reduction (action %d) starts before the last backward (%d)",
          first_reduce, last_backward);
    trainer_free(&tr);
    unlink(shard);
    return test_summary();
}
