# bench/gpu/sdpa_time.py — PyTorch's attention alone at l124m's heads (12 query
# heads, 4 kv heads, head dim 64, causal, bf16) at each sequence length, about
# 16k tokens a call (B = 16384 / T, at least 1): what llm3d's attention kernels
# are measured against (bench/gpu/bench_cuda_ops bf16 attention T), since the
# peer's step time mixes attention with everything else.
#
#   python3 bench/gpu/sdpa_time.py [--hd 128] [T ...]      (default 1024 2048 4096 8192 16384 32768)
#
# --hd 128: 16 query heads, 4 kv heads, head dim 128 (bench_attention 128's heads).
#
# Per T and per SDPA backend (cuDNN, FlashAttention-2, memory-efficient): the
# forward alone and forward + backward, CUDA events, median of 15 after 3
# warm-ups, and TFLOP/s with the causal count bench_cuda_ops uses (forward
# 4*B*NH*T*T*HD/2, backward 2.5x that). One JSON line per T.
import json, sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from cuda_time import median_ms   # bench/gpu/cuda_time.py

NH, NKV, HD = 12, 4, 64
args = sys.argv[1:]
if args[:1] == ["--hd"]:
    HD = int(args[1]); args = args[2:]
    NH = 12 if HD == 64 else 16

for T in [int(a) for a in args] or [1024, 2048, 4096, 8192, 16384, 32768]:
    B = 1 if T >= 16384 else 16384 // T
    q = torch.randn(B, NH, T, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, NKV, T, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, NKV, T, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(B, NH, T, HD, device="cuda", dtype=torch.bfloat16)
    fwd_flops = 4.0 * B * NH * T * T * HD / 2
    row = dict(T=T, B=B, NH=NH, NKV=NKV, HD=HD)
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(be):
                att = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                f = median_ms(lambda: att())
                fb = median_ms(lambda: att().backward(dy))
            row[name] = dict(fwd_ms=round(f, 3), bwd_ms=round(fb - f, 3), fwd_tflops=round(fwd_flops / f / 1e9, 1),
                             bwd_tflops=round(2.5 * fwd_flops / (fb - f) / 1e9, 1))
        except Exception as ex:
            row[name] = "n/a: " + str(ex)[:80]
    print(json.dumps(row), flush=True)
