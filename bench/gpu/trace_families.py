#!/usr/bin/env python3
"""bench/gpu/trace_families.py — a traced step's kernel time summed by op family.

bench/gpu/trace_gaps.c prints, for the traced steps, one `busy` line per kernel
name (its GPU time a step). This sums those lines into the families of
docs/performance.md's split — matmul, attention, SwiGLU, RMSNorm, optimizer,
loss, RoPE, FP8 casts, embedding, copies and fills — beside the step's span
and idle, so the table comes from the real step rather than from kernels
timed alone. A kernel no family claims is listed under its own name, never
dropped. Set LLM3D_TRACE_TOP high enough that every name is printed
(trace_gaps says how many names there were).

    CUDA_INJECTION64_PATH=$PWD/build/gpu/libtrace_gaps.so LLM3D_TRACE_TOP=60 \\
        build/bench/bench_train --preset=l124m --device=cuda --steps=10 --precision=bf16 > trace.txt 2>&1
    python3 bench/gpu/trace_families.py trace.txt
"""
import re
import sys

FAMILIES = [   # the first pattern that matches a kernel's name claims it
    ("matmul", r"nvjet|cublas|gemm|splitKreduce"),
    ("attention", r"wg_|attention|flash|mma_"),
    ("RMSNorm", r"rmsnorm"),
    ("SwiGLU", r"swiglu"),
    ("RoPE", r"rope"),
    ("loss", r"cross_entropy"),
    ("optimizer", r"adamw|sum_squares"),
    ("FP8 casts", r"fp8|amax|cast|quant"),
    ("embedding", r"embedding|radix|iota|cub"),
    ("copies and fills", r"copy/fill"),
]
BUSY = re.compile(r"trace_gaps: busy\s+([\d.]+) ms\s+[\d.]+%\s+\d+/step\s+[\d.]+ us each\s+(\S+)")
SPAN = re.compile(r"step span median ([\d.]+) ms; GPU idle median ([\d.]+) ms")
NAMES = re.compile(r"busy [\d.]+ ms a step in (\d+) kernel names")

for path in sys.argv[1:]:
    total, span, idle, names, seen = {}, None, None, None, 0
    for line in open(path):
        if m := SPAN.search(line):
            span, idle = float(m.group(1)), float(m.group(2))
        if m := NAMES.search(line):
            names = int(m.group(1))
        if m := BUSY.match(line):
            ms, name = float(m.group(1)), m.group(2)
            family = next((f for f, rx in FAMILIES if re.search(rx, name, re.I)), "other: " + name[:48])
            total[family] = total.get(family, 0.0) + ms
            seen += 1
    if span is None:
        sys.exit(f"{path}: no 'step span' line: is it trace_gaps' output (CUDA_INJECTION64_PATH set)?")
    print(f"{path}: step span {span:.3f} ms, GPU idle {idle:.3f} ms ({100 * idle / span:.1f}%)")
    for family, ms in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {family:<20} {ms:7.3f} ms  {100 * ms / span:5.1f}%")
    print(f"  {'busy, all families':<20} {sum(total.values()):7.3f} ms")
    if names is not None and seen < names:
        print(f"  warning: {seen} of {names} kernel names printed: rerun with LLM3D_TRACE_TOP={names} or more")
