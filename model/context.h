/* model/context.h — context parallelism (docs/context-parallel.md): which
 * tokens of a sequence a cp rank holds, and the attention across cp ranks.
 *
 * The idea: a sequence of T tokens is cut into 2*cp chunks of C = T/(2*cp);
 * cp rank r holds chunks r and 2*cp-1-r (an early one and a late one, so every
 * rank has the same causal work). A rank's micro-batch of B sequences is laid
 * out chunk-major, (2, B, C): half 0 is chunk r of every sequence, half 1 chunk
 * 2*cp-1-r, each a (B, C) block the per-token ops treat like any other tokens.
 * Only RoPE (the global positions) and attention (every earlier key) see the
 * split: attention all-gathers K/V of the cp group every layer, reorders it into
 * whole sequences, and runs each local query chunk against the keys before its
 * end; the backward computes dK/dV for every key it read and reduce-scatters
 * them back to their owners (MPI and NCCL sum a reduce-scatter in a fixed order:
 * deterministic). cp = 1 takes none of this: the model calls the plain ops. */
#pragma once
#include "llama.h"

/* The global chunk (0 .. 2cp-1) of a cp rank's half 0 or 1. */
static inline int context_chunk(int cp, int cp_rank, int half) { return half == 0 ? cp_rank : 2 * cp - 1 - cp_rank; }

/* x (n_micro, B, T) whole sequences, in place -> (n_micro, B*T/cp) holding this rank's (2, B, C) of each
 * micro-batch, micro-batch k at k*B*T/cp. ids and targets both go through it: targets stay with their tokens. */
void context_slice_tokens(int *x, int n_micro, int B, int T, int cp, int cp_rank);

/* The model's side, for a micro-batch of B sequences of which this rank holds T = 2C tokens (m->cp > 1). */
/* RoPE on qkv (2,B,C,QKV) at the global positions of each half. */
void context_rope_forward(Model *m, void *qkv, int B, int T);
/* L->att and L->lse (2,B,NH,C) from L->qkv (after RoPE); all-gathers K/V over the cp group. */
void context_attention_forward(Model *m, LayerActs *L, int B, int T);
/* dqkv (2,B,C,QKV), before RoPE, from datt (2,B,C,NH*HD): all-gathers K/V again, reduce-scatters dK/dV. */
void context_attention_backward(Model *m, void *dqkv, const void *datt, LayerActs *L, int B, int T);
/* Bytes of the three (B, cp*T, 2*NKV*HD) buffers of the cp attention (0 with cp = 1): which 0, cp_kv (act dtype);
 * 1, cp_ranks (the wider of act and fp32: the all-gather's K/V and the reduce-scatter's dK/dV); 2, cp_dkv (fp32). */
size_t context_buffer_bytes(const Model *m, int B, int T, int which);
