/* tests/mpi/overlap.c — run under `mpirun -np 2` (tests/test_mpi.sh): data
 * parallelism reduces its buckets while the backward still runs.
 *
 * From the executor's own log of one step on 2 data-parallel ranks (4 layers,
 * a bucket per layer): the reduction of the first bucket — the last layers,
 * completed first — starts before the backward of layer 0 and the embedding
 * has run; every bucket is reduced exactly once, on the last micro-batch only
 * (the earlier micro-batches just accumulate); and all reductions are waited
 * for only after the whole backward. The log is printed as a timeline. */
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
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_overlap_%d.bin", (int)getpid());
    uint32_t tok[4096];
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 4096; i++) tok[i] = (uint32_t)(rng_u64(&r) % 61);
    shard_write(shard, tok, 4096, 61);
    Config c;
    config_defaults(&c);
    c.dim = 32; c.n_layers = 4; c.n_heads = 4; c.n_kv_heads = 2; c.ffn_dim = 64; c.seq_len = 16; c.vocab_size = 61;
    c.batch_size = 2; c.dp = 2; c.total_batch_tokens = 2 * 16 * 2 * 3;   /* 3 micro-batches per rank */
    c.bucket_mb = 0.001f;   /* every layer its own bucket */
    c.max_steps = 1; c.warmup_steps = 0; c.val_data[0] = 0;
    snprintf(c.train_data, sizeof c.train_data, "%s", shard);
    Trainer tr;
    trainer_init(&tr, &c);
    trainer_step(&tr);
    const Executor *e = &tr.exec;
    int nb = tr.ddp.n_buckets, first_reduce = -1, last_backward = -1, reduces = 0, first_wait = -1;
    for (int i = 0; i < e->n_log; i++) {
        const ExecEvent *v = &e->log[i];
        if (v->kind == ACT_REDUCE) { reduces++; if (v->bucket == 0) first_reduce = i; }
        if (v->kind == ACT_BACKWARD) last_backward = i;
        if (v->kind == ACT_REDUCE_WAIT && first_wait < 0) first_wait = i;
    }
    if (li->rank == 0) {
        printf("rank 0's step, %d buckets (time in ms from the step's start):\n", nb);
        for (int i = 0; i < e->n_log; i++) {
            const ExecEvent *v = &e->log[i];
            printf("  %8.3f %8.3f  %-11s", 1e3 * v->start, 1e3 * v->end, action_names[v->kind]);
            if (v->kind == ACT_FORWARD || v->kind == ACT_BACKWARD) printf(" micro-batch %d", v->mb);
            if (v->kind == ACT_BACKWARD) printf(" steps %d..%d", v->from, v->to);
            if (v->kind >= ACT_REDUCE && v->kind != ACT_OPTIMIZER) printf(" bucket %d", v->bucket);
            printf("\n");
        }
    }
    CHECK(nb >= 4, "a bucket per layer: %d buckets", nb);
    CHECK(reduces == nb, "each bucket reduced once a step (on the last micro-batch only): %d reductions for %d buckets", reduces, nb);
    CHECK(first_reduce >= 0 && first_reduce < last_backward, "bucket 0's reduction (action %d) starts before the last backward action (%d)",
          first_reduce, last_backward);
    const ExecEvent *last = &e->log[last_backward];
    CHECK(last->to == model_backward_steps(&tr.model, 0) && last->from > 0,
          "the last backward action is the tail of the backward (steps %d..%d), split where buckets start", last->from, last->to);
    CHECK(first_reduce >= 0 && e->log[first_reduce].start <= last->start, "bucket 0's reduction started (%.3f ms) before layer 0's backward (%.3f ms)",
          first_reduce >= 0 ? 1e3 * e->log[first_reduce].start : -1.0, 1e3 * last->start);
    CHECK(first_wait > last_backward, "the reductions are waited for after the backward (first wait at action %d)", first_wait);
    trainer_free(&tr);
    unlink(shard);
    return test_summary();
}
