#!/usr/bin/env python3
"""tests/hf_compare.py — llm3d's logits against Hugging Face transformers' LlamaForCausalLM.

Needs PyTorch and transformers (not part of `make test`; CI has neither). Run
from the repo root after `make` (or with BUILD=<folder> for another build):

    python3 tests/hf_compare.py            # BUILD=build-ckpt python3 tests/hf_compare.py

It makes a tiny token shard, trains llm3d for a few steps (untied and tied
heads), exports each run with `build/train export` (fp32 and bf16), runs the
same tokens through `build/train logits` and through LlamaForCausalLM loaded
from the exported folder in fp32, and requires a relative L2 error < 1e-4.
Then the other direction: a randomly initialised LlamaForCausalLM saved by
transformers' save_pretrained is read by llm3d (`logits --model=<that folder>`)
and must match too. Prints one line per case and "N passed, N failed".
"""
import os
import struct
import subprocess
import sys
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
TRAIN = os.path.join(ROOT, BUILD, "train")
TOL = 1e-4
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    passed += bool(ok)
    failed += not ok


def run(*args):
    r = subprocess.run([TRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join([TRAIN, *args])} failed:\n{r.stdout[-3000:]}")
    return r.stdout


def write_shard(path, tokens, vocab):
    header = [0] * 256
    header[0], header[1], header[2], header[3], header[4], header[5] = 0x4452414D, 1, len(tokens), 0, 2, vocab
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def llm3d_logits(model_dir, ids, out):
    run("logits", f"--model={model_dir}", "--ids=" + ",".join(map(str, ids)), f"--out={out}")
    with open(out, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        assert h[0] == 0x5354474C and h[1] == 1, "not an llm3d logits file"
        T, V = h[2], h[3]
        f.read(4 * T)
        x = torch.frombuffer(bytearray(f.read(4 * T * V)), dtype=torch.float32)
    return x.view(T, V)


def hf_logits(model_dir, ids):
    try:
        model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:   # transformers < 4.56 spells it torch_dtype
        model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def compare(model_dir, ids, tmp, what):
    ours = llm3d_logits(model_dir, ids, os.path.join(tmp, "logits.bin"))
    theirs = hf_logits(model_dir, ids)
    rel = ((ours - theirs).norm() / theirs.norm()).item()
    check(ours.shape == theirs.shape and rel < TOL, f"{what}: logits {tuple(ours.shape)} rel L2 error {rel:.2e} (< {TOL:g})")


def main():
    if not os.access(TRAIN, os.X_OK):
        sys.exit(f"error: no {TRAIN}; run `make` first (or set BUILD=<build folder>)")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="llm3d_hf_") as tmp:
        V = 300
        g = torch.Generator().manual_seed(1)
        tokens = [(i * 7 + int(torch.randint(0, 5, (1,), generator=g))) % V for i in range(20000)]
        shard = os.path.join(tmp, "train.bin")
        write_shard(shard, tokens, V)
        ids = [int(t) for t in torch.randint(0, V, (48,), generator=g)]
        for tie in (0, 1):
            run_dir = os.path.join(tmp, f"run{tie}")
            run(f"--train_data={shard}", "--val_data=", f"--run_dir={run_dir}", "--dim=64", "--n_layers=2", "--n_heads=4",
                "--n_kv_heads=2", "--ffn_dim=160", "--seq_len=64", "--batch_size=4", "--max_steps=30", "--warmup_steps=5",
                "--lr=3e-3", f"--tie_embeddings={tie}", "--rope_theta=500000", "--log_every=100")
            for dtype in ("f32", "bf16"):
                out = os.path.join(tmp, f"hf{tie}_{dtype}")
                run("export", f"--checkpoint={run_dir}", f"--out={out}", f"--dtype={dtype}")
                compare(out, ids, tmp, f"llm3d -> HF, tie_embeddings={tie}, {dtype} export")
        # the other direction: a folder written by transformers itself
        for tie in (False, True):
            cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=tie)
            model = LlamaForCausalLM(cfg).float()
            with torch.no_grad():   # norms away from 1 so that a misplaced weight shows
                for n, p in model.named_parameters():
                    if "norm" in n:
                        p.uniform_(0.5, 1.5)
            out = os.path.join(tmp, f"from_hf_{int(tie)}")
            model.save_pretrained(out, safe_serialization=True)
            compare(out, ids, tmp, f"HF save_pretrained -> llm3d, tie_word_embeddings={tie}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
