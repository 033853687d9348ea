#!/usr/bin/python3
"""Writes the LoRA golden file: make_golden.py's independent PyTorch GPT-2 with PEFT-style adapters on the four
block matrices (y = x W^T + b + s (x A^T) B^T, s = alpha / r; the base weights frozen), at the same tiny,
odd-sized config and a rank of 3.

Run with Debian's PyTorch:  /usr/bin/python3 tests/golden/make_golden_lora.py tests/golden/gpt_tiny_lora.bin

File layout (little-endian): int32 magic 0x746c7261 ('tlra'), int32 version 1, then int32 L, NH, C, V, maxT,
B, T, steps, rank; float32 alpha, lr, beta1, beta2, eps, weight_decay; then float32 arrays: base params (tern
layout), adapters (tern's LoRA layout: for qkv, attproj, fc, fcproj in turn A [L, r, in] then B [L, out, r]),
inputs and targets as int32 [B*T] each, loss [1], the adapters' gradients, the losses of `steps` AdamW steps
(adapters only) on the same batch [steps], and the adapters after them.
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (the GPT the plain golden file is written with)

R, ALPHA = 3, 5.0
S = ALPHA / R


class LoRA(torch.nn.Module):
    """A frozen nn.Linear plus s * B A, as PEFT's lora.Linear computes it (unmerged)."""

    def __init__(self, base):
        super().__init__()
        self.base = base
        self.A = torch.nn.Parameter(torch.randn(R, base.in_features) * 0.2)
        self.B = torch.nn.Parameter(torch.randn(base.out_features, R) * 0.2)  # non-zero: both gradients tested

    def forward(self, x):
        return self.base(x) + S * F.linear(F.linear(x, self.A), self.B)


def main(path):
    torch.manual_seed(4242)
    model = mg.GPT()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "ln" in name and "weight" in name else 0.0))
            else:
                p.copy_(torch.randn_like(p) * 0.1)
    base = mg.flat(model.tern_tensors())
    for p in model.parameters():
        p.requires_grad_(False)
    for b in model.h:
        b.c_attn, b.c_proj, b.c_fc, b.mlp_proj = LoRA(b.c_attn), LoRA(b.c_proj), LoRA(b.c_fc), LoRA(b.mlp_proj)
    order = [lambda b: b.c_attn, lambda b: b.c_proj, lambda b: b.c_fc, lambda b: b.mlp_proj]

    def adapters(get):
        out = []
        for f in order:
            out.append(torch.stack([get(f(b).A) for b in model.h]))
            out.append(torch.stack([get(f(b).B) for b in model.h]))
        return mg.flat(out)

    idx = torch.randint(0, mg.V, (mg.B, mg.T))
    targets = torch.randint(0, mg.V, (mg.B, mg.T))
    lora0 = adapters(lambda p: p)
    _, loss = model(idx, targets)
    loss.backward()
    grads = adapters(lambda p: p.grad)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=mg.LR, betas=(mg.BETA1, mg.BETA2), eps=mg.EPS, weight_decay=mg.WD)
    losses = []
    for _ in range(mg.STEPS):
        _, l = model(idx, targets)
        losses.append(l.item())
        opt.zero_grad()
        l.backward()
        opt.step()
    lora_final = adapters(lambda p: p)

    with open(path, "wb") as f:
        f.write(struct.pack("<11i", 0x746C7261, 1, mg.L, mg.NH, mg.C, mg.V, mg.MAXT, mg.B, mg.T, mg.STEPS, R))
        f.write(struct.pack("<6f", ALPHA, mg.LR, mg.BETA1, mg.BETA2, mg.EPS, mg.WD))
        for t in (base, lora0):
            f.write(t.numpy().astype("<f4").tobytes())
        f.write(idx.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(targets.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(struct.pack("<f", loss.item()))
        f.write(grads.numpy().astype("<f4").tobytes())
        f.write(torch.tensor(losses).numpy().astype("<f4").tobytes())
        f.write(lora_final.numpy().astype("<f4").tobytes())
    print(f"wrote {path}: loss {loss.item():.6f}, {len(base)} base + {len(lora0)} adapter params, "
          f"losses {[round(x, 4) for x in losses]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpt_tiny_lora.bin")
