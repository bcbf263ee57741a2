#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch side of tools/bench-train.sh: the same llama shape and batch as molly-train, random
weights (values do not change the work), float32, eager attention as torch 1.13 has it.

  bench-train.py --mode lora|full --hidden H --layers L --heads N --ffn F --vocab V
                 --batch B --seq-len T --rank R --steps S --threads N

Prints one JSON line: tokens/s over the steps after the first, and the peak RSS.
"""
import argparse
import json
import math
import resource
import time

import torch

ap = argparse.ArgumentParser()
for k, d in [("hidden", 768), ("layers", 12), ("heads", 12), ("ffn", 2048), ("vocab", 512),
             ("batch", 8), ("seq-len", 256), ("rank", 16), ("steps", 4), ("threads", 2)]:
    ap.add_argument("--" + k, type=int, default=d)
ap.add_argument("--mode", default="lora")
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
E, L, H, F, V, T, B = a.hidden, a.layers, a.heads, a.ffn, a.vocab, a.seq_len, a.batch
D = E // H
full = a.mode == "full"


def mat(o, i):
    return torch.nn.Parameter(torch.randn(o, i) / math.sqrt(i), requires_grad=full)


class Lin(torch.nn.Module):
    def __init__(self, o, i, lora):
        super().__init__()
        self.w = mat(o, i)
        self.lora = lora and not full
        if self.lora:  # PEFT's init: A kaiming-uniform, B zero
            self.a = torch.nn.Parameter(torch.empty(a.rank, i).uniform_(-1 / math.sqrt(i), 1 / math.sqrt(i)))
            self.b = torch.nn.Parameter(torch.zeros(o, a.rank))

    def forward(self, x):
        y = x @ self.w.T
        if self.lora:
            y = y + ((x @ self.a.T) @ self.b.T)
        return y


def rms(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (Lin(E, E, True) for _ in range(4))
        self.g, self.u, self.d = Lin(F, E, False), Lin(F, E, False), Lin(E, F, False)
        self.n1 = torch.nn.Parameter(torch.ones(E), requires_grad=full)
        self.n2 = torch.nn.Parameter(torch.ones(E), requires_grad=full)

    def forward(self, x, cos, sin, mask):
        h = rms(x, self.n1)
        q, k, v = (m(h).view(B, T, H, D) for m in (self.q, self.k, self.v))
        q = torch.cat([q[..., ::2] * cos - q[..., 1::2] * sin, q[..., ::2] * sin + q[..., 1::2] * cos], -1)
        k = torch.cat([k[..., ::2] * cos - k[..., 1::2] * sin, k[..., ::2] * sin + k[..., 1::2] * cos], -1)
        s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
        x = x + self.o(torch.einsum("bhij,bjhd->bihd", p, v).reshape(B, T, E))
        h = rms(x, self.n2)
        return x + self.d(torch.nn.functional.silu(self.g(h)) * self.u(h))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = mat(V, E)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(L))
        self.norm = torch.nn.Parameter(torch.ones(E), requires_grad=full)
        self.out = mat(V, E)

    def forward(self, tok, tgt):
        pos = torch.arange(T, dtype=torch.float32)
        inv = 10000.0 ** (-2 * torch.arange(D // 2, dtype=torch.float32) / D)
        ang = (pos[:, None] * inv)[None, :, None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        x = self.emb[tok]
        for l in self.layers:
            x = l(x, cos, sin, mask)
        logits = rms(x, self.norm) @ self.out.T
        return torch.nn.functional.cross_entropy(logits.view(-1, V), tgt.view(-1))


m = Model()
params = [p for p in m.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4)
tok = torch.randint(0, V, (B, T))
tgt = torch.randint(0, V, (B, T))
times = []
for step in range(a.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = m(tok, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
steady = times[1:] if len(times) > 1 else times
print(json.dumps({"impl": "pytorch", "mode": a.mode, "tokens_per_s": B * T * len(steady) / sum(steady),
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "trainable": sum(p.numel() for p in params), "torch": torch.__version__}))
