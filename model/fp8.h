/* model/fp8.h — the scales of precision=fp8: delayed, one a tensor, powers of two.
 *
 * The recipe (Micikevicius et al. 2022, "FP8 formats for deep learning"; NVIDIA
 * Transformer Engine's delayed scaling), chosen for three reasons:
 *  - delayed: a step casts with scales known before it starts, taken from the
 *    max |value| (amax) each operand had in the last FP8_HISTORY steps. So a
 *    cast needs no pass of its own to find its tensor's max first: it rounds and
 *    records the max in one go (kernels/fp8.h), and the new maxima change the
 *    scales only at the step's end.
 *  - one scale a tensor, the same on every rank: at the step's end every
 *    rank's record is reduced (max) over the whole world — the tp ranks' slices
 *    of a weight, the dp ranks' micro-batches, the pipeline stages' layers — so
 *    a scale is a function of the step's data alone, not of how it was split,
 *    and every dp x tp x pp layout casts with the scales one rank would.
 *  - powers of two: multiplying by the scale and dividing the product by it
 *    again are exact, so a scale changes which numbers FP8 can hold, never the
 *    rounding of the rest; and a max that moves by a rounding error between two
 *    layouts leaves the scale as it is unless it crosses a power of two.
 * scale = 2^(floor(log2(format max / history max)) - FP8_MARGIN): the largest
 * power of two that keeps twice the history's largest value inside the format
 * (early in training the maxima grow from step to step; without the margin a
 * few tensors a step saturated in the tests' tiny runs). A value past it (a loss
 * spike) saturates at the format's max: never inf; each step counts the
 * tensors that saturated (model_fp8_step_end). Until a tensor has a history
 * (the first step), its matmuls run in bf16 and only record. A step whose
 * gradients are not finite is skipped (train/trainer.c) and adds no history.
 * Checkpoints hold the history (FP8_CHECKPOINT_NAME, oldest step first), so a
 * resumed run, on any layout, casts with the scales the unbroken run would. */
#pragma once
#include <stddef.h>
#include "../kernels/fp8.h"

#define FP8_HISTORY 16   /* steps of amax a scale looks back over */
#define FP8_CHECKPOINT_NAME "fp8/amax_history"   /* (FP8_HISTORY, n_layers x FP8_MATMULS x FP8_ROLES) in a checkpoint: run state, as "<prefix>/<name>" entries are */
#define FP8_MARGIN 1     /* powers of two of headroom: a tensor may grow 2-4x past its history's max before it saturates */

enum { FP8_QKV, FP8_O, FP8_W13, FP8_W2, FP8_MATMULS };   /* a layer's block matmuls */
enum { FP8_X, FP8_W, FP8_DOUT, FP8_ROLES };              /* their operands: kernels/fp8.h's amax[3] order */

typedef struct {
    int *global_layer;      /* (n_local_layers) the model's index of each local layer; every rank keeps every layer's scales */
    float *history;         /* (FP8_HISTORY, n_layers, FP8_MATMULS, FP8_ROLES) the world's amax of the last steps; 0: none */
    int steps;              /* steps recorded (a resumed run counts on from FP8_HISTORY): the ring's next row is steps % FP8_HISTORY */
    float *scale;           /* (n_layers, FP8_MATMULS, FP8_ROLES) what this step casts with; 0: no history yet (bf16) */
    float *amax;            /* (n_local_layers, FP8_MATMULS, FP8_ROLES) backend memory: this step's record, folded by max */
    void *scratch;          /* backend memory: the FP8 operand copies of one matmul call (kernels/fp8.h) */
    int producers;          /* RMSNorm and SwiGLU cast their outputs, SwiGLU its gradient (kernels/fp8.h): the backend has the
                               producers and LLM3D_FP8_FUSED is not "off" (the switch measures and tests them against the casts) */
    long producer_casts;    /* calls of those producers so far (the tests assert the path ran) */
} Fp8State;

struct Model;
/* The scales and record of local layer i's block matmul `which`, for the backend's FP8 ops. */
void model_fp8_args(const struct Model *m, int i, int which, Fp8Matmul *args);
/* After a step (every rank, the same point: a collective over the world): the
 * record of the step reduced over the world, saturations counted, added to the
 * history when finite, the next step's scales computed, the record cleared.
 * Returns the number of tensors that saturated in the step. */
int model_fp8_step_end(struct Model *m, int finite);
/* Whether the matmul whose args are q takes its producers' casts (kernels/fp8.h): the producers are on and every
 * scale of q is set (the first steps, without history, run the plain ops). The down matmul's x and the gate|up
 * matmul's dout are then FP8 copies SwiGLU wrote, not act-dtype tensors; q|k|v's and gate|up's x the norm's
 * (model/llama.c: not with sequence parallelism, whose norm output is gathered over tp before the matmul). */
int model_fp8_producer_casts(const struct Model *m, const Fp8Matmul *q);
/* The tensors that have scales: n_layers x FP8_MATMULS x FP8_ROLES, the whole model's. */
int model_fp8_tensors(const struct Model *m);
/* Those of them that have a scale now: the ones whose next matmuls cast to FP8. */
int model_fp8_scaled(const struct Model *m);
/* A fingerprint of every scale: sum over tensors of (k + 1) x log2(scale k), 0 for none; equal on every rank and
 * layout when the scales are (the layout tests compare it, logged as fp8_scales). */
long model_fp8_fingerprint(const struct Model *m);
/* The history as a checkpoint keeps it: (FP8_HISTORY, model_fp8_tensors) floats, the oldest step first; set takes the
 * same back and computes the scales from it. */
void model_fp8_history_get(const struct Model *m, float *out);
void model_fp8_history_set(struct Model *m, const float *in);
/* The scale for a history max: 0 when there is none, else 2^(floor(log2(fmt_max / amax)) - FP8_MARGIN). */
float fp8_scale_for(float amax, float fmt_max);
