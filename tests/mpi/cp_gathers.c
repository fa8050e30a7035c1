/* tests/mpi/cp_gathers.c — run under `mpirun -np 2` (tests/test_mpi.sh):
 * context parallelism gathers each layer's K/V no more often than it must
 * (model/context.c, docs/context-parallel.md).
 *
 * From the flight recorder's own records of one step of 4 layers on 2 cp
 * ranks: every layer's forward gathers K/V over cp; its backward gathers
 * again, unless the gather just before was the same layer's — the recompute
 * that opens the backward under recompute=selective or full (each layer's
 * K/V then twice a step, not three times), or the last layer's forward right
 * before its backward (2L-1 with no recompute). Each layer reduce-scatters
 * its dK/dV once. The losses of the three modes are the same, bit for bit. */
#include "../test.h"
#include "../../common/util.h"
#include "../../data/shard.h"
#include "../../comm/launch.h"
#include "../../comm/flight.h"
#include "../../train/trainer.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How many all-gathers and reduce-scatters over cp the flight recorder holds among operations first+1 .. last. */
static void count_cp(uint64_t first, uint64_t last, int *gathers, int *scatters) {
    *gathers = *scatters = 0;
    for (uint64_t id = first + 1; id <= last; id++) {
        FlightOp op;
        if (!flight_get(id, &op)) die("test: operation %llu left the flight recorder's ring: the step is too long for it",
                                      (unsigned long long)id);
        if (op.group != GROUP_CP) continue;
        *gathers += !strcmp(op.op, "all-gather");
        *scatters += !strcmp(op.op, "reduce-scatter");
    }
}

int main(int argc, char **argv) {
    launch_init(&argc, &argv);
    const LaunchInfo *li = launch_info();
    if (li->world != 2) die("run me under mpirun -np 2");
    char shard[256];   /* each rank its own copy of the same tokens */
    snprintf(shard, sizeof shard, "/tmp/llm3d_test_cp_gathers_%d.bin", (int)getpid());
    uint32_t tok[4096];
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 4096; i++) tok[i] = (uint32_t)(rng_u64(&r) % 61);
    shard_write(shard, tok, 4096, 61);
    const int layers = 4;
    const char *names[3] = {"none", "selective", "full"};
    int want[3] = {2 * layers - 1, 2 * layers, 2 * layers};
    double loss[3];
    for (int mode = RECOMPUTE_NONE; mode <= RECOMPUTE_FULL; mode++) {
        Config c;
        config_defaults(&c);
        c.dim = 32; c.n_layers = layers; c.n_heads = 4; c.n_kv_heads = 2; c.ffn_dim = 64; c.seq_len = 16; c.vocab_size = 61;
        c.batch_size = 2; c.cp = 2; c.recompute = mode; c.total_batch_tokens = 2 * 16;   /* one micro-batch */
        c.max_steps = 1; c.warmup_steps = 0; c.val_data[0] = 0;
        snprintf(c.train_data, sizeof c.train_data, "%s", shard);
        Trainer tr;
        trainer_init(&tr, &c);
        uint64_t first = flight_last();
        StepStats s = trainer_step(&tr);
        int gathers, scatters;
        count_cp(first, flight_last(), &gathers, &scatters);
        loss[mode] = s.loss;
        if (li->rank == 0)
            printf("recompute=%-9s %d layers: %2d K/V all-gathers over cp (want %d), %d dK/dV reduce-scatters, loss %.6f\n", names[mode],
                   layers, gathers, want[mode], scatters, s.loss);
        CHECK(gathers == want[mode], "recompute=%s: %d K/V all-gathers over cp in a step of %d layers, want %d", names[mode], gathers, layers,
              want[mode]);
        CHECK(scatters == layers, "recompute=%s: %d dK/dV reduce-scatters, want one a layer (%d)", names[mode], scatters, layers);
        trainer_free(&tr);
    }
    CHECK(loss[0] == loss[1] && loss[0] == loss[2], "the three modes' losses are the same: %.9g %.9g %.9g", loss[0], loss[1], loss[2]);
    unlink(shard);
    return test_summary();
}
