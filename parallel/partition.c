/* parallel/partition.c — the pipeline split of the layers and the tensor-parallel share (parallel/partition.h). */
#include "partition.h"
#include "schedule.h"
#include "../common/util.h"
#include "../common/options.h"
#include <stdlib.h>
#include <string.h>

/* Layers per stage (v == 1): pp_layers, or n_layers/pp with the remainder on the first stages. */
static void stage_layers(const ModelConfig *cfg, const PartitionSpec *spec, int *layers) {
    int L = cfg->n_layers, p = spec->pp;
    if (p > L)
        die("pp=%d pipeline stages, but the model has n_layers=%d: every stage needs at least one layer\n"
            "  hint: use pp <= %d", p, L, L);
    if (!spec->pp_layers || !spec->pp_layers[0]) {
        for (int s = 0; s < p; s++) layers[s] = L / p + (s < L % p);
        return;
    }
    double *v = mallocCheck(((size_t)p + 1) * sizeof *v);
    char err[512];
    int n = option_list("pp_layers", spec->pp_layers, 1, L, 1, v, p, err, sizeof err), sum = 0;
    if (n < 0)
        die("%s\n  hint: one entry per stage of pp=%d, each a whole number of layers from 1 to %d, separated by commas (e.g. 4,4,3)",
            err, p, L);
    for (int s = 0; s < n; s++) { layers[s] = (int)v[s]; sum += layers[s]; }
    free(v);
    if (n != p) die("pp_layers='%s' lists %d stages, but pp=%d", spec->pp_layers, n, p);
    if (sum != L) die("pp_layers='%s' adds up to %d layers, but the model has n_layers=%d", spec->pp_layers, sum, L);
}

ModelPart partition_part(const ModelConfig *cfg, const PartitionSpec *spec, int stage, int tp_rank) {
    ModelPart part = {.tp = spec->tp, .tp_rank = tp_rank, .sequence_parallel = spec->sequence_parallel, .n_slots = 1};
    int p = spec->pp, L = cfg->n_layers;
    if (spec->pp_schedule == PP_INTERLEAVED && p > 1) {
        int v = spec->pp_virtual, chunks = p * v;
        if (v < 2) die("pp_schedule=interleaved needs pp_virtual >= 2 chunks per stage (with 1 it is plain 1f1b)");
        if (v > MODEL_MAX_CHUNKS) die("pp_virtual=%d: at most %d chunks per stage", v, MODEL_MAX_CHUNKS);
        if (spec->pp_layers && spec->pp_layers[0]) die("pp_layers sets an uneven split, and pp_schedule=interleaved needs equal chunks: drop one of them");
        if (L % chunks)
            die("pp_schedule=interleaved cuts n_layers=%d into pp*pp_virtual = %d*%d = %d equal chunks, and %d does not divide by %d\n"
                "  hint: choose pp and pp_virtual whose product divides %d", L, p, v, chunks, L, chunks, L);
        int per = L / chunks;
        part.n_chunks = v;
        for (int c = 0; c < v; c++) part.chunks[c] = (ModelChunk){(c * p + stage) * per, per};
        part.has_embedding = stage == 0;
        part.has_head = stage == p - 1;
        return part;
    }
    if (spec->pp_schedule == PP_ZBV && p > 1) {   /* the V: chunk 0 holds virtual stage `stage`, chunk 1 virtual stage 2p-1-stage */
        if (spec->pp_layers && spec->pp_layers[0])
            die("pp_layers sets an uneven split, and pp_schedule=zbv needs 2*pp equal chunks\n  hint: drop pp_layers, or use pp_schedule=zb1 with it");
        if (L % (2 * p))
            die("pp_schedule=zbv cuts n_layers=%d into 2*pp = %d equal chunks (two a stage, in V order), and %d does not divide by %d\n"
                "  hint: the smallest n_layers it takes at pp=%d is %d (any multiple of %d), or use pp_schedule=zb1", L, 2 * p, L, 2 * p, p, 2 * p,
                2 * p);
        int per = L / (2 * p);
        part.n_chunks = 2;
        for (int c = 0; c < 2; c++) part.chunks[c] = (ModelChunk){schedule_virtual_stage(PP_ZBV, p, stage, c) * per, per};
        part.has_embedding = part.has_head = stage == 0;   /* the first layer and the last sit on stage 0 */
        return part;
    }
    int *layers = mallocCheck((size_t)p * sizeof(int)), first = 0;
    stage_layers(cfg, spec, layers);
    for (int s = 0; s < stage; s++) first += layers[s];
    part.n_chunks = 1;
    part.chunks[0] = (ModelChunk){first, layers[stage]};
    part.has_embedding = stage == 0;
    part.has_head = stage == p - 1;
    free(layers);
    return part;
}

void partition_describe(const ModelConfig *cfg, const PartitionSpec *spec, char *out, size_t size) {
    int o = 0;
    out[0] = 0;
    for (int s = 0; s < spec->pp && o < (int)size; s++) {
        ModelPart part = partition_part(cfg, spec, s, 0);
        int n = 0;
        for (int c = 0; c < part.n_chunks; c++) n += part.chunks[c].n_layers;
        o += snprintf(out + o, size - o, s ? ",%d" : "%d", n);
    }
}
