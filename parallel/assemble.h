/* parallel/assemble.h — whole tensors from the slices many ranks hold, on rank 0.
 *
 * The idea: checkpoints store whole tensors by name, so any layout can resume
 * any other (checkpoint/checkpoint.h). When the model is split, rank 0 writes
 * the file and assembles each tensor as it goes: the ranks of data-parallel
 * replica 0 — one per (pipeline stage, tensor-parallel rank) — hold the
 * slices, as fp32 host arrays laid out like their parameter buffer. Every rank
 * walks the whole model's tensors in the same order; a holder sends its
 * rectangle, rank 0 places it. Any rank can work out what any other holds
 * (parallel/partition.h), so nobody has to be told. A tensor every
 * tensor-parallel rank holds whole (a norm) comes from tp rank 0 alone. */
#pragma once
#include "partition.h"

typedef struct {
    const Comm *comm;
    Model whole;            /* the whole model's tensor table: names and global shapes, in order */
    const Model *mine;      /* this rank's layout */
    Model *plans;           /* rank 0: (pp * tp) the layout of every (stage, tp rank) */
} Assembler;

void assemble_open(Assembler *a, const Comm *comm, const ModelConfig *cfg, const PartitionSpec *spec, const Model *mine);
void assemble_close(Assembler *a);
/* Every rank calls it for the same tensor i of the whole table, in the same
 * order. local: this rank's host array for the mirror being saved (n_params),
 * read on the holders (data-parallel rank 0); dst (global rows x cols) is
 * filled on rank 0 and may be NULL elsewhere. */
void assemble_tensor(Assembler *a, int i, const float *local, float *dst);
