/* tests/async_check.h — the copies that do not wait for the device, checked on
 * any backend: tests/test_async.c runs check_async on the CPU backends,
 * tests/gpu/test_cuda_model.c on the GPU.
 *
 * The idea: waiting less must change nothing. Uploads queued back to back
 * from one reused host buffer all arrive (the CUDA staging ring never hands
 * out a slot whose copy has not run), and the loss a step reads back once is
 * the loss each forward read back at once before, bit for bit. */
#pragma once
#include "test.h"
#include "../common/util.h"
#include "../model/llama.h"
#include "../parallel/executor.h"
#include <stdlib.h>
#include <string.h>

/* More uploads than the CUDA ring has slots (16), growing in size (a slot
 * grows), from one host buffer overwritten right after each call, queued
 * before one synchronize; then each read back without waiting. */
static inline void check_async_uploads(const Backend *be) {
    enum { UPLOADS = 40 };
    size_t most = 3000 + 1500 * (size_t)UPLOADS;
    int *src = mallocCheck(most * sizeof(int)), *back[UPLOADS];
    void *dev[UPLOADS];
    for (int k = 0; k < UPLOADS; k++) {
        size_t n = 3000 + 1500 * (size_t)k;
        dev[k] = be->alloc(n * sizeof(int), "test uploads");
        for (size_t i = 0; i < n; i++) src[i] = k * 1000003 + (int)i;
        be->upload_async(dev[k], src, n * sizeof(int));
        memset(src, 0xff, n * sizeof(int));   /* the caller's buffer is free on return */
    }
    for (int k = 0; k < UPLOADS; k++) {
        size_t n = 3000 + 1500 * (size_t)k;
        back[k] = be->alloc_host(n * sizeof(int), "test downloads");
        be->download_async(back[k], dev[k], n * sizeof(int));
    }
    be->synchronize();
    long bad = 0;
    for (int k = 0; k < UPLOADS; k++) {
        size_t n = 3000 + 1500 * (size_t)k;
        for (size_t i = 0; i < n; i++) bad += back[k][i] != k * 1000003 + (int)i;
        be->free(dev[k]);
        be->free_host(back[k]);
    }
    CHECK(bad == 0, "%s: %ld values of %d queued uploads arrived wrong", be->name, bad, UPLOADS);
    free(src);
}

/* What head_forward did before: each micro-batch's per-token losses read back
 * at once and summed in double in token order; ref[k] is the sum over
 * micro-batches 0..k-1, added in their order. model_forward must agree. */
static inline void reference_losses(Model *m, const int *ids, const int *targets, int n_mb, int B, int T, double *ref) {
    size_t BT = (size_t)B * T;
    float *host = mallocCheck(BT * sizeof(float));
    int same = 1;
    ref[0] = 0;
    for (int k = 0; k < n_mb; k++) {
        double got = model_forward(m, ids + k * BT, targets + k * BT, B, T, 0);
        m->be->download(host, m->slots[0].losses, BT * sizeof(float));
        double sum = 0;
        for (size_t n = 0; n < BT; n++) sum += host[n];
        same &= !memcmp(&got, &sum, sizeof sum);
        ref[k + 1] = ref[k] + sum;
    }
    CHECK(same, "%s: model_forward's loss differs from the per-token losses summed at once", m->be->name);
    free(host);
}

/* The step's loss, read back once by the executor, against the reference:
 * accumulation of 3 micro-batches in one slot (1F1B on one stage), GPipe's 3
 * slots in flight, and forwards only over more micro-batches than the model
 * has loss regions (they are folded in early). */
static inline void check_deferred_losses(Model *m, const Comm *comm, const int *ids, const int *targets, int n_mb, int B, int T) {
    double *ref = mallocCheck(((size_t)n_mb + 1) * sizeof(double));
    reference_losses(m, ids, targets, n_mb, B, T, ref);
    int steps = model_backward_steps(m, 0);
    struct { int kind, n, forward_only; const char *name; } cases[3] = {
        {PP_1F1B, 3, 0, "accumulation of 3 micro-batches (1F1B, one slot)"},
        {PP_GPIPE, 3, 0, "GPipe, 3 slots in flight"},
        {PP_1F1B, n_mb, 1, "forwards only, more than MODEL_LOSS_REGIONS"},
    };
    for (int c = 0; c < 3; c++) {
        Schedule s;
        if (cases[c].forward_only) schedule_build_forward(&s, PP_1F1B, 1, cases[c].n, 1);
        else schedule_build(&s, cases[c].kind, 1, cases[c].n, 1, &steps, ZB1_MEMORY_1F1B);
        schedule_assign_slots(&s);
        if (s.slots[0] > m->part.n_slots) die("test: the schedule needs %d slots, the model has %d", s.slots[0], m->part.n_slots);
        Executor e = {.model = m, .comm = comm};
        model_zero_grads(m);
        double loss = executor_run(&e, s.list[0], s.n[0], ids, targets, B, T, cases[c].forward_only ? 0 : 1.0f / (B * T));
        CHECK(!memcmp(&loss, &ref[cases[c].n], sizeof loss), "%s %s: loss %.17g, read back at once %.17g", m->be->name,
              cases[c].name, loss, ref[cases[c].n]);
        executor_free(&e);
        schedule_free(&s);
    }
    CHECK(n_mb <= MODEL_LOSS_REGIONS || m->n_loss_regions == MODEL_LOSS_REGIONS, "%s: %d loss regions for %d forwards",
          m->be->name, m->n_loss_regions, n_mb);
    free(ref);
}

/* Both checks on backend be, with a small model of 3 slots and 70 random micro-batches (some targets ignored). */
static inline void check_async(const Backend *be) {
    check_async_uploads(be);
    enum { B = 2, T = 16, N_MB = MODEL_LOSS_REGIONS + 6 };
    ModelConfig mc = {.vocab_size = 61, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 64, .seq_len = T,
                      .rope_theta = 10000, .norm_eps = 1e-5f};
    Comm comm;
    comm_init_one(&comm);
    ModelPart part = model_part_whole(&mc);
    part.n_slots = 3;
    Model m;
    model_create(&m, &mc, be, &comm, &part, B, T, RECOMPUTE_NONE);
    model_init_weights(&m, 7, 1.0f);
    size_t n = (size_t)N_MB * B * T;
    int *ids = mallocCheck(n * sizeof(int)), *targets = mallocCheck(n * sizeof(int));
    Rng r;
    rng_seed(&r, 11);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int)(rng_u64(&r) % 61);
        targets[i] = i % 7 == 3 ? IGNORE_INDEX : (int)(rng_u64(&r) % 61);
    }
    check_deferred_losses(&m, &comm, ids, targets, N_MB, B, T);
    model_free(&m);
    comm_free(&comm);
    free(ids); free(targets);
}
