/* kernels/cross_entropy.h — softmax + cross-entropy + its gradient in one pass
 * over the logits, with no probability tensor kept: the gradient overwrites the
 * logits in place.
 *   losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]]   (0 where targets[n] == ignore_index)
 *   if dloss != 0: logits[n,:] <- (softmax(logits[n,:]) - onehot(targets[n])) * dloss   (0 rows for ignored)
 * dloss is d(total loss)/d(loss of one token): 1 / (valid tokens in the whole step). */
#pragma once
typedef void CrossEntropy(float *losses /* (N) */, void *logits /* (N,V), becomes dlogits */, const int *targets /* (N) */,
                          int N, int V, float dloss, int ignore_index);
CrossEntropy cross_entropy_cpu, cross_entropy_cuda;
