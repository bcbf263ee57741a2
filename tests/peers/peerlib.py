# SPDX-License-Identifier: MIT
"""What the Python peers tests share: llama-server started on a free loopback port, and
molly-run's greedy tokens with the first generated position's probabilities."""
import http.client
import math
import os
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(llama_bin, model, args, log_path=os.devnull):
    """llama-server on model with args added, once /health answers: (process, port). The
    deadline only turns a hang into a failure."""
    port = free_port()
    cmd = [f"{llama_bin}/llama-server", "-m", model, "--host", "127.0.0.1", "--port",
           str(port), "--no-webui", *args]
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.time() + 300
    while True:
        if p.poll() is not None:
            raise RuntimeError(f"llama-server exited {p.returncode}: {' '.join(cmd)}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port
        except OSError:
            pass
        if time.time() > deadline:
            p.terminate()
            p.wait()
            raise RuntimeError("llama-server never became healthy")
        time.sleep(0.1)


def molly_greedy(molly_bin, model, prompt, n, work, extra=()):
    """molly-run --temp 0: the generated ids (without an end-of-generation token it stopped
    at) and the first generated position's probabilities over the vocabulary."""
    ids, logits = os.path.join(work, "ids"), os.path.join(work, "logits")
    cmd = [f"{molly_bin}/molly-run", "--model", model, "--prompt", prompt, "-n", str(n),
           "--temp", "0", "--quiet", "--threads", "2", "--ids-out", ids, "--logits-out", logits,
           *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    toks = [int(l) for l in open(ids) if l.strip()]
    if len(toks) < n:  # stopped at end of generation (llama-server is asked to ignore it)
        toks = toks[:-1]
    z = [float(l.split()[1]) for l in open(logits) if l.strip()]
    m = max(z)
    s = sum(math.exp(v - m) for v in z)
    return toks, [math.exp(v - m) / s for v in z]
