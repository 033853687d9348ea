#!/usr/bin/python3
"""The PyTorch baseline for bench/vs_pytorch.sh: a nanoGPT-style GPT-2 training step (same model as tern:
tied head, tanh GELU, AdamW with decay on matrices, grad clipping), on 2 threads. Prints tokens/s as the
median of 3 timed runs. bf16 = CPU autocast. FLUSH_DENORMAL=1 (the tuned run) sets torch.set_flush_denormal:
tern's CPU backend flushes subnormals too, and on an Intel Xeon PyTorch's fp32 steps slowed 5x from the third
step on without it (L6 C384 B8 T256: 166 vs 827 tokens/s over 5 steps) as AdamW's moments drifted there.

usage: pytorch_step.py L H C V B T fp32|bf16 [steps]
"""
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else self._attn(q, k, v, T)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    @staticmethod
    def _attn(q, k, v, T):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return att @ v


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    L, H, C, V, B, T = (int(a) for a in sys.argv[1:7])
    precision = sys.argv[7]
    steps = int(sys.argv[8]) if len(sys.argv) > 8 else 5
    torch.set_num_threads(2)
    if os.environ.get("FLUSH_DENORMAL") == "1":
        torch.set_flush_denormal(True)
    torch.manual_seed(0)
    model = GPT(L, H, C, V, T)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm up
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(B * T * steps / (time.perf_counter() - t0))
    print(f"{statistics.median(rates):.1f}")


if __name__ == "__main__":
    main()
