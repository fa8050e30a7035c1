# bench/gpu/fp8_floor.py — the block matmuls of one layer of l124m and l350m
# (q|k|v, o, gate|up, down; the forward and both backward products, B x T =
# 16 x 1024 tokens) through cuBLASLt in bf16 (x @ w.t()) and in FP8
# (torch._scaled_mm: E4M3 x and weight, E5M2 dout, per-tensor scales, fp32
# accumulation), operands already cast: the part of roofline.py's floor that
# precision=fp8 changes, measured beside llm3d's step in the same call. The
# FP8 floor of a step is roofline.py's floor less layers x (bf16 - fp8) here.
#
#   python3 bench/gpu/fp8_floor.py          (one JSON line a preset)
#
# CUDA events, median of 15 after 3 warm-ups. The FP8 products run "TN", both
# operands K-contiguous, as kernels/cuda/matmul_fp8.cu calls them: dgrad takes
# weight^T, wgrad x^T and dout^T, so those are transposed once, outside the timing.
import json, torch
from cuda_time import median_ms   # bench/gpu/cuda_time.py

CFGS = {"l124m": dict(d=768, L=12, nh=12, nkv=4, ffn=2048), "l350m": dict(d=1024, L=24, nh=16, nkv=4, ffn=2816)}
N = 16 * 1024
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2

def fp8_mm(a, b_t, out_dtype):   # a (M,K) row-major, b_t (N,K) row-major: a @ b_t.t()
    one = torch.ones((), device="cuda")
    return torch._scaled_mm(a, b_t.t(), scale_a=one, scale_b=one, out_dtype=out_dtype)

for name, c in CFGS.items():
    d, L, hd = c["d"], c["L"], c["d"] // c["nh"]
    shapes = {"qkv": (d, d + 2 * c["nkv"] * hd), "o": (d, d), "gate|up": (d, 2 * c["ffn"]), "down": (c["ffn"], d)}
    rows, tb, t8 = {}, 0.0, 0.0
    for k, (IC, OC) in shapes.items():
        x = torch.randn(N, IC, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(OC, IC, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(N, OC, device="cuda", dtype=torch.bfloat16)
        b = [median_ms(lambda: x @ w.t()), median_ms(lambda: dy @ w), median_ms(lambda: dy.t() @ x)]
        x8, w8, dy8 = x.to(E4), w.to(E4), dy.to(E5)
        wT8, xT8, dyT8 = w.t().contiguous().to(E4), x.t().contiguous().to(E4), dy.t().contiguous().to(E5)
        f = [median_ms(lambda: fp8_mm(x8, w8, torch.bfloat16)),         # out (N,OC)
             median_ms(lambda: fp8_mm(dy8, wT8, torch.bfloat16)),       # dinp (N,IC)
             median_ms(lambda: fp8_mm(dyT8, xT8, torch.float32))]       # dweight (OC,IC), fp32 as llm3d accumulates it
        rows[k] = dict(bf16_ms=[round(v, 4) for v in b], fp8_ms=[round(v, 4) for v in f], ratio=round(sum(b) / sum(f), 2))
        tb += sum(b); t8 += sum(f)
    print(json.dumps(dict(cfg=name, layer_bf16_ms=round(tb, 3), layer_fp8_ms=round(t8, 3), layers=L,
                          step_saving_ms=round(L * (tb - t8), 2), matmuls=rows)), flush=True)
