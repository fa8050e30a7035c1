#!/usr/bin/env python3
"""tests/make_fixture.py — writes tests/fixtures/llama_small.bin, the PyTorch
reference that tests/test_model.c holds llm3d's whole model against.

A small LLaMA (grouped-query attention, untied LM head, T = 13, not a power of
two, a few ignored targets) written plainly in PyTorch with Hugging Face's
conventions (rotate-half RoPE, RMSNorm weight after the normalisation, SiLU
gate). Weights are drawn in fp32; every computation runs in float64 so the
fixture is the true value that llm3d's fp32 result is compared to. Stores:
inputs, weights, logits, loss, every parameter gradient, and the losses of 10
AdamW steps (decay on matrices only, global-norm clipping at 1.0).

Regenerate:  python3 tests/make_fixture.py   (needs torch; any recent version)
Format: 256 x int32 header (magic, version, shape, hyper-parameters as float
bits), ids and targets (B*T int32 each), then tensors: name (96 bytes), rows,
cols (int32), rows*cols float32."""
import struct, os, math
import torch

V, C, L, NH, NKV, F, B, T = 97, 48, 2, 6, 2, 80, 2, 13
HD = C // NH
THETA, EPS = 10000.0, 1e-5
LR, BETA1, BETA2, ADAM_EPS, WD, CLIP, STEPS = 1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0, 10
IGNORE = -1
torch.manual_seed(1234)

def names():
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (1, C)), (p + "self_attn.q_proj.weight", (NH * HD, C)),
                (p + "self_attn.k_proj.weight", (NKV * HD, C)), (p + "self_attn.v_proj.weight", (NKV * HD, C)),
                (p + "self_attn.o_proj.weight", (C, NH * HD)), (p + "post_attention_layernorm.weight", (1, C)),
                (p + "mlp.gate_proj.weight", (F, C)), (p + "mlp.up_proj.weight", (F, C)), (p + "mlp.down_proj.weight", (C, F))]
    out += [("model.norm.weight", (1, C)), ("lm_head.weight", (V, C))]
    return out

params = {}
for n, shape in names():
    if "norm" in n:
        w = 1.0 + 0.1 * torch.randn(shape)          # not all ones, so the norm-weight gradient is exercised
    else:
        w = 0.08 * torch.randn(shape)
    params[n] = w.float().double().requires_grad_(True)

ids = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))
targets[0, 3] = IGNORE
targets[1, T - 1] = IGNORE

def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.view(-1)

def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat((-x2, x1), -1)

def rope_tables():
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))   # fp32, as Hugging Face
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos().double(), emb.sin().double()

COS, SIN = rope_tables()

def forward(P):
    x = P["model.embed_tokens.weight"][ids]                       # (B,T,C)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"])
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(B, T, NH, HD).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(B, T, NKV, HD).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(B, T, NKV, HD).transpose(1, 2)
        q = q * COS + rotate_half(q) * SIN
        k = k * COS + rotate_half(k) * SIN
        k = k.repeat_interleave(NH // NKV, dim=1)                 # reference only: llm3d never copies K/V
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HD) + mask, -1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, NH * HD) @ P[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"])
        g = h @ P[p + "mlp.gate_proj.weight"].T
        u = h @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    logits = rmsnorm(x, P["model.norm.weight"]) @ P["lm_head.weight"].T
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=IGNORE)
    return logits, loss

logits, loss = forward(params)
loss.backward()
records = [(n, params[n].detach().clone(), params[n].grad.detach().clone()) for n, _ in names()]

# 10 AdamW steps on the same batch, weight decay on matrices only, clipping at 1.0
decay = [params[n] for n, _ in names() if "norm" not in n]
no_decay = [params[n] for n, _ in names() if "norm" in n]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS)
step_losses = []
for s in range(STEPS):
    opt.zero_grad()
    _, l = forward(params)
    l.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), CLIP)
    opt.step()
    step_losses.append(l.item())

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "llama_small.bin")
os.makedirs(os.path.dirname(out), exist_ok=True)
fbits = lambda f: struct.unpack("<i", struct.pack("<f", f))[0]
tensors = [(n, w) for n, w, _ in records] + [("grad:" + n, g) for n, _, g in records]
tensors += [("logits", logits.detach().view(B * T, V)), ("loss", loss.detach().view(1, 1)),
            ("step_losses", torch.tensor(step_losses, dtype=torch.float64).view(1, STEPS))]
header = [0] * 256
header[:14] = [0x58495446, 1, V, C, L, NH, NKV, F, B, T, 0, STEPS, IGNORE, len(tensors)]
header[16:24] = [fbits(x) for x in (THETA, EPS, LR, BETA1, BETA2, ADAM_EPS, WD, CLIP)]
with open(out, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack(f"<{B*T}i", *ids.view(-1).tolist()))
    f.write(struct.pack(f"<{B*T}i", *targets.view(-1).tolist()))
    for n, t in tensors:
        t2 = t.reshape(t.shape[0] if t.dim() > 1 else 1, -1)
        f.write(n.encode().ljust(96, b"\0"))
        f.write(struct.pack("<2i", *t2.shape))
        f.write(t2.float().contiguous().numpy().tobytes())
print(f"wrote {out}: loss {loss.item():.6f}, losses after AdamW {step_losses[0]:.6f} -> {step_losses[-1]:.6f}")
