/* kernels/cross_entropy.h — softmax cross-entropy and its gradient over a
 * vocabulary that may be split across tensor-parallel ranks, without the
 * logits ever being gathered; no probability tensor is kept either: the
 * gradient overwrites the logits in place.
 *
 * The idea (vocab-parallel cross-entropy, Megatron): a rank holds the logits
 * of its block of the vocabulary, columns v0 .. v0+V-1 of the whole; only the
 * first v_valid of them are real (the rest pads a vocabulary that tp does not
 * divide, and counts for nothing). Pass 1 sums up the block in three numbers
 * per token; the model gathers every rank's three (n_parts = tp sets); pass 2
 * combines them into the log-sum-exp over the whole vocabulary and writes the
 * loss and the block's gradient.
 *   pass 1, cross_entropy_stats, per row n of the block:
 *       stats[0*N+n] = m  = max of the real logits   (-inf when the block has none)
 *       stats[1*N+n] = s  = sum over them of exp(z - m)
 *       stats[2*N+n] = zt = the target's logit if targets[n] lies in the block's real columns, else 0
 *   pass 2, cross_entropy_loss, with every part p's (m_p, s_p, zt_p):
 *       M = max_p m_p,  lse = M + log(sum_p s_p * exp(m_p - M)),  target logit = sum_p zt_p
 *       losses[n] = lse - target logit   (0 where targets[n] == ignore_index)
 *       if dloss != 0: logits[n,:] <- (softmax - onehot(target)) * dloss on the real columns,
 *                      0 on padding columns and on ignored rows
 * dloss is d(total loss)/d(loss of one token): 1 / (valid tokens in the whole step).
 * One rank holding the whole vocabulary: n_parts = 1, v0 = 0, V = v_valid = vocab size,
 * and stats = NULL: pass 2 computes the row's statistics itself (one pass, one
 * launch; the same numbers as pass 1's). */
#pragma once
typedef void CrossEntropyStats(float *stats /* (3,N) */, const void *logits /* (N,V) */, const int *targets /* (N) */, int N, int V,
                               int v0, int v_valid);
typedef void CrossEntropyLoss(float *losses /* (N) */, void *logits /* (N,V), becomes dlogits */,
                              const float *stats /* (n_parts,3,N) or NULL */, int n_parts, const int *targets /* (N) */, int N, int V,
                              int v0, int v_valid, float dloss, int ignore_index);
CrossEntropyStats cross_entropy_stats_cpu, cross_entropy_stats_cuda;
CrossEntropyLoss cross_entropy_loss_cpu, cross_entropy_loss_cuda;
