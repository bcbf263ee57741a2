# SPDX-License-Identifier: MIT
"""Molly against llama.cpp on the same machine, the same files and the same threads.

Run through tools/bench-vs-llama.sh, which builds the peer and makes the models; this file does
the measuring and the table. Every figure is a ratio, Molly / llama.cpp (> 1: Molly is faster),
taken per round with the two sides run back to back, the one that goes first alternating from
round to round; the figure is the median of the rounds' ratios, with their min and max.

CPU share. The other vCPU of a 2-core VM is often someone else's build, and then a run's tok/s
are not the program's. Both benchmarks announce each timed run on stderr (llama-bench
--progress, molly-bench --progress) and write something the moment it ends; this program reads
the child's threads' /proc/PID/task/*/schedstat (CPU time, and time spent runnable but waiting
for a CPU, in ns) at both moments. A run's share is CPU / (CPU + waiting): what the program got
of the CPU time it asked for. A round in which either side's share of any timed run is below
--min-share (0.85) is run again, at most --max-tries times; after that it is kept, marked
noisy, and left out of the median unless every round was noisy. (CPU / (threads x wall), the
figure molly-bench calls cpu_util, is reported as well; it cannot be the rule, since it is
also low when a program leaves its own threads idle: Molly's prefill of the 100m models does,
about a fifth of the time.) The servers: the same share, of the server process over the timed
load. getrusage (wait4) of each whole benchmark child is kept in the JSON.
"""
import argparse
import ctypes
import http.client
import json
import os
import random
import re
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ENGINE_MODELS = ["1b-q8_0", "1b-q4_0", "100m-f32", "100m-q8_0", "100m-q4_0"]
SERVE_MODEL = "100m-q8_0"
N_ADAPTERS = 8
WORDS = ("river stone quiet paper window garden silver morning letter winter orange candle "
         "forest music bridge shadow planet yellow market island thunder velvet harbor mirror "
         "engine lantern meadow pocket rabbit saddle ticket valley wander").split()


def raise_priority():
    """With the kernel's autogroups (sched_autogroup_enabled), CPU time is shared out between
    sessions first: a process's own nice only ranks it inside its session, so on a box where
    other people's builds run in their sessions, a benchmark gets its session's share, not
    the cores. Root may give this session's autogroup nice -20 (a CFS weight, not a real-time
    class: nothing else starves outright); both sides and the load client run in it alike."""
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-20")
        with open("/proc/self/autogroup") as f:
            return "autogroup " + f.read().split("/", 1)[-1].strip()
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        return "nice -20"
    except OSError:
        return "normal"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- CPU time of a running child ----

def child_cpu_ns(pid):
    """(CPU ns, runnable-but-waiting ns) summed over pid's threads (schedstat), or None."""
    run = wait = 0
    seen = False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                x = f.read().split()
            run, wait, seen = run + int(x[0]), wait + int(x[1]), True
        except (OSError, ValueError, IndexError):
            pass  # the thread ended
    return (run, wait) if seen else None


def share_of(c0, c1, wall, threads):
    """(share, cpu_util) between two child_cpu_ns readings wall seconds apart."""
    if c0 is None or c1 is None or wall <= 0:
        return 0.0, 0.0
    run, wait = c1[0] - c0[0], c1[1] - c0[1]
    return (run / (run + wait) if run + wait > 0 else 0.0), run / 1e9 / (threads * wall)


def run_traced(cmd):
    """Runs cmd; returns (stdout lines, events, whole-run rusage). Each event is one read from
    the child's stdout or stderr: (stream, complete lines in it, monotonic time, the child's
    CPU ns at that moment). A line cut by the read goes with the read that completes it."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=die_with_parent)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ, "out")
    sel.register(p.stderr, selectors.EVENT_READ, "err")
    bufs = {"out": b"", "err": b""}
    events, out_lines, err_tail = [], [], []
    open_streams = 2
    while open_streams:
        for key, _ in sel.select():
            chunk = os.read(key.fileobj.fileno(), 65536)
            now, cpu = time.monotonic(), child_cpu_ns(p.pid)
            if chunk:
                *lines, bufs[key.data] = (bufs[key.data] + chunk).split(b"\n")
            else:  # end of the stream: what is left is its last line
                sel.unregister(key.fileobj)
                open_streams -= 1
                lines, bufs[key.data] = [bufs[key.data]] if bufs[key.data] else [], b""
            lines = [raw.decode(errors="replace") for raw in lines]
            events.append((key.data, lines, now, cpu))
            (out_lines if key.data == "out" else err_tail).extend(lines)
            del err_tail[:-40]
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    if rc != 0:
        raise RuntimeError(f"{cmd[0]} exited with {rc}:\n" + "\n".join(err_tail))
    return out_lines, events, {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall}


# ---- one engine comparison ----

TIMED_RUN = re.compile(r"benchmark \d+/\d+: (prompt|generation) run \d+/\d+$"  # llama-bench
                       r"|^molly-bench: (pp|tg) run \d+/\d+$")


def timed_runs(a, events):
    """{"pp": (share, cpu_util), "tg": ...}: each timed run from its announcement to the next
    read from the child (the worst, if there are several reps)."""
    out, start = {}, None
    for stream, lines, t, cpu in events:
        if start is not None:
            what, t0, c0 = start
            share, util = share_of(c0, cpu, t - t0, a.threads)
            prev = out.get(what)
            out[what] = (share, util) if prev is None or share < prev[0] else prev
            start = None
        for line in lines:
            m = TIMED_RUN.search(line) if stream == "err" else None
            if m:
                # a start and its end in one read leave no window: counted as share 0
                start = ("pp" if m.group(1) == "prompt" or m.group(2) == "pp" else "tg", t, cpu)
                if line is not lines[-1]:
                    out[start[0]], start = (0.0, 0.0), None
    return out


def side_result(a, tok, runs, ru):
    r = {"pp": tok["pp"], "tg": tok["tg"],
         "whole_cpu_util": ru["cpu_s"] / (a.threads * ru["wall_s"])}
    for k in ("pp", "tg"):
        r[k + "_share"], r[k + "_cpu_util"] = runs.get(k, (0.0, 0.0))
    return r


def molly_bench(a, model):
    out, events, ru = run_traced([f"{a.molly_bin}/molly-bench", "--model", model, "--threads",
                                  str(a.threads), "--pp", str(a.pp), "--tg", str(a.tg), "--reps",
                                  "1", "--json", "--progress"])
    j = json.loads(out[-1])
    r = side_result(a, {"pp": j["pp_tok_s"], "tg": j["tg_tok_s"]}, timed_runs(a, events), ru)
    r["simd"] = j.get("simd")
    return r


def llama_bench(a, model):
    out, events, ru = run_traced([f"{a.llama_bin}/llama-bench", "-m", model, "-t", str(a.threads),
                                  "-p", str(a.pp), "-n", str(a.tg), "-r", "1", "-o", "jsonl",
                                  "--progress"])
    tok, info = {}, {}
    for line in out:
        if line.startswith("{"):
            info = json.loads(line)
            tok["pp" if info["n_gen"] == 0 else "tg"] = info["avg_ts"]
    if "pp" not in tok or "tg" not in tok:
        raise RuntimeError("llama-bench printed no pp/tg result")
    r = side_result(a, tok, timed_runs(a, events), ru)
    r["cpu_info"], r["build"] = info.get("cpu_info"), info.get("build_commit")
    return r


def engine_case(a, rnd, name):
    model = f"{a.models}/{name}.gguf"
    sides = [("molly", molly_bench), ("llama", llama_bench)]
    if rnd % 2 == 0:
        sides.reverse()
    tries = []
    for attempt in range(1, a.max_tries + 1):
        r = {s: fn(a, model) for s, fn in sides}
        low = min(r[s][k] for s in r for k in ("pp_share", "tg_share"))
        tries.append(round(low, 3))
        if low >= a.min_share:
            break
    row = {"round": rnd, "model": name, "first": sides[0][0], "tries": attempt,
           "noisy": low < a.min_share, "molly": r["molly"], "llama": r["llama"],
           "pp_ratio": r["molly"]["pp"] / r["llama"]["pp"],
           "tg_ratio": r["molly"]["tg"] / r["llama"]["tg"], "lowest_share_per_try": tries}
    log(f"round {rnd} {name}: pp {r['molly']['pp']:.1f}/{r['llama']['pp']:.1f} = "
        f"{row['pp_ratio']:.2f}, tg {r['molly']['tg']:.1f}/{r['llama']['tg']:.1f} = "
        f"{row['tg_ratio']:.2f}; share pp {r['molly']['pp_share']:.2f}/{r['llama']['pp_share']:.2f} "
        f"tg {r['molly']['tg_share']:.2f}/{r['llama']['tg_share']:.2f}, cpu_util pp "
        f"{r['molly']['pp_cpu_util']:.2f}/{r['llama']['pp_cpu_util']:.2f} tg "
        f"{r['molly']['tg_cpu_util']:.2f}/{r['llama']['tg_cpu_util']:.2f}; tries {attempt}"
        + (" (noisy)" if row["noisy"] else ""))
    return row


# ---- servers ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """In the child: SIGTERM when this program goes, however it goes (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


class Server:
    """One server process (mollyd or llama-server) on a free loopback port."""

    def __init__(self, a, kind, with_adapters, tmp):
        self.kind, self.port, self.bad_utf8, self.unparsed = kind, free_port(), 0, 0
        self.adapter_names = [f"a{i}" for i in range(N_ADAPTERS)] if with_adapters else []
        model = f"{a.models}/{SERVE_MODEL}.gguf"
        logf = open(f"{tmp}/{kind}-{int(with_adapters)}.log", "wb")
        if kind == "molly":
            d = f"{tmp}/mollyd-{self.port}"
            os.makedirs(f"{d}/state", exist_ok=True)
            os.makedirs(f"{d}/run", exist_ok=True)
            conf = (f"[Model]\nPath={model}\nName=base\nThreads={a.threads}\n"
                    f"[Engine]\nMaxSequences=8\n"
                    f"[Adapters]\nDirectory={a.models}/adapters\nLoad={' '.join(self.adapter_names)}\n"
                    f"HotType={a.hot_type}\n"
                    f"[HTTP]\nListen=127.0.0.1:{self.port}\n[DBus]\nBus=none\n"
                    f"[Paths]\nStateDirectory={d}/state\nRuntimeDirectory={d}/run\n")
            with open(f"{d}/mollyd.conf", "w") as f:
                f.write(conf)
            cmd = [f"{a.molly_bin}/mollyd", "--config", f"{d}/mollyd.conf"]
        else:
            cmd = [f"{a.llama_bin}/llama-server", "-m", model, "-t", str(a.threads), "-tb",
                   str(a.threads), "-c", "4096", "-np", "8", "--host", "127.0.0.1", "--port",
                   str(self.port), "--no-webui", "--metrics"]
            for n in self.adapter_names:
                cmd += ["--lora", f"{a.models}/adapters/{n}.gguf"]
            if self.adapter_names:
                cmd.append("--lora-init-without-apply")
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent)
        self.logpath = logf.name
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{kind} exited at start; log: {self.logpath}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{kind} did not come up; log: {self.logpath}")

    def generated(self):
        """llama-server: its count of generated tokens (/metrics). It runs every answer through
        its chat-output parser, which refuses one (HTTP 500, "does not match the expected
        Content-only format") when a random model ends up with a lone byte token, not UTF-8,
        in the text: the tokens were generated all the same (ignore_eos), so they are counted
        here, from the server. mollyd: None (its answers' usage counts)."""
        if self.kind != "llama":
            return None
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        m = re.search(r"^llamacpp:tokens_predicted_total\s+(\S+)", text, re.M)
        return int(float(m.group(1)))

    def body(self, prompt, i, tokens):
        b = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        if self.kind == "molly":
            b["model"] = self.adapter_names[i % N_ADAPTERS] if self.adapter_names else "base"
        elif self.adapter_names:
            b["lora"] = [{"id": i % N_ADAPTERS, "scale": 1.0}]
        return b

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:  # idle, both stop at once; with requests in flight (^C) it need not wait
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def prompt_for(rng):
    return "Request " + " ".join(rng.choice(WORDS) for _ in range(12))


def load(a, srv, streams, rng):
    """streams concurrent completions of a.serve_tokens tokens; each prompt differs, so no
    server can reuse a cached prefix. Returns aggregate generated tok/s (from the first
    request's start to the last answer), the server's CPU share and cpu_util over that time,
    and the mean prompt length in tokens (as the server counted it)."""
    bodies = [json.dumps(srv.body(prompt_for(rng), i, a.serve_tokens)) for i in range(streams)]
    done, errors, bad_utf8, unparsed = [None] * streams, [], [], []
    barrier = threading.Barrier(streams + 1)

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
        c.connect()
        barrier.wait()
        try:
            c.request("POST", "/v1/completions", bodies[i], {"Content-Type": "application/json"})
            resp = c.getresponse()
            raw = resp.read()
            t = time.monotonic()
            try:
                text = raw.decode()
            except UnicodeDecodeError:  # counted, not fatal: the speed is still the speed
                bad_utf8.append(i)
                text = raw.decode(errors="replace")
            if srv.kind == "llama" and resp.status == 500 and "Content-only" in text:
                unparsed.append(i)  # generated, then refused (see Server)
                done[i] = (t, None, None)
                return
            j = json.loads(text)
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {j}")
            done[i] = (t, j["usage"]["completion_tokens"], j["usage"]["prompt_tokens"])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{srv.kind} stream {i}: {e}")

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(streams)]
    for t in ts:
        t.start()
    m0 = srv.generated()
    barrier.wait()
    t0, c0 = time.monotonic(), child_cpu_ns(srv.proc.pid)
    for t in ts:
        t.join()
    t1, c1 = time.monotonic(), child_cpu_ns(srv.proc.pid)
    if errors:
        raise RuntimeError("; ".join(errors))
    wall = max(d[0] for d in done) - t0
    tokens = srv.generated() - m0 if m0 is not None else sum(d[1] for d in done)
    if tokens != streams * a.serve_tokens:
        raise RuntimeError(f"{srv.kind}: {tokens} tokens generated, not {streams * a.serve_tokens}")
    share, util = share_of(c0, c1, t1 - t0, a.threads)
    if bad_utf8 or unparsed:
        log(f"{srv.kind}: of {streams} answers, {len(bad_utf8)} not UTF-8, {len(unparsed)} "
            "refused by the chat-output parser")
    srv.bad_utf8 += len(bad_utf8)
    srv.unparsed += len(unparsed)
    prompts = [d[2] for d in done if d[2] is not None]
    return tokens / wall, share, util, sum(prompts) / max(len(prompts), 1)


def serve_case(a, rnd, with_adapters, tmp):
    order = ["molly", "llama"] if rnd % 2 else ["llama", "molly"]
    res = {}
    for kind in order:
        rng = random.Random(rnd * 100 + with_adapters)  # both servers get the same prompts
        srv = Server(a, kind, with_adapters, tmp)
        try:
            load(a, srv, N_ADAPTERS, rng)  # warm-up: every adapter once, pages faulted in
            for streams in a.streams:
                for attempt in range(1, a.max_tries + 1):
                    tok_s, share, util, prompt = load(a, srv, streams, rng)
                    if share >= a.min_share:
                        break
                res[(kind, streams)] = {"tok_s": tok_s, "share": share, "cpu_util": util,
                                        "tries": attempt, "prompt_tokens": prompt}
        finally:
            srv.stop()
        res[(kind, "bad_utf8")] = srv.bad_utf8
        res[(kind, "unparsed")] = srv.unparsed
    rows = []
    for streams in a.streams:
        m, l = res[("molly", streams)], res[("llama", streams)]
        row = {"round": rnd, "streams": streams, "adapters": N_ADAPTERS if with_adapters else 0,
               "first": order[0], "molly": m, "llama": l, "ratio": m["tok_s"] / l["tok_s"],
               "noisy": min(m["share"], l["share"]) < a.min_share,
               "answers_not_utf8": {k: res[(k, "bad_utf8")] for k in order},
               "answers_refused_by_llama_parser": res[("llama", "unparsed")]}
        log(f"round {rnd} serve {streams} streams, {row['adapters']} adapters: "
            f"{m['tok_s']:.1f}/{l['tok_s']:.1f} = {row['ratio']:.2f} (cpu share "
            f"{m['share']:.2f}/{l['share']:.2f}, cpu_util {m['cpu_util']:.2f}/{l['cpu_util']:.2f})"
            + (" (noisy)" if row["noisy"] else ""))
        rows.append(row)
    return rows


# ---- summary ----

def summarize(rows, key, get):
    clean = [r for r in rows if not r["noisy"]]
    use = clean or rows
    v = [get(r) for r in use]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": len(use),
            "noisy_rounds": len(rows) - len(clean), "all_noisy": not clean, "what": key}


def cpu_description():
    d = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            d[k.strip()] = v.strip()
    except OSError:
        pass
    flags = set(d.get("Flags", "").split())
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                       "avx_vnni", "amx_int8") if f in flags]
    with open("/proc/cpuinfo") as f:
        info = f.read()
    fam = re.search(r"^cpu family\s*:\s*(\d+)", info, re.M)
    mod = re.search(r"^model\s*:\s*(\d+)", info, re.M)
    return {"model_name": d.get("Model name", "?"), "family": fam and int(fam.group(1)),
            "model": mod and int(mod.group(1)), "cpus": os.cpu_count(), "isa": isa,
            "l3": d.get("L3 cache")}


def fmt_stat(s):
    t = f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"
    if s["all_noisy"]:
        t += " noisy"
    elif s["noisy_rounds"]:
        t += f" [{s['noisy_rounds']} noisy left out]"
    return t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--molly-bin", required=True)
    p.add_argument("--llama-bin", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pp", type=int, default=128)
    p.add_argument("--tg", type=int, default=64)
    p.add_argument("--serve-tokens", type=int, default=64)
    p.add_argument("--streams", default="4,8")
    p.add_argument("--min-share", type=float, default=0.85)
    p.add_argument("--max-tries", type=int, default=5)
    p.add_argument("--engine-models", default=",".join(ENGINE_MODELS))
    p.add_argument("--no-serve", action="store_true")
    p.add_argument("--hot-type", choices=["stored", "q8_0"], default="stored",
                   help="mollyd's [Adapters] HotType= (llama.cpp gets the same F16 files)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--save", metavar="FILE", help="also write the JSON there")
    p.add_argument("--no-priority", action="store_true")
    a = p.parse_args()
    # bench-vs-llama.sh starts this in a session of its own (setsid -w); when that parent goes
    # (^C on the terminal), this program is told, and unwinds
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    a.priority = "normal" if a.no_priority else raise_priority()
    # SIGTERM/SIGHUP unwind like ^C, so the finally blocks stop the servers
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: sys.exit(128 + n))
    with tempfile.TemporaryDirectory(prefix="bench-vs-llama.") as a.tmp:
        run(a)


def run(a):
    a.streams = [int(s) for s in a.streams.split(",") if s]
    models = [m for m in a.engine_models.split(",") if m]
    t_start = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = os.getloadavg()

    engine_rows, serve_rows = [], []
    for rnd in range(1, a.rounds + 1):
        for name in models:
            engine_rows.append(engine_case(a, rnd, name))
    if not a.no_serve:
        for rnd in range(1, a.rounds + 1):
            for with_adapters in (False, True):
                serve_rows += serve_case(a, rnd, with_adapters, a.tmp)

    cpu = cpu_description()
    llama_cpu = next((r["llama"].get("cpu_info") for r in engine_rows), None)
    result = {"started": started, "priority": a.priority,
              "seconds": round(time.monotonic() - t_start, 1),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpu": cpu,
              "llama_cpu_info": llama_cpu,
              "llama_build": (re.search(r"llama\.cpp-([0-9a-f]+)", a.llama_bin) or
                              re.search(r"(.*)", a.llama_bin)).group(1),
              "molly_simd": next((r["molly"].get("simd") for r in engine_rows), None),
              "threads": a.threads, "rounds": a.rounds, "min_share": a.min_share,
              "hot_type": a.hot_type,
              "max_tries": a.max_tries, "engine": [], "serve": [],
              "raw": {"engine": engine_rows, "serve": serve_rows}}
    for name in models:
        rows = [r for r in engine_rows if r["model"] == name]
        result["engine"].append({
            "model": name,
            "pp_ratio": summarize(rows, "pp", lambda r: r["pp_ratio"]),
            "tg_ratio": summarize(rows, "tg", lambda r: r["tg_ratio"]),
            "molly_pp": statistics.median(r["molly"]["pp"] for r in rows),
            "llama_pp": statistics.median(r["llama"]["pp"] for r in rows),
            "molly_tg": statistics.median(r["molly"]["tg"] for r in rows),
            "llama_tg": statistics.median(r["llama"]["tg"] for r in rows),
            "cpu_util": {f"{side}_{k}": statistics.median(r[side][k + "_cpu_util"] for r in rows)
                         for side in ("molly", "llama") for k in ("pp", "tg")}})
    for with_adapters in (0, N_ADAPTERS):
        for streams in a.streams:
            rows = [r for r in serve_rows
                    if r["streams"] == streams and r["adapters"] == with_adapters]
            if not rows:
                continue
            result["serve"].append({
                "streams": streams, "adapters": with_adapters,
                "ratio": summarize(rows, "tok/s", lambda r: r["ratio"]),
                "molly_tok_s": statistics.median(r["molly"]["tok_s"] for r in rows),
                "llama_tok_s": statistics.median(r["llama"]["tok_s"] for r in rows)})

    if a.save:
        with open(a.save, "w") as f:
            json.dump(result, f, indent=1)
    if a.json:
        print(json.dumps(result, indent=1))
        return
    print(f"CPU: {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}), "
          f"{cpu['cpus']} CPUs" + (f", L3 {cpu['l3']}" if cpu["l3"] else "") +
          f"; {' '.join(cpu['isa'])}")
    print(f"llama.cpp {result['llama_build']}: {llama_cpu}; Molly kernels: {result['molly_simd']}")
    print(f"{a.threads} threads, {a.rounds} rounds, started {started}, {result['seconds']:.0f} s; "
          f"load average {load_before[0]:.1f} before, {result['loadavg_after'][0]:.1f} after; "
          f"priority: {a.priority}")
    print("ratio = Molly / llama.cpp (> 1: Molly faster): median (min-max) over rounds; "
          "tok/s, cpu_util (CPU / (threads x wall) of the timed runs): medians")
    print()
    print(f"| model | pp{a.pp} ratio | tg{a.tg} ratio | Molly pp / tg tok/s | llama.cpp pp / tg tok/s "
          "| cpu_util pp / tg: Molly; llama.cpp |")
    print("| --- | --- | --- | --- | --- | --- |")
    for e in result["engine"]:
        u = e["cpu_util"]
        print(f"| {e['model']} | {fmt_stat(e['pp_ratio'])} | {fmt_stat(e['tg_ratio'])} | "
              f"{e['molly_pp']:.1f} / {e['molly_tg']:.1f} | {e['llama_pp']:.1f} / {e['llama_tg']:.1f} "
              f"| {u['molly_pp']:.2f} / {u['molly_tg']:.2f}; {u['llama_pp']:.2f} / {u['llama_tg']:.2f} |")
    if not result["serve"]:
        return
    print()
    print(f"| {SERVE_MODEL}, /v1/completions of {a.serve_tokens} tokens | mollyd / llama-server | "
          "mollyd tok/s | llama-server tok/s |")
    print("| --- | --- | --- | --- |")
    for s in result["serve"]:
        what = f"{s['streams']} streams, " + (f"{s['adapters']} adapters" if s["adapters"]
                                              else "no adapter")
        print(f"| {what} | {fmt_stat(s['ratio'])} | {s['molly_tok_s']:.1f} | {s['llama_tok_s']:.1f} |")

if __name__ == "__main__":
    main()
