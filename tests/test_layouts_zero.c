/* tests/test_layouts_zero.c — ZeRO-2 and ZeRO-3 keep the layout promise (docs/zero.md): gradients, then
 * weights too, sharded over dp give one rank's losses and tensors (fp32: within 1e-5) with dp=2/4, tp with
 * sequence parallelism, pp (1F1B and interleaved), full recompute, bf16 and fp16; their checkpoints stay whole
 * tensors (zero=3 saved, tp=2 resumed, and back); the memory plan is what each rank allocates; what ZeRO-2/3
 * cannot take is refused in one line. The 8-bit cases are in test_layouts_q8. Harness: tests/layouts.h. */
#include "test.h"
#include "layouts.h"

/* ZeRO-2 and ZeRO-3 (docs/zero.md): gradients, then weights too, sharded over dp. Every run here accumulates
 * (256 tokens a step over dp ranks of 2x16-token micro-batches: 4 micro-batches a rank at dp=2, 2 at dp=4), so the
 * gradient shards add up micro-batches and zero=3 gathers every unit again for each of them. */
static void zero_stages(void) {
    layout("ref", "dp2z2", 2, "--dp=2 --zero=2", fp32);
    layout("ref", "dp4z2", 4, "--dp=4 --zero=2", fp32);
    layout("ref", "dp2z3", 2, "--dp=2 --zero=3", fp32);
    CHECK(strstr(out, "| ZeRO-3"), "zero=3 with dp=2 says it runs ZeRO-3:\n%s", out);
    layout("ref", "dp4z3", 4, "--dp=4 --zero=3", fp32);
    layout("ref", "dp2z3rf", 2, "--dp=2 --zero=3 --recompute=full", fp32);
    layout("ref", "dp2tp2z3", 4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=3", fp32);
    layout("ref", "dp2pp2z3", 4, "--dp=2 --pp=2 --zero=3", fp32);
    layout("ref", "dp2pp2z2", 4, "--dp=2 --pp=2 --pp_schedule=interleaved --zero=2", fp32);
    /* bf16 and fp16: within their rounding, as ZeRO-1's (above) */
    layout_tol("refbf", "dp2z3bf", 2, "--dp=2 --zero=3 --precision=bf16", bf16, 1e-2);
    layout_tol("ref16", "dp2z3f16", 2, "--dp=2 --zero=3 --precision=fp16 --recompute=selective", bf16, 1e-2);
    /* checkpoints stay whole tensors: zero=3 saved, tp=2 resumed, and back */
    resume("ref", "rz3t", 2, "--dp=2 --zero=3", 2, "--tp=2");
    resume("ref", "rtz3", 2, "--tp=2", 2, "--dp=2 --zero=3");
    /* the memory plan counts the shards and places: each rank's prediction is what it allocates; each stage saves */
    size_t z2 = memory_same(2, "--dp=2 --zero=2 --precision=bf16"), z3 = memory_same(2, "--dp=2 --zero=3 --precision=bf16");
    memory_same(4, "--dp=2 --pp=2 --zero=3 --recompute=full");
    CHECK(z3 < z2, "zero=3 holds less than zero=2: %zu bytes vs %zu", z3, z2);
    refused(1, "--zero=2", "zero=2 shards gradients over the data-parallel ranks, and dp=1");
    refused(2, "--dp=2 --zero=3 --compute_weights=per_layer --precision=bf16", "zero=3 gathers each unit's compute weights");
    refused(2, "--dp=2 --zero=3 --tie_embeddings=1", "tie_embeddings=1 makes the LM head write the embedding's gradient");
    refused(2, "--dp=2 --zero=2 --precision=bf16 --grad_reduce_dtype=bf16", "zero=2 reduce-scatters each unit's fp32 gradient");
}

int main(void) {
#ifndef LLM3D_MPI
    printf("skipped: this build has no Open MPI, so only the one-rank grid exists\n");
    return test_summary();
#endif
    layouts_begin();
    layouts_references();
    zero_stages();
    return layouts_end();
}
