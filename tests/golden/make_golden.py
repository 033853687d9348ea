#!/usr/bin/python3
"""Writes the golden file the C++ model test checks against: an independent PyTorch GPT-2 at a tiny,
odd-sized config (nothing a multiple of 8), with fixed weights.

Run with Debian's PyTorch:  /usr/bin/python3 tests/golden/make_golden.py tests/golden/gpt_tiny.bin

File layout (little-endian): int32 magic 0x7465726e ('tern'), int32 version 1, then int32
L, NH, C, V, maxT, B, T, steps; float32 lr, beta1, beta2, eps, weight_decay; then float32 arrays:
params (tern layout, llm.c order), inputs and targets as int32 [B*T] each, logits [B*T*V], loss [1],
grads (tern layout), losses of `steps` AdamW steps on the same batch [steps].
"""
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

L, NH, C, V, MAXT, B, T, STEPS = 2, 3, 36, 67, 13, 2, 11, 10
LR, BETA1, BETA2, EPS, WD = 1e-2, 0.9, 0.95, 1e-8, 0.1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(b, t, NH, c // NH).transpose(1, 2)
        k = k.view(b, t, NH, c // NH).transpose(1, 2)
        v = v.view(b, t, NH, c // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(MAXT, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
        return logits, loss

    def tern_tensors(self):
        """The 16 tensors in tern's order; per-layer ones stacked [L, ...]."""
        stack = lambda f: torch.stack([f(b) for b in self.h])
        return [
            self.wte.weight, self.wpe.weight,
            stack(lambda b: b.ln_1.weight), stack(lambda b: b.ln_1.bias),
            stack(lambda b: b.c_attn.weight), stack(lambda b: b.c_attn.bias),
            stack(lambda b: b.c_proj.weight), stack(lambda b: b.c_proj.bias),
            stack(lambda b: b.ln_2.weight), stack(lambda b: b.ln_2.bias),
            stack(lambda b: b.c_fc.weight), stack(lambda b: b.c_fc.bias),
            stack(lambda b: b.mlp_proj.weight), stack(lambda b: b.mlp_proj.bias),
            self.ln_f.weight, self.ln_f.bias,
        ]

    def tern_grads(self):
        stack = lambda f: torch.stack([f(b) for b in self.h])
        g = lambda p: p.grad
        return [
            g(self.wte.weight), g(self.wpe.weight),
            stack(lambda b: g(b.ln_1.weight)), stack(lambda b: g(b.ln_1.bias)),
            stack(lambda b: g(b.c_attn.weight)), stack(lambda b: g(b.c_attn.bias)),
            stack(lambda b: g(b.c_proj.weight)), stack(lambda b: g(b.c_proj.bias)),
            stack(lambda b: g(b.ln_2.weight)), stack(lambda b: g(b.ln_2.bias)),
            stack(lambda b: g(b.c_fc.weight)), stack(lambda b: g(b.c_fc.bias)),
            stack(lambda b: g(b.mlp_proj.weight)), stack(lambda b: g(b.mlp_proj.bias)),
            g(self.ln_f.weight), g(self.ln_f.bias),
        ]


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors]).float()


def main(path):
    torch.manual_seed(1337)
    model = GPT()
    with torch.no_grad():  # non-trivial layernorm parameters and biases, so their gradients are tested
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "ln" in name and "weight" in name else 0.0))
            else:
                p.copy_(torch.randn_like(p) * 0.1)
    idx = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    params0 = flat(model.tern_tensors())

    logits, loss = model(idx, targets)
    loss.backward()
    grads = flat(model.tern_grads())

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    model.zero_grad()
    for _ in range(STEPS):
        _, l = model(idx, targets)
        losses.append(l.item())
        opt.zero_grad()
        l.backward()
        opt.step()

    with open(path, "wb") as f:
        f.write(struct.pack("<10i", 0x7465726E, 1, L, NH, C, V, MAXT, B, T, STEPS))
        f.write(struct.pack("<5f", LR, BETA1, BETA2, EPS, WD))
        f.write(params0.numpy().astype("<f4").tobytes())
        f.write(idx.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(targets.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(logits.detach().reshape(-1).numpy().astype("<f4").tobytes())
        f.write(struct.pack("<f", loss.item()))
        f.write(grads.numpy().astype("<f4").tobytes())
        f.write(torch.tensor(losses).numpy().astype("<f4").tobytes())
    print(f"wrote {path}: loss {loss.item():.6f}, {len(params0)} params, losses {[round(x, 4) for x in losses]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpt_tiny.bin")
