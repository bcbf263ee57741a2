#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch reference for molly-train (issue #19).

Usage: train_reference.py DUMP_DIR MOLLY_JSONL

DUMP_DIR is what `molly-train --dump DUMP_DIR` wrote (config.json, base.safetensors,
init.safetensors, batch-*.safetensors, grads-*.safetensors, final.safetensors); MOLLY_JSONL is
its --json output. This script builds the same llama/qwen2 model in PyTorch from Molly's
initial weights (the frozen base and the LoRA A/B, or every weight in full mode), runs the same
batches with the same loss (mean over the step's labeled tokens), clipping, AdamW and
schedule, in float64, and checks:
  - every dumped gradient (the first steps, before clipping), the reference's computed at
    Molly's weights of that step (params-N): per tensor max|g_molly - g_ref| <= 1e-4 *
    max|g_ref|. (At later steps the two trajectories differ by rounding, and Adam's first
    updates, about lr·sign(g), turn sign noise in near-zero gradients into visible weight
    differences; the gradient check is about the gradient, not the trajectory.)
  - the loss at every step: |loss_molly - loss_ref| <= 1e-3 nats
  - the final weights: per tensor max|Δ| <= 1e-3 * max|w_ref| (reported)
Exit 0 when all hold, 1 otherwise, 77 when torch is missing.
"""
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError:
    print("SKIP: python3-torch is not installed (apt-get install python3-torch)")
    sys.exit(77)

torch.set_num_threads(1)  # tiny tensors: one thread avoids the pool's wake-ups
DT = torch.float64
GRAD_TOL = 1e-4
LOSS_TOL = 1e-3
WEIGHT_TOL = 1e-3
NAMES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def load_st(path):
    """A safetensors file as {name: tensor} (F32 and I32 only: what molly-train writes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        dtype = {"F32": torch.float32, "I32": torch.int32}[d["dtype"]]
        t = torch.frombuffer(bytearray(data[base + a:base + b]), dtype=dtype)
        out[name] = t.reshape(d["shape"]).clone()
    return out


def main():
    dump, molly_jsonl = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(dump, "config.json")))
    base = {k: v.to(DT) for k, v in load_st(os.path.join(dump, "base.safetensors")).items()}
    init = {k: v.to(DT) for k, v in load_st(os.path.join(dump, "init.safetensors")).items()}
    molly_steps = [json.loads(l) for l in open(molly_jsonl) if l.strip().startswith('{"step"')]
    full = cfg["mode"] == "full"
    E, L = cfg["n_embd"], cfg["n_layer"]
    H, HKV, D = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    RD = cfg["rope_dim"]
    eps = cfg["rms_eps"]

    params = {k: torch.nn.Parameter(v.clone()) for k, v in init.items()}
    trajectory = params
    order = list(init.keys())  # safetensors header order is sorted; any order is fine here

    def w(name):
        if full:
            if name == "output.weight" and name not in params:
                name = "token_embd.weight"
            p = params[name]
        else:
            if name == "output.weight" and name not in base:
                name = "token_embd.weight"
            p = base[name]
        return p.reshape(-1) if p.shape[0] == 1 and (name.endswith("norm.weight") or name.endswith(".bias")) else p

    def has(name):
        return name in (params if full else base)

    def rmsnorm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def proj(x, l, t):
        y = x @ w(f"blk.{l}.{NAMES[t]}.weight").T
        a = params.get(f"blk.{l}.{NAMES[t]}.weight.lora_a")
        if a is not None:
            b = params[f"blk.{l}.{NAMES[t]}.weight.lora_b"]
            y = y + (cfg["alpha"] / cfg["rank"]) * ((x @ a.T) @ b.T)
        return y

    def rope(x, pos, nh):
        # x [S, T, nh, D]
        half = RD // 2
        inv = cfg["rope_base"] ** (-2.0 * torch.arange(half, dtype=DT) / RD)
        ang = pos.to(DT)[..., None] * inv * cfg["rope_freq_scale"]  # [S, T, half]
        c, s = torch.cos(ang)[:, :, None, :], torch.sin(ang)[:, :, None, :]
        x = x.clone()
        if cfg["rope_neox"]:
            x0, x1 = x[..., :half].clone(), x[..., half:RD].clone()
            x[..., :half] = x0 * c - x1 * s
            x[..., half:RD] = x0 * s + x1 * c
        else:
            x0, x1 = x[..., 0:RD:2].clone(), x[..., 1:RD:2].clone()
            x[..., 0:RD:2] = x0 * c - x1 * s
            x[..., 1:RD:2] = x0 * s + x1 * c
        return x

    def loss_sum(batch):
        tok, tgt = batch["tokens"].long(), batch["targets"].long()
        pos, seg = batch["pos"].long(), batch["seg"].long()
        S, T = tok.shape
        x = w("token_embd.weight")[tok]
        i = torch.arange(T)
        causal = i[None, :] <= i[:, None]
        same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
        allowed = causal[None] & (same | torch.eye(T, dtype=torch.bool)[None])  # [S, T, T]
        for l in range(L):
            h = rmsnorm(x, w(f"blk.{l}.attn_norm.weight"))
            q, k, v = proj(h, l, 0), proj(h, l, 1), proj(h, l, 2)
            if has(f"blk.{l}.attn_q.bias"):
                q = q + w(f"blk.{l}.attn_q.bias")
                k = k + w(f"blk.{l}.attn_k.bias")
                v = v + w(f"blk.{l}.attn_v.bias")
            q = rope(q.reshape(S, T, H, D), pos, H)
            k = rope(k.reshape(S, T, HKV, D), pos, HKV)
            v = v.reshape(S, T, HKV, D)
            k = k.repeat_interleave(H // HKV, dim=2)
            v = v.repeat_interleave(H // HKV, dim=2)
            sc = torch.einsum("sihd,sjhd->shij", q, k) / math.sqrt(D)
            sc = sc.masked_fill(~allowed[:, None], float("-inf"))
            p = torch.softmax(sc, dim=-1)
            o = torch.einsum("shij,sjhd->sihd", p, v).reshape(S, T, H * D)
            x = x + proj(o, l, 3)
            h = rmsnorm(x, w(f"blk.{l}.ffn_norm.weight"))
            x = x + proj(torch.nn.functional.silu(proj(h, l, 4)) * proj(h, l, 5), l, 6)
        logits = rmsnorm(x, w("output_norm.weight")) @ w("output.weight").T
        lab = tgt >= 0
        return torch.nn.functional.cross_entropy(logits[lab], tgt[lab], reduction="sum"), int(lab.sum())

    decay = [params[k] for k in order if init[k].shape[0] > 1]
    no_decay = [params[k] for k in order if init[k].shape[0] == 1]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], foreach=False)

    def lr_at(step):
        wu, total, sched = cfg["warmup"], cfg["total_steps"], cfg["sched"]
        if step < wu:
            return cfg["lr"] * step / wu
        if sched == 2:
            return cfg["lr"]
        p = (step - wu) / max(1, total - wu)
        return cfg["lr"] * (max(0.0, 1 - p) if sched == 1 else max(0.0, 0.5 * (1 + math.cos(math.pi * p))))

    fails = 0
    worst_loss = worst_grad = 0.0
    steps = cfg["total_steps"]
    if len(molly_steps) != steps:
        print(f"FAIL: molly reported {len(molly_steps)} steps, expected {steps}")
        return 1
    for step in range(steps):
        opt.zero_grad()
        batches = []
        k = 0
        while True:
            p = os.path.join(dump, f"batch-{step:06d}-{k}.safetensors")
            if not os.path.exists(p):
                break
            batches.append(load_st(p))
            k += 1
        total, n_lab = 0.0, 0
        sums = []
        for b in batches:
            s, n = loss_sum(b)
            sums.append(s)
            n_lab += n
        n_lab = max(n_lab, 1)
        loss = sum(sums) / n_lab
        loss.backward()
        ref_loss = float(loss)
        d = abs(ref_loss - molly_steps[step]["loss"])
        worst_loss = max(worst_loss, d)
        if d > LOSS_TOL:
            print(f"FAIL step {step + 1}: loss molly {molly_steps[step]['loss']:.6f} ref {ref_loss:.6f}")
            fails += 1
        gpath = os.path.join(dump, f"grads-{step:06d}.safetensors")
        if os.path.exists(gpath):
            g = load_st(gpath)
            # the reference gradient at Molly's weights of this step
            at = load_st(os.path.join(dump, f"params-{step:06d}.safetensors"))
            params = {k: torch.nn.Parameter(v.to(DT)) for k, v in at.items()}
            sum(loss_sum(b)[0] for b in batches).div(n_lab).backward()
            grads_at = {k: p.grad for k, p in params.items()}
            params = trajectory
            for name in order:
                ref = grads_at[name]
                if ref is None:
                    ref = torch.zeros_like(params[name])
                mine = g[name].to(DT)
                scale = float(ref.abs().max())
                diff = float((mine - ref).abs().max())
                rel = diff / scale if scale > 0 else diff
                worst_grad = max(worst_grad, rel)
                if diff > GRAD_TOL * scale + (1e-12 if scale == 0 else 0):
                    print(f"FAIL step {step + 1} grad {name}: max|Δ| {diff:.3g} max|g_ref| {scale:.3g}")
                    fails += 1
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["clip"])
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        opt.step()
    fin = load_st(os.path.join(dump, "final.safetensors"))
    worst_w = 0.0
    for name in order:
        ref = params[name].detach()
        diff = float((fin[name].to(DT) - ref).abs().max())
        scale = float(ref.abs().max())
        worst_w = max(worst_w, diff / scale if scale else diff)
        if diff > WEIGHT_TOL * scale:
            print(f"FAIL final weight {name}: max|Δ| {diff:.3g} max|w| {scale:.3g}")
            fails += 1
    print(f"{cfg['arch']} {cfg['mode']}: {steps} steps, max loss |Δ| {worst_loss:.2e} nats "
          f"(tol {LOSS_TOL}), max grad |Δ|/max|g| {worst_grad:.2e} (tol {GRAD_TOL}), "
          f"max final weight |Δ|/max|w| {worst_w:.2e} (tol {WEIGHT_TOL})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
