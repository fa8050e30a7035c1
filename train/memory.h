/* train/memory.h — where a run's device bytes go, predicted before anything is
 * allocated, and what to switch when they do not fit.
 *
 * The idea: every big buffer of llm3d is allocated once at start-up from sizes
 * the layout already knows (model_plan), so the prediction is the same
 * arithmetic the allocation will do, plus the libraries' workspaces. The report
 * sets it next to the allocator's measured peak; on out-of-memory the same
 * prediction, redone for recompute / 8-bit AdamW / per-layer compute weights /
 * smaller micro-batches, says which switches would fit. */
#pragma once
#include <stdio.h>
#include "config.h"
#include "../model/llama.h"

typedef struct {
    size_t master;        /* fp32 master weights */
    size_t compute;       /* act-dtype copy of the weights (0 in fp32: the master is used); compute_weights=per_layer: the places one layer's is cast to */
    size_t grads;         /* fp32 gradients */
    size_t optimizer;     /* AdamW m, v (fp32) or 8-bit codes + absmax + small tensors' fp32 state (zero=1: this rank's shard) */
    size_t shards;        /* data parallel: ZeRO's shards (reduced gradients, fp32 master, updated copy); the bf16 copy of the gradients sent */
    size_t places;        /* zero=2/3: the places a unit's gradient is written to and (zero=3) its weights gathered into:
                           * the embedding's, the head's and two layers' (parallel/ddp.h) */
    size_t activations;   /* everything the forward keeps for the backward, plus backward scratch and logits */
    size_t workspace;     /* cuBLASLt workspace and kernels' scratch (estimate) */
    size_t total;
} MemoryPlan;

/* The plan of this rank (its part of the model, part NULL: the whole model on
 * one rank) for config c with the given recompute mode, optimizer, compute
 * weights (COMPUTE_WEIGHTS_*, over the part's) and micro-batch. */
MemoryPlan memory_plan(const Config *c, const ModelConfig *mc, const Backend *be, const Comm *comm, const ModelPart *part,
                       int recompute, int optimizer, int compute_weights, int batch_size);
/* Whether compute_weights=per_layer is a switch for this run, for the lists of
 * other switches: in bf16/fp16 (fp32 has no copy), unless ZeRO-1 shards the
 * master (zero=1 with dp > 1: config validation refuses per_layer there). */
int memory_per_layer_switch(const Config *c, const Backend *be);
/* The backend a plan describes, without opening the device: what memory_plan
 * reads of it is the name, the activation dtype and the fixed workspace, so a
 * GPU's plan is made on any machine. */
Backend memory_plan_backend(const Config *c);
/* The table; measured_peak 0 = not measured (yet). */
void memory_print(const MemoryPlan *p, size_t measured_peak, FILE *out);
/* Every rank calls it with its own plan and measured peak; with several
 * ranks, rank 0 prints one line per rank (its grid coordinates, predicted and
 * measured bytes, exact): ranks of a split model hold different parts. */
void memory_print_ranks(const MemoryPlan *p, size_t measured_peak, const Comm *comm, FILE *out);
/* Dies with the list of switches that would fit when plan p (this config's)
 * exceeds the device's free memory; does nothing on the CPU. */
void memory_check_fits(const MemoryPlan *p, const Config *c, const ModelConfig *mc, const Backend *be, const Comm *comm,
                       const ModelPart *part);
