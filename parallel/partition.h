/* parallel/partition.h — which part of the model a rank holds.
 *
 * The idea: a rank's part follows from its grid coordinates and the layout
 * keys alone, so any rank can say what any other rank holds (rank 0 does, to
 * assemble whole tensors for a checkpoint). Pipeline stages hold consecutive
 * layers — as even a split as n_layers allows, or pp_layers=4,4,3 — the first
 * stage the embedding, the last the final norm and LM head. The interleaved
 * schedule gives each stage pp_virtual chunks of equal size: chunk c of stage
 * s is the model's virtual stage c*pp + s. Tensor-parallel ranks hold
 * 1/tp of every layer's heads and FFN columns and of the vocabulary, and with
 * sequence parallelism 1/tp of the residual stream's tokens. */
#pragma once
#include "../model/llama.h"

typedef struct {
    int tp, pp;
    int pp_schedule;        /* PP_* (parallel/schedule.h) */
    int pp_virtual;         /* chunks per stage with the interleaved schedule */
    const char *pp_layers;  /* "" or a comma list of layers per stage */
    int sequence_parallel;  /* tp ranks keep 1/tp of the residual stream's tokens */
} PartitionSpec;

/* The part of the rank at (stage, tp_rank), with one activation slot. Dies in
 * words on a split the model cannot take (more stages than layers, pp_layers
 * that do not sum to n_layers, an interleaved split that is not even). */
ModelPart partition_part(const ModelConfig *cfg, const PartitionSpec *spec, int stage, int tp_rank);
/* "3,3,3,2": the layers of each stage, for the start-up banner. */
void partition_describe(const ModelConfig *cfg, const PartitionSpec *spec, char *out, size_t size);
