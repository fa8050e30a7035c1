# bench/gpu/cuda_time.py — how the Python benches under bench/gpu time a piece of
# GPU work: CUDA events around each call, the median of `reps` calls after 3
# warm-ups, in ms (bench_cuda_ops.c times llm3d's own kernels the same way).
import torch

def median_ms(fn, reps=15):
    for _ in range(3): fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[reps // 2]
