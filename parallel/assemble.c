/* parallel/assemble.c — whole tensors on rank 0 from the ranks' slices (parallel/assemble.h). */
#include "assemble.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

void assemble_open(Assembler *a, const Comm *comm, const ModelConfig *cfg, const PartitionSpec *spec, const Model *mine) {
    memset(a, 0, sizeof *a);
    a->comm = comm;
    a->mine = mine;
    model_plan(&a->whole, cfg, mine->be, comm, NULL, 1, 1, RECOMPUTE_NONE);
    if (comm->rank != 0) return;
    a->plans = callocCheck((size_t)comm->pp * comm->tp, sizeof(Model));
    for (int st = 0; st < comm->pp; st++)
        for (int tr = 0; tr < comm->tp; tr++) {
            ModelPart part = partition_part(cfg, spec, st, tr);
            model_plan(&a->plans[st * comm->tp + tr], cfg, mine->be, comm, &part, 1, 1, RECOMPUTE_NONE);
        }
}

void assemble_close(Assembler *a) {
    model_plan_free(&a->whole);
    for (int i = 0; a->plans && i < a->comm->pp * a->comm->tp; i++) model_plan_free(&a->plans[i]);
    free(a->plans);
    memset(a, 0, sizeof *a);
}

/* The slice of a tensor a layout holds, and whether that rank sends it: a tensor held whole by every tp rank comes from tp rank 0. */
static const ParamTensor *held(const Model *m, const char *name, int tp_rank) {
    const ParamTensor *t = model_find_tensor(m, name);
    if (!t) return NULL;
    int whole = t->rows == t->global_rows && t->cols == t->global_cols;
    return whole && tp_rank > 0 ? NULL : t;
}

void assemble_tensor(Assembler *a, int i, const float *local, float *dst) {
    const Comm *c = a->comm;
    const ParamTensor *g = &a->whole.tensors[i];
    if (c->dp_rank == 0 && c->cp_rank == 0 && c->rank != 0) {   /* a holder (cp ranks hold the same weights): send my rectangle, packed row by row */
        const ParamTensor *t = held(a->mine, g->name, c->tp_rank);
        if (t) comm_send_host(c, 0, local + t->offset, (size_t)t->rows * t->cols * sizeof(float));
    }
    if (c->rank != 0) return;
    float *piece = NULL;
    size_t piece_cap = 0;
    for (int st = 0; st < c->pp; st++)
        for (int tr = 0; tr < c->tp; tr++) {
            const ParamTensor *t = held(&a->plans[st * c->tp + tr], g->name, tr);
            if (!t) continue;
            size_t n = (size_t)t->rows * t->cols;
            int from = comm_world_rank(c, 0, st, 0, tr);
            const float *src;
            if (from == 0) src = local + t->offset;   /* rank 0's own layout is plans[0] */
            else {
                if (n > piece_cap) { free(piece); piece = mallocCheck(n * sizeof(float)); piece_cap = n; }
                comm_recv_host(c, from, piece, n * sizeof(float));
                src = piece;
            }
            for (int r = 0; r < t->rows; r++)
                memcpy(dst + (size_t)(t->row0 + r) * g->global_cols + t->col0, src + (size_t)r * t->cols, (size_t)t->cols * sizeof(float));
        }
    free(piece);
}
