/* tests/test_layouts.c — llm3d's promise, end to end: with the same seed and
 * the same total batch, every dp x tp x pp layout trains on the same sequences
 * and gives the same losses and weights as one rank, to rounding.
 *
 * It runs the real program: one rank for the reference, then each layout
 * under `mpirun --oversubscribe` (CPU ranks, a tiny model), and compares the
 * loss of every step and the validation loss (from --log_jsonl) and every
 * tensor of the final checkpoint — weights and both AdamW moments, stored
 * whole by name whatever the layout — within 1e-5 relative (fp32; emulated
 * bf16 within its rounding). Then resume across layouts: a checkpoint written
 * at step 2 by one layout, continued by another, must end where the reference
 * ends. Tensor parallelism is checked on the odd vocabulary of the test data
 * (61: no tp divides it, so every tp run pads it), with GQA at n_kv_heads = tp
 * and 2*tp, tied and untied, with and without sequence parallelism; its Hugging
 * Face export equals the one-rank run's, and the memory plan of every rank
 * equals what that rank allocated. compute_weights=per_layer (each layer cast
 * from the fp32 master just before it runs) gives the very bits of keep under
 * data, tensor and pipeline parallelism. 8-bit AdamW's layouts are in
 * test_layouts_q8.c, ZeRO-2/3's in test_layouts_zero.c; the harness all three
 * share (runs, curves, checkpoint comparison, the environment) in layouts.h.
 *
 * LLM3D_TEST_PART=each runs one layout of each strategy instead of the table:
 * dp (with ZeRO-1), tp (with sequence parallelism), pp (interleaved), dp x tp x
 * pp, one resume across layouts and the refused launches, each as the table
 * runs it. The sanitizer pass (tests/test_asan.sh) runs that part on
 * $BUILD/train of the sanitizer build: its multi-rank code under ASan + UBSan
 * in a few seconds a layout, where the whole table would take minutes. */
#include "test.h"
#include "layouts.h"

static void data_parallel_and_pipeline(void) {
    layout("ref", "dp2", 2, "--dp=2", fp32);
    layout("ref", "dp4", 4, "--dp=4", fp32);
    layout("ref", "dp2z", 2, "--dp=2 --zero=1", fp32);
    layout("ref", "dp4z", 4, "--dp=4 --zero=1", fp32);
    layout("ref", "dp2rf", 2, "--dp=2 --recompute=full", fp32);
    layout("ref", "dp2b", 2, "--dp=2 --bucket_mb=0.004", fp32);
    /* bf16: one rank adds micro-batch 2's weight gradient into micro-batch 1's inside sgemm, dp ranks add whole
     * gradients, so step 1's fp32 gradients differ at ~1e-7; AdamW and the bf16 roundings of the next forwards
     * (one per residual add) turn that into a few flipped bf16 values: measured losses 1e-5, tensors 4.8e-3 (the
     * worst, a norm weight's first moment; about one bf16 ulp, 3.9e-3) */
    layout_tol("refbf", "dp2bf", 2, "--dp=2 --precision=bf16", bf16, 1e-2);
    layout_tol("refbf", "dp2zbf", 2, "--dp=2 --zero=1 --precision=bf16", bf16, 1e-2);
    /* gradients sent in bf16 lose precision on purpose: the losses stay within bf16 rounding, AdamW's moments within a few % */
    layout_tol("refbf", "dp2w", 2, "--dp=2 --zero=1 --precision=bf16 --grad_reduce_dtype=bf16", bf16, 5e-2);
    layout("ref", "pp2", 2, "--pp=2", fp32);
    layout("ref", "pp4", 4, "--pp=4", fp32);
    layout("ref", "pp2g", 2, "--pp=2 --pp_schedule=gpipe", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "pp2u", 2, "--pp=2 --pp_layers=3,1", fp32);
    layout("ref", "dp2pp2", 4, "--dp=2 --pp=2 --zero=1", fp32);
    layout("refbf", "pp2bf", 2, "--pp=2 --precision=bf16 --recompute=full", bf16);
    layout("ref16", "pp2f16", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective", bf16);
    /* per-layer compute weights: the same bits as the compute copy the run above kept */
    layout_tol("dp2bf", "dp2bfw", 2, "--dp=2 --precision=bf16 --compute_weights=per_layer", 0, 0);
    layout_tol("pp2bf", "pp2bfw", 2, "--pp=2 --precision=bf16 --recompute=full --compute_weights=per_layer", 0, 0);
    layout_tol("pp2f16", "pp2f16w", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective --compute_weights=per_layer", 0, 0);
    /* resume across layouts */
    resume("ref", "r21", 2, "--dp=2", 1, "");
    resume("ref", "r14", 1, "", 4, "--dp=4");
    resume("ref", "rz", 2, "--dp=2 --zero=1", 2, "--dp=2");
    resume("ref", "rp", 2, "--pp=2", 4, "--pp=4");
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
    resume("refbf", "rbw", 1, "--precision=bf16", 1, "--precision=bf16 --compute_weights=per_layer");
}

/* Tensor parallel on the odd vocabulary (61 rows: padded at every tp), with and without sequence
 * parallelism, tied and untied; GQA with n_kv_heads = tp and = 2*tp; then with everything else. */
static void tensor_parallel(void) {
    if (train("reft", 1, "--tie_embeddings=1") || train("ref84", 1, H84) || train("ref84t", 1, H84 " --tie_embeddings=1") ||
        train("ref88", 1, H88) || train("ref88t", 1, H88 " --tie_embeddings=1"))
        die("test: a one-rank reference run failed:\n%s", out);
    layout("ref", "tp2", 2, "--tp=2", fp32);
    layout("ref", "tp2s", 2, "--tp=2 --sequence_parallel=1 --recompute=full", fp32);
    layout("reft", "tp2t", 2, "--tp=2 --tie_embeddings=1", fp32);
    layout("ref84", "tp4", 4, "--tp=4 " H84, fp32);
    layout("ref84t", "tp4st", 4, "--tp=4 --sequence_parallel=1 --tie_embeddings=1 " H84, fp32);
    layout("ref88t", "tp4kt", 4, "--tp=4 --tie_embeddings=1 " H88, fp32);
    layout("ref88", "tp4ks", 4, "--tp=4 --sequence_parallel=1 " H88, fp32);
    layout("ref", "dp2tp2", 4, "--dp=2 --tp=2", fp32);
    layout("reft", "dp2tp2st", 4, "--dp=2 --tp=2 --sequence_parallel=1 --tie_embeddings=1 --zero=1", fp32);
    /* with pipeline boundaries of N/tp tokens, recompute (full above), ZeRO-1, bf16 (8-bit AdamW: adamw8bit_layouts) */
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("ref", "tp2pp2s", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective", fp32);
    /* bf16: each rank's partial sums are rounded to bf16 before they are summed over tp (as in Megatron), so the
     * losses stay within bf16 rounding and AdamW's moments of small gradients within a few % */
    layout_tol("refbf", "tp2sbf", 2, "--tp=2 --sequence_parallel=1 --precision=bf16", bf16, 5e-2);
    /* per-layer compute weights, bit for bit: with sequence parallelism; tied, with full recompute */
    layout_tol("tp2sbf", "tp2sbfw", 2, "--tp=2 --sequence_parallel=1 --precision=bf16 --compute_weights=per_layer", 0, 0);
    if (train("tp2tbf", 2, "--tp=2 --tie_embeddings=1 --precision=bf16 --recompute=full") != 0) CHECK(0, "tp=2 tied bf16 failed to run");
    layout_tol("tp2tbf", "tp2tbfw", 2, "--tp=2 --tie_embeddings=1 --precision=bf16 --recompute=full --compute_weights=per_layer", 0, 0);
    export_same("ref", "tp2s", "--tp=2 --sequence_parallel=1 --recompute=full", 0);
    export_same("ref88t", "tp4kt", "--tp=4 --tie_embeddings=1 " H88, 1);
    resume("ref", "rt21", 2, "--tp=2 --sequence_parallel=1", 1, "");
    resume("ref84", "rt24", 2, "--tp=2 " H84, 4, "--tp=4 --sequence_parallel=1 " H84);
    /* the memory plan of every rank is what it allocates; sequence parallelism's saving */
    size_t plain = memory_same(2, "--tp=2"), sp = memory_same(2, "--tp=2 --sequence_parallel=1");
    memory_same(4, "--dp=2 --tp=2 --sequence_parallel=1 --zero=1 --precision=bf16");
    CHECK(sp < plain, "sequence parallelism saves memory: %zu bytes vs %zu without", sp, plain);
    /* per-layer compute weights: the places of a layer and of the vocabulary units, on stages with and without them */
    size_t keep = memory_same(4, "--tp=2 --pp=2 --precision=bf16 --recompute=full");
    size_t layer = memory_same(4, "--tp=2 --pp=2 --precision=bf16 --recompute=full --compute_weights=per_layer");
    memory_same(2, "--pp=2 --precision=bf16 --compute_weights=per_layer");
    CHECK(layer < keep, "per-layer compute weights save memory: %zu bytes vs %zu with the copy", layer, keep);
}

/* The table through NCCL, every rank a test host on the one GPU (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1, tests/gpu/nccl_layouts.sh):
 * the layouts above that each reach another NCCL path, at the same tolerances; every one accumulates gradients over
 * micro-batches (total_batch_tokens 256 = 8 micro-batches of 32 tokens on one rank); the 8-bit AdamW layouts
 * (adamw8bit_layouts) run in the "dp" half. Two halves, so the script can run
 * them side by side: "dp" (data and pipeline parallel, ZeRO-1, 8-bit AdamW, bf16, fp16, recompute, resume) and "tp". */
static void nccl_data_and_pipeline(void) {
    layout("ref", "dp2", 2, "--dp=2", fp32);
    layout("ref", "dp2rf", 2, "--dp=2 --recompute=full", fp32);
    layout("ref", "dp2b", 2, "--dp=2 --bucket_mb=0.004", fp32);
    layout("ref", "dp4z", 4, "--dp=4 --zero=1", fp32);
    layout_tol("refbf", "dp2bf", 2, "--dp=2 --precision=bf16", bf16, 1e-2);
    layout_tol("refbf", "dp2zbf", 2, "--dp=2 --zero=1 --precision=bf16", bf16, 1e-2);
    layout("ref", "pp2", 2, "--pp=2", fp32);
    layout("ref", "pp4", 4, "--pp=4", fp32);
    layout("ref", "pp2g", 2, "--pp=2 --pp_schedule=gpipe", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "pp2u", 2, "--pp=2 --pp_layers=3,1", fp32);
    layout("ref", "dp2pp2", 4, "--dp=2 --pp=2 --zero=1", fp32);
    layout("refbf", "pp2bf", 2, "--pp=2 --precision=bf16 --recompute=full", bf16);
    layout("ref16", "pp2f16", 2, "--pp=2 --pp_schedule=interleaved --precision=fp16 --recompute=selective", bf16);
    layout("ref", "pp4zb", 4, "--pp=4 --pp_schedule=zb1", fp32);
    layout("ref", "pp4zbb", 4, "--pp=4 --pp_schedule=zb1 --zb1_memory=busiest", fp32);   /* ZB-H1's own order: W's put off by the stage */
    layout("ref", "dp2pp2zb3", 4, "--dp=2 --pp=2 --zero=3 --pp_schedule=zb1", fp32);
    /* zbv: its turn on stage p-1 is a copy, every other message a posted NCCL group waited for by the compute stream */
    if (train("ref8", 1, "--n_layers=8")) die("test: a one-rank reference run failed:\n%s", out);
    layout("ref", "pp2zv", 2, "--pp=2 --pp_schedule=zbv", fp32);
    layout("ref8", "pp4zv", 4, "--pp=4 --n_layers=8 --pp_schedule=zbv", fp32);
    layout("ref", "dp2pp2zv3", 4, "--dp=2 --pp=2 --zero=3 --pp_schedule=zbv", fp32);
    resume("ref", "rzv", 2, "--pp=2 --pp_schedule=zbv", 2, "--pp=2 --pp_schedule=zb1");
    resume("ref", "r21", 2, "--dp=2", 1, "");
    resume("ref", "rp", 2, "--pp=2", 4, "--pp=4");
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
}
static void nccl_tensor(void) {
    if (train("ref84", 1, H84)) die("test: a one-rank reference run failed:\n%s", out);
    layout("ref", "tp2", 2, "--tp=2", fp32);
    layout("ref", "tp2s", 2, "--tp=2 --sequence_parallel=1 --recompute=full", fp32);
    layout("ref84", "tp4", 4, "--tp=4 " H84, fp32);
    layout("ref", "dp2tp2", 4, "--dp=2 --tp=2", fp32);
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    layout("ref", "dp2tp2pp2i", 8, "--dp=2 --tp=2 --pp=2 --pp_schedule=interleaved --pp_virtual=2 --zero=1 --sequence_parallel=1", fp32);
    layout("ref", "tp2pp2s", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective", fp32);
    layout("ref", "tp2pp2zv", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective --pp_schedule=zbv", fp32);
    layout_tol("refbf", "tp2sbf", 2, "--tp=2 --sequence_parallel=1 --precision=bf16", bf16, 5e-2);
    /* fp16: partial sums rounded before the tp sum, as bf16 above (measured on CPU ranks: tensors 4.1e-3, a norm weight's v) */
    layout_tol("ref16", "tp2f16", 2, "--tp=2 --precision=fp16 --recompute=selective", bf16, 5e-2);
    resume("ref84", "rt24", 2, "--tp=2 " H84, 4, "--tp=4 --sequence_parallel=1 " H84);
    resume("ref", "r3d", 8, "--dp=2 --tp=2 --pp=2", 2, "--tp=2 --sequence_parallel=1");
}

/* Zero-bubble ZB-H1 (pp_schedule=zb1) and ZB-V (zbv, two chunks a stage in V order): the backward split into B and W
 * is the fused backward's gradients, to rounding, under every strategy beside it (each run accumulates 8 micro-batches,
 * 4 with dp=2); the banner names the schedule, so the split path is the one that ran. */
static void zb_layout(const char *ref, const char *name, int ranks, const char *args, double tol) {
    layout(ref, name, ranks, args, tol);
    const char *kind = strstr(args, "zbv") ? "| zbv, " : "| zb1, ";
    const char *held = strstr(args, "zbv") ? "" : strstr(args, "zb1_memory=busiest") ? ", zb1_memory=busiest" : ", zb1_memory=1f1b";
    CHECK(strstr(out, kind) && strstr(out, held), "%s: the run says it ran %s%s:\n%.3000s", name, kind, held, out);
}
static void zero_bubble(void) {
    zb_layout("ref", "pp2zb", 2, "--pp=2 --pp_schedule=zb1", fp32);
    zb_layout("ref", "pp4zb", 4, "--pp=4 --pp_schedule=zb1", fp32);
    zb_layout("ref", "pp3zb", 3, "--pp=3 --pp_schedule=zb1", fp32);                       /* uneven: 2,1,1 */
    zb_layout("ref", "pp4zbb", 4, "--pp=4 --pp_schedule=zb1 --zb1_memory=busiest", fp32);   /* ZB-H1's own order: W's put off by the stage */
    zb_layout("ref", "dp2pp2zbb", 4, "--dp=2 --pp=2 --zero=2 --pp_schedule=zb1 --zb1_memory=busiest --recompute=full", fp32);
    zb_layout("ref", "pp2zbu", 2, "--pp=2 --pp_layers=1,3 --pp_schedule=zb1 --recompute=full", fp32);
    zb_layout("ref", "dp2pp2zb", 4, "--dp=2 --pp=2 --zero=1 --pp_schedule=zb1 --bucket_mb=0.004", fp32);
    zb_layout("ref", "dp2pp2zb2", 4, "--dp=2 --pp=2 --zero=2 --pp_schedule=zb1", fp32);
    zb_layout("ref", "dp2pp2zb3", 4, "--dp=2 --pp=2 --zero=3 --pp_schedule=zb1", fp32);
    zb_layout("ref", "tp2pp2zb", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective --pp_schedule=zb1", fp32);
    zb_layout("refbf", "pp2zbbf", 2, "--pp=2 --pp_schedule=zb1 --precision=bf16 --compute_weights=per_layer", bf16);
    zb_layout("ref16", "pp4zbf16", 4, "--pp=4 --pp_schedule=zb1 --precision=fp16 --recompute=selective", bf16);   /* loss scaling */
    /* zbv: 2*pp equal chunks (n_layers 4 at pp=2, 8 at pp=4); stage 0 holds the embedding and the head, so tied embeddings run */
    if (train("ref8", 1, "--n_layers=8") || train("reft", 1, "--tie_embeddings=1")) die("test: a one-rank reference run failed:\n%s", out);
    zb_layout("ref", "pp2zv", 2, "--pp=2 --pp_schedule=zbv", fp32);
    zb_layout("ref8", "pp4zv", 4, "--pp=4 --n_layers=8 --pp_schedule=zbv", fp32);
    zb_layout("ref", "pp2zvr", 2, "--pp=2 --pp_schedule=zbv --recompute=full", fp32);
    zb_layout("reft", "pp2zvt", 2, "--pp=2 --pp_schedule=zbv --tie_embeddings=1", fp32);
    zb_layout("ref", "dp2pp2zv", 4, "--dp=2 --pp=2 --zero=1 --pp_schedule=zbv --bucket_mb=0.004", fp32);
    zb_layout("ref", "dp2pp2zv2", 4, "--dp=2 --pp=2 --zero=2 --pp_schedule=zbv", fp32);
    zb_layout("ref", "dp2pp2zv3", 4, "--dp=2 --pp=2 --zero=3 --pp_schedule=zbv", fp32);
    zb_layout("ref", "tp2pp2zv", 4, "--tp=2 --pp=2 --sequence_parallel=1 --recompute=selective --pp_schedule=zbv", fp32);
    zb_layout("ref16", "pp2zvf16", 2, "--pp=2 --pp_schedule=zbv --precision=fp16 --recompute=selective", bf16);
    zb_layout("refbf", "pp2zvbf", 2, "--pp=2 --pp_schedule=zbv --precision=bf16 --compute_weights=per_layer", bf16);
    /* resume across schedules: zb1 -> 1f1b, 1f1b -> zb1 with dp, zbv -> zb1, 1f1b -> zbv */
    resume("ref", "rzb", 2, "--pp=2 --pp_schedule=zb1", 4, "--pp=4");
    resume("ref", "rzb2", 2, "--pp=2", 4, "--pp=2 --pp_schedule=zb1 --dp=2 --zero=1");
    resume("ref", "rzv", 2, "--pp=2 --pp_schedule=zbv", 2, "--pp=2 --pp_schedule=zb1");
    resume("ref8", "rzv2", 4, "--pp=4 --n_layers=8", 2, "--n_layers=8 --pp=2 --pp_schedule=zbv");
    memory_same(2, "--pp=2 --pp_schedule=zb1 --recompute=selective");
    memory_same(2, "--pp=2 --pp_schedule=zb1 --zb1_memory=busiest");
    memory_same(2, "--pp=2 --pp_schedule=zbv --recompute=selective");
    refused(4, "--pp=4 --pp_schedule=zb1 --total_batch_tokens=64", "the smallest total_batch_tokens for pp=4 is 128");
    refused(2, "--pp=2 --pp_schedule=zb1 --precision=fp8", "pp_schedule=zb1 splits the backward into B and W, and precision=fp8");
    refused(2, "--pp=2 --pp_schedule=zbv --precision=fp8", "pp_schedule=zbv splits the backward into B and W, and precision=fp8");
    refused(2, "--pp=2 --pp_schedule=zbv --n_layers=6", "the smallest n_layers it takes at pp=2 is 4");
    refused(2, "--pp=2 --pp_schedule=zbv --pp_layers=3,1", "pp_schedule=zbv needs 2*pp equal chunks");
    refused(4, "--pp=4 --n_layers=8 --pp_schedule=zbv --total_batch_tokens=96", "needs at least 4 micro-batches");
}

/* Bad launches: one clear line, every rank out. */
static void launches_refused(void) {
    refused(2, "--dp=4", "dp*pp*tp = 4*1*1 = 4, but 2 ranks were launched");
    refused(2, "--dp=3", "not a multiple of batch_size*seq_len*dp = 2*16*3");
    refused(1, "--dp=2", "runs alone");
    refused(2, "--dp=2 --device=cuda --comm_backend=nccl", "comm_backend=nccl");
    refused(4, "--pp=4 --total_batch_tokens=64", "needs at least 4 micro-batches");
    refused(2, "--tp=2 --n_kv_heads=1", "tp=2 must divide n_kv_heads=1");
    refused(4, "--tp=4", "the tp values this model takes are 1, 2 (");
    refused(2, "--tp=2 --ffn_dim=63", "tp=2 must divide ffn_dim=63");
    refused(2, "--tp=2 --sequence_parallel=1 --batch_size=1 --seq_len=15 --total_batch_tokens=0", "15 tokens of a micro-batch over tp=2");
    refused(2, "--tp=2 --device=cuda --comm_backend=nccl", "warning: tp=2, but this host has");   /* the warning, once, before the refusal */
    refused(2, "--dp=2 --bucket_mb=0", "bucket_mb");
    refused(2, "--pp=2 --pp_layers=3,3", "adds up to 6 layers");
    refused(2, "--dp=2 --grad_reduce_dtype=bf16", "grad_reduce_dtype=bf16 sends the gradients in the compute dtype");
    refused(2, "--dp=2 --zero=1 --precision=bf16 --compute_weights=per_layer", "compute_weights=per_layer casts each layer's weights");
    /* ranks launched with different configs (MPMD: one command line per rank) */
    char a[4096], cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 %s -np 1 %s --dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=1e-3 : -np 1 %s",
             mpirun, trainer, dir, dir, trainer);
    snprintf(a, sizeof a, "--dp=2 " BASE " --train_data=%s/train.bin --val_data=%s/val.bin --lr=2e-3", dir, dir);
    int rc = test_run(cmd, a, out, sizeof out);
    CHECK(rc != 0 && rc != 124 && strstr(out, "different config") && strstr(out, "lr="),
          "ranks with different configs: want the key named, got rc %d:\n%s", rc, out);
}

/* One layout of each strategy, each as the table above runs it (LLM3D_TEST_PART=each: the sanitizer pass). */
static void one_of_each(void) {
    layout("ref", "dp2z", 2, "--dp=2 --zero=1", fp32);
    layout("ref", "tp2s", 2, "--tp=2 --sequence_parallel=1 --recompute=full", fp32);
    layout("ref", "pp2i", 2, "--pp=2 --pp_schedule=interleaved --pp_virtual=2", fp32);
    layout("ref", "dp2tp2pp2", 8, "--dp=2 --tp=2 --pp=2", fp32);
    resume("ref", "rpi", 2, "--pp=2 --pp_schedule=interleaved", 2, "--dp=2 --zero=1");
}

/* `test_layouts`: every layout on CPU ranks (make test); LLM3D_TEST_PART=each: one of each strategy and the
 * refused launches (tests/test_asan.sh). `test_layouts --device=cuda`: the tensor-parallel
 * part on the GPU, the ranks sharing it through MPI (tests/gpu/tp.sh); LLM3D_TEST_ARGS="--device=cuda
 * --comm_backend=mpi": every layout there (tests/gpu/parallel.sh). On the GPU the memory plan is within 10%.
 * LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 with LLM3D_TEST_ARGS="--device=cuda --comm_backend=nccl": the NCCL table above,
 * its half LLM3D_TEST_PART=dp|tp (tests/gpu/nccl_layouts.sh). */
int main(int argc, char **argv) {
#ifndef LLM3D_MPI
    printf("skipped: this build has no Open MPI, so only the one-rank grid exists\n");
    return test_summary();
#endif
    int tp_only = argc > 1 && !strcmp(argv[1], "--device=cuda");
    if (tp_only) setenv("LLM3D_TEST_ARGS", "--device=cuda --comm_backend=mpi", 1);
    const char *part = getenv("LLM3D_TEST_PART"), *sw = getenv("LLM3D_NCCL_HOSTS_ON_ONE_GPU");
    int nccl_table = sw && !strcmp(sw, "1"), each = part && !strcmp(part, "each"), zb = part && !strcmp(part, "zb");
    if (part && !(nccl_table ? !strcmp(part, "dp") || !strcmp(part, "tp") : each || zb))
        die("test: LLM3D_TEST_PART=%s: want %s", part, nccl_table ? "dp or tp (a half of the NCCL table)" : "each (one layout of each strategy) or zb");
    layouts_begin();
    if (zb) {   /* LLM3D_TEST_PART=zb: the zero-bubble layouts alone */
        layouts_references();
        zero_bubble();
        return layouts_end();
    }
    if (each) {
        if (train("ref", 1, "")) die("test: the one-rank reference run failed:\n%s", out);
        one_of_each();
        if (!on_gpu) launches_refused();
        return layouts_end();
    }
    layouts_references();
    if (nccl_hosts) {   /* LLM3D_TEST_PART: dp, tp, or both */
        if (!part || !strcmp(part, "dp")) nccl_data_and_pipeline();
        if (!part || !strcmp(part, "tp")) nccl_tensor();
    } else {
        if (!tp_only) data_parallel_and_pipeline();
        if (!tp_only && !on_gpu) zero_bubble();
        tensor_parallel();
        if (!on_gpu) launches_refused();
    }
    return layouts_end();
}
