/* model/context.c — context parallelism's attention across cp ranks, by
 * all-gather of K/V (model/context.h, docs/context-parallel.md).
 *
 * One layer, forward: pack this rank's k|v rows out of qkv into its piece of
 * the rank-ordered buffer (cp, 2, B, C, KVW), all-gather it over the cp group,
 * reorder the 2*cp chunks into whole sequences (B, cp*T, KVW), then for each
 * half run the offset attention (kernels/attention.h) of its C queries at
 * q0 = chunk*C against keys 0 .. q0+C-1. Backward: gather again (nothing of
 * the whole sequence is kept from the forward: activations stay 1/cp) unless
 * cp_kv still holds this layer's K/V — the gather just before was its own,
 * in the recompute that opens a layer's backward under recompute=selective or
 * full, or the forward of the last layer before its backward — then each
 * half's backward writes its dq and adds dK/dV of the keys it read into the
 * whole-sequence buffer (fp32), which goes back into rank order and is
 * reduce-scattered over cp in fp32; my piece, rounded once to the act dtype,
 * lands in dqkv's k|v columns, and RoPE's backward rotates each half at its
 * global positions. */
#include "context.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>

static size_t act_size(const Model *m) { return dtype_size(backend_storage(m->be)); }

void context_slice_tokens(int *x, int n_micro, int B, int T, int cp, int cp_rank) {
    if (cp <= 1) return;
    int C = T / (2 * cp);
    size_t mine = (size_t)B * T / cp;
    int *tmp = mallocCheck(mine * sizeof(int));
    for (int k = 0; k < n_micro; k++) {
        const int *src = x + (size_t)k * B * T;
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < B; b++)
                memcpy(tmp + ((size_t)h * B + b) * C, src + (size_t)b * T + (size_t)context_chunk(cp, cp_rank, h) * C, (size_t)C * sizeof(int));
        memcpy(x + (size_t)k * mine, tmp, mine * sizeof(int));   /* k*mine <= k*B*T: micro-batch k's source is read already */
    }
    free(tmp);
}

size_t context_buffer_bytes(const Model *m, int B, int T, int which) {
    if (m->cp <= 1) return 0;
    size_t rows = (size_t)B * T * m->cp * 2 * m->NKV * m->HD, a = act_size(m);
    return rows * (which == 0 ? a : which == 1 ? (a > 4 ? a : 4) : 4);   /* cp_ranks carries act values and fp32 gradients */
}

void context_rope_forward(Model *m, void *qkv, int B, int T) {
    int C = T / 2;
    for (int h = 0; h < 2; h++)
        m->be->rope_forward((char *)qkv + (size_t)h * B * C * m->QKV * act_size(m), B, C, m->NH, m->NKV, m->HD, m->cfg.rope_theta,
                            context_chunk(m->cp, m->cp_rank, h) * C);
}

/* Between rank order (cp, 2, B, C, KVW) and whole sequences (B, 2*cp*C, KVW) of elements of a bytes: one strided copy per (rank, half). */
static void reorder(Model *m, void *ranks, void *whole, int B, int C, size_t a, int to_whole) {
    size_t row = (size_t)2 * m->NKV * m->HD * a, block = (size_t)C * row;   /* one chunk of one sequence */
    for (int r = 0; r < m->cp; r++)
        for (int h = 0; h < 2; h++) {
            char *rk = (char *)ranks + ((size_t)r * 2 + h) * B * block;
            char *wh = (char *)whole + (size_t)context_chunk(m->cp, r, h) * block;
            if (to_whole) m->be->copy2d(wh, 2 * m->cp * block, rk, block, block, B);
            else m->be->copy2d(rk, block, wh, 2 * m->cp * block, block, B);
        }
}

/* K/V of the whole sequences into m->cp_kv (B, cp*T, KVW) from every rank's L->qkv. A forward always gathers: it
 * follows a new qkv (a slot's next micro-batch has the same L). */
static void gather_kv(Model *m, const LayerActs *L, int B, int T) {
    const void *qkv = L->qkv;
    size_t a = act_size(m), KVW = (size_t)2 * m->NKV * m->HD, N = (size_t)B * T;
    void *mine = (char *)m->cp_ranks + (size_t)m->cp_rank * N * KVW * a;
    m->be->copy2d(mine, KVW * a, (const char *)qkv + (size_t)m->NH * m->HD * a, (size_t)m->QKV * a, KVW * a, N);   /* k|v are adjacent */
    size_t counts[1024];   /* cp <= 1024 (the config table's bound) */
    for (int r = 0; r < m->cp; r++) counts[r] = N * KVW;
    comm_allgather(m->comm, GROUP_CP, mine, m->cp_ranks, counts, backend_storage(m->be));   /* in place: mine is my piece */
    reorder(m, m->cp_ranks, m->cp_kv, B, T / 2, a, 1);
    m->cp_kv_of = L;
}

void context_attention_forward(Model *m, LayerActs *L, int B, int T) {
    const Backend *be = m->be;
    int C = T / 2, Tk = m->cp * T;
    size_t a = act_size(m);
    gather_kv(m, L, B, T);
    for (int h = 0; h < 2; h++) {
        int q0 = context_chunk(m->cp, m->cp_rank, h) * C;
        be->attention_forward_at((char *)L->att + (size_t)h * B * C * m->NH * m->HD * a, L->lse + (size_t)h * B * m->NH * C,
                                 (const char *)L->qkv + (size_t)h * B * C * m->QKV * a, m->cp_kv, B, C, q0, Tk, m->NH, m->NKV, m->HD);
    }
}

void context_attention_backward(Model *m, void *dqkv, const void *datt, LayerActs *L, int B, int T) {
    const Backend *be = m->be;
    int C = T / 2, Tk = m->cp * T;
    size_t a = act_size(m), KVW = (size_t)2 * m->NKV * m->HD, N = (size_t)B * T;
    /* cp_kv holds L's K/V when the last gather was L's (its recompute, or the last layer's forward): qkv is what it was
     * then, since every forward that writes a qkv gathers it */
    if (m->cp_kv_of != L) gather_kv(m, L, B, T);
    be->zero(m->cp_dkv, (size_t)B * Tk * KVW * sizeof(float));
    for (int h = 0; h < 2; h++) {   /* each adds its keys' gradients into cp_dkv, in fp32 */
        int q0 = context_chunk(m->cp, m->cp_rank, h) * C;
        size_t qo = (size_t)h * B * C;
        be->attention_backward_at((char *)dqkv + qo * m->QKV * a, m->cp_dkv, (const char *)datt + qo * m->NH * m->HD * a,
                                  (const char *)L->qkv + qo * m->QKV * a, m->cp_kv, (const char *)L->att + qo * m->NH * m->HD * a,
                                  L->lse + (size_t)h * B * m->NH * C, B, C, q0, Tk, m->NH, m->NKV, m->HD);
    }
    reorder(m, m->cp_ranks, m->cp_dkv, B, C, sizeof(float), 0);   /* every rank's keys' gradients, in rank order */
    size_t counts[1024];
    for (int r = 0; r < m->cp; r++) counts[r] = N * KVW;
    comm_reduce_scatter(m->comm, GROUP_CP, m->cp_ranks, m->cp_dkv, counts, DTYPE_FP32);   /* my keys' (2,B,C,KVW), summed over cp */
    be->cast_from_fp32(m->cp_kv, m->cp_dkv, N * KVW);   /* rounded once; cp_kv is free since the last backward_at */
    m->cp_kv_of = NULL;
    be->copy2d((char *)dqkv + (size_t)m->NH * m->HD * a, (size_t)m->QKV * a, m->cp_kv, KVW * a, KVW * a, N);
    if (m->cfg.rope_theta > 0)
        for (int h = 0; h < 2; h++)
            be->rope_backward((char *)dqkv + (size_t)h * B * C * m->QKV * a, B, C, m->NH, m->NKV, m->HD, m->cfg.rope_theta,
                              context_chunk(m->cp, m->cp_rank, h) * C);
}
