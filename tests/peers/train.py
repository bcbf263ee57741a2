#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Interop of molly-train's outputs with the pinned llama.cpp (issue #19, label peers).

Usage: train-peers.py MOLLY_BIN_DIR LLAMA_BIN_DIR BASE.gguf WORKDIR

1. A LoRA adapter trained by molly-train (every target, GGUF LoRA), loaded by llama-server
   (--lora) and by molly-run (--lora): the same greedy tokens (up to the end of generation),
   and the first generated position's top-5 probabilities within 1e-4.
2. A full model trained and written by molly-train (GGUF) in llama-server and molly-run: the
   same greedy tokens and top-5 probabilities within 1e-4.
"""
import http.client
import json
import math
import os
import subprocess
import sys

from peerlib import molly_greedy, start_llama_server

molly_bin, llama_bin, base, work = sys.argv[1:5]
PROMPT = "Once upon a time"
N = 12
DATA = [
    {"prompt": "Once upon a time, there was a", "completion": " little girl named Lily."},
    {"text": "The cat sat on the mat. It was happy."},
    {"prompt": "Tom had a ball.", "completion": " He played with it all day."},
    {"text": "One day, a big dog ran to the park. He saw a bird."},
]


def llama(model, lora=None):
    args = ["-t", "2", "-c", "512", "-np", "1"]
    if lora:
        args += ["--lora", lora]
    p, port = start_llama_server(llama_bin, model, args)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        body = {"prompt": PROMPT, "n_predict": N, "temperature": 0, "top_k": 1, "seed": 0,
                "return_tokens": True, "n_probs": 5, "post_sampling_probs": False,
                "cache_prompt": False, "ignore_eos": True, "samplers": ["top_k"]}
        c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
        r = json.loads(c.getresponse().read())
        if "completion_probabilities" not in r:
            raise RuntimeError(f"llama-server answered {json.dumps(r)[:400]}")
        first = r["completion_probabilities"][0]["top_logprobs"]
        return r["tokens"], {t["id"]: math.exp(t["logprob"]) for t in first}
    finally:
        p.terminate()
        p.wait()


def molly(model, lora=None):
    return molly_greedy(molly_bin, model, PROMPT, N, work, ["--lora", lora] if lora else [])


def train(out, *extra):
    data = os.path.join(work, "data.jsonl")
    with open(data, "w") as f:
        for d in DATA:
            f.write(json.dumps(d) + "\n")
    subprocess.run([f"{molly_bin}/molly-train", "--model", base, "--data", data, "--out", out,
                    "--steps", "20", "--batch", "2", "--seq-len", "48", "--lr", "3e-3",
                    "--threads", "2", "--json", *extra], check=True, stdout=subprocess.DEVNULL)


def compare(what, model, lora=None):
    lt, lp = llama(model, lora)
    mt, mp = molly(model, lora)
    worst = max(abs(lp[i] - mp[i]) for i in lp)
    # llama-server runs with ignore_eos (this build refuses to end a plain completion at EOS
    # with "does not match the expected Content-only format"): compare up to Molly's end
    ok = lt[:len(mt)] == mt and worst <= 1e-4
    print(f"{what}: llama.cpp {lt}\n{' ' * len(what)}  molly     {mt}\n"
          f"{' ' * len(what)}  top-5 probabilities max|Δ| {worst:.2e} (tolerance 1e-4): "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def main():
    lora = os.path.join(work, "lora.gguf")
    full = os.path.join(work, "full.gguf")
    train(lora, "--format", "gguf", "--targets", "all", "--rank", "8")
    train(full, "--full", "--lr", "1e-3")
    ok = compare("LoRA (GGUF) on the base", base, lora)
    ok &= compare("full model (GGUF)", full)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
