# SPDX-License-Identifier: MIT
"""Molly against llama.cpp on the same machine, the same files and the same threads.

Run through tools/bench-vs-llama.sh, which builds the peer and makes the models; this file does
the measuring and the table. Every figure is a ratio, Molly / llama.cpp (> 1: Molly is faster),
taken per round with the two sides run back to back, the one that goes first alternating from
round to round; the figure is the median of the rounds' ratios, with their min and max.

CPU share. The other side of a 2-core VM is often someone else's build, and then a run's
tok/s are not the program's. Each timed run's CPU share is its CPU time over threads x wall:
molly-bench reports it for its timed runs (pp_cpu_util, tg_cpu_util); for llama-bench this
program reads the child's CPU time (the sum of /proc/PID/task/*/schedstat, nanoseconds) when
llama-bench --progress announces a timed run and again when that run's result line arrives,
and getrusage (wait4) of the whole child is kept beside it. For a server, the process's CPU
time over the timed load. A round in which a side got less than --min-util (0.85) is run again,
at most --max-tries times; after that it is kept, marked noisy, and left out of the median
unless every round was noisy.
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
    """CPU time of every thread of pid, in ns (schedstat), or from /proc/PID/stat ticks."""
    total, seen = 0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
                    seen = True
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return None
    if seen:
        return total
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_traced(cmd, env=None):
    """Runs cmd; returns (stdout lines, events, rusage util data). Each event is
    (stream, line, monotonic time, child CPU ns at that moment)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
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
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            bufs[key.data] += chunk
            *lines, bufs[key.data] = bufs[key.data].split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                events.append((key.data, line, now, cpu))
                (out_lines if key.data == "out" else err_tail).append(line)
                del err_tail[:-40]
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    if rc != 0:
        raise RuntimeError(f"{cmd[0]} exited with {rc}:\n" + "\n".join(err_tail))
    return out_lines, events, {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall}


# ---- one engine comparison ----

def molly_bench(a, model):
    out, _, ru = run_traced([f"{a.molly_bin}/molly-bench", "--model", model, "--threads",
                             str(a.threads), "--pp", str(a.pp), "--tg", str(a.tg), "--reps", "1",
                             "--json"])
    j = json.loads(out[-1])
    return {"pp": j["pp_tok_s"], "tg": j["tg_tok_s"], "pp_util": j["pp_cpu_util"],
            "tg_util": j["tg_cpu_util"],
            "whole_util": ru["cpu_s"] / (a.threads * ru["wall_s"]), "simd": j.get("simd")}


def llama_bench(a, model):
    out, events, ru = run_traced([f"{a.llama_bin}/llama-bench", "-m", model, "-t", str(a.threads),
                                  "-p", str(a.pp), "-n", str(a.tg), "-r", "1", "-o", "jsonl",
                                  "--progress"])
    res, util, start, info = {}, {}, None, {}
    for stream, line, t, cpu in events:
        m = re.search(r"benchmark \d+/\d+: (prompt|generation) run", line)
        if stream == "err" and m:
            start = ("pp" if m.group(1) == "prompt" else "tg", t, cpu)
            continue
        if start is not None and cpu is not None and start[2] is not None:
            util[start[0]] = (cpu - start[2]) / 1e9 / (a.threads * (t - start[1]))
            start = None
        if stream == "out" and line.startswith("{"):
            j = json.loads(line)
            info = j
            res["pp" if j["n_gen"] == 0 else "tg"] = j["avg_ts"]
    if "pp" not in res or "tg" not in res:
        raise RuntimeError("llama-bench printed no pp/tg result")
    return {"pp": res["pp"], "tg": res["tg"], "pp_util": util.get("pp", 0.0),
            "tg_util": util.get("tg", 0.0),
            "whole_util": ru["cpu_s"] / (a.threads * ru["wall_s"]),
            "cpu_info": info.get("cpu_info"), "build": info.get("build_commit")}


def engine_case(a, rnd, name):
    model = f"{a.models}/{name}.gguf"
    sides = [("molly", molly_bench), ("llama", llama_bench)]
    if rnd % 2 == 0:
        sides.reverse()
    tries = []
    for attempt in range(1, a.max_tries + 1):
        r = {s: fn(a, model) for s, fn in sides}
        low = min(r[s][k] for s in r for k in ("pp_util", "tg_util"))
        tries.append(low)
        if low >= a.min_util:
            break
    row = {"round": rnd, "model": name, "first": sides[0][0], "tries": attempt,
           "noisy": low < a.min_util, "molly": r["molly"], "llama": r["llama"],
           "pp_ratio": r["molly"]["pp"] / r["llama"]["pp"],
           "tg_ratio": r["molly"]["tg"] / r["llama"]["tg"], "min_util_per_try": tries}
    log(f"round {rnd} {name}: pp {r['molly']['pp']:.1f}/{r['llama']['pp']:.1f} = "
        f"{row['pp_ratio']:.2f}, tg {r['molly']['tg']:.1f}/{r['llama']['tg']:.1f} = "
        f"{row['tg_ratio']:.2f}, lowest cpu share {low:.2f}, tries {attempt}"
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
        self.kind, self.port = kind, free_port()
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
                    f"[HTTP]\nListen=127.0.0.1:{self.port}\n[DBus]\nBus=none\n"
                    f"[Paths]\nStateDirectory={d}/state\nRuntimeDirectory={d}/run\n")
            with open(f"{d}/mollyd.conf", "w") as f:
                f.write(conf)
            cmd = [f"{a.molly_bin}/mollyd", "--config", f"{d}/mollyd.conf"]
        else:
            cmd = [f"{a.llama_bin}/llama-server", "-m", model, "-t", str(a.threads), "-tb",
                   str(a.threads), "-c", "4096", "-np", "8", "--host", "127.0.0.1", "--port",
                   str(self.port), "--no-webui"]
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
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def prompt_for(rng):
    return "Request " + " ".join(rng.choice(WORDS) for _ in range(12))


def load(a, srv, streams, rng):
    """streams concurrent completions of a.serve_tokens tokens; each prompt differs, so no
    server can reuse a cached prefix. Returns aggregate generated tok/s and the CPU share."""
    bodies = [json.dumps(srv.body(prompt_for(rng), i, a.serve_tokens)) for i in range(streams)]
    done, errors = [None] * streams, []
    barrier = threading.Barrier(streams + 1)

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
        c.connect()
        barrier.wait()
        try:
            c.request("POST", "/v1/completions", bodies[i], {"Content-Type": "application/json"})
            resp = c.getresponse()
            j = json.loads(resp.read())
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {j}")
            done[i] = (time.monotonic(), j["usage"]["completion_tokens"])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{srv.kind} stream {i}: {e}")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in ts:
        t.start()
    barrier.wait()
    t0, c0 = time.monotonic(), child_cpu_ns(srv.proc.pid)
    for t in ts:
        t.join()
    c1 = child_cpu_ns(srv.proc.pid)
    if errors:
        raise RuntimeError("; ".join(errors))
    wall = max(d[0] for d in done) - t0
    tokens = sum(d[1] for d in done)
    if tokens != streams * a.serve_tokens:
        raise RuntimeError(f"{srv.kind}: {tokens} tokens generated, not {streams * a.serve_tokens}")
    return tokens / wall, (c1 - c0) / 1e9 / (a.threads * wall)


def serve_case(a, rnd, with_adapters, tmp):
    order = ["molly", "llama"] if rnd % 2 else ["llama", "molly"]
    rng = random.Random(rnd * 100 + with_adapters)
    res = {}
    for kind in order:
        srv = Server(a, kind, with_adapters, tmp)
        try:
            load(a, srv, N_ADAPTERS, rng)  # warm-up: every adapter once, pages faulted in
            for streams in a.streams:
                for attempt in range(1, a.max_tries + 1):
                    tok_s, util = load(a, srv, streams, rng)
                    if util >= a.min_util:
                        break
                res[(kind, streams)] = {"tok_s": tok_s, "util": util, "tries": attempt}
        finally:
            srv.stop()
    rows = []
    for streams in a.streams:
        m, l = res[("molly", streams)], res[("llama", streams)]
        row = {"round": rnd, "streams": streams, "adapters": N_ADAPTERS if with_adapters else 0,
               "first": order[0], "molly": m, "llama": l, "ratio": m["tok_s"] / l["tok_s"],
               "noisy": min(m["util"], l["util"]) < a.min_util}
        log(f"round {rnd} serve {streams} streams, {row['adapters']} adapters: "
            f"{m['tok_s']:.1f}/{l['tok_s']:.1f} = {row['ratio']:.2f} (cpu share "
            f"{m['util']:.2f}/{l['util']:.2f})" + (" (noisy)" if row["noisy"] else ""))
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
            "l3": d.get("L3 cache", "?")}


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
    p.add_argument("--min-util", type=float, default=0.85)
    p.add_argument("--max-tries", type=int, default=5)
    p.add_argument("--engine-models", default=",".join(ENGINE_MODELS))
    p.add_argument("--no-serve", action="store_true")
    p.add_argument("--json", action="store_true")
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
    result = {"started": started, "priority": a.priority, "seconds": round(time.monotonic() - t_start, 1),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpu": cpu,
              "llama_cpu_info": llama_cpu,
              "llama_build": next((r["llama"].get("build") for r in engine_rows), None),
              "molly_simd": next((r["molly"].get("simd") for r in engine_rows), None),
              "threads": a.threads, "rounds": a.rounds, "min_util": a.min_util,
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
            "llama_tg": statistics.median(r["llama"]["tg"] for r in rows)})
    for with_adapters in (0, N_ADAPTERS):
        for streams in a.streams:
            rows = [r for r in serve_rows if r["streams"] == streams and r["adapters"] == with_adapters]
            if not rows:
                continue
            result["serve"].append({
                "streams": streams, "adapters": with_adapters,
                "ratio": summarize(rows, "tok/s", lambda r: r["ratio"]),
                "molly_tok_s": statistics.median(r["molly"]["tok_s"] for r in rows),
                "llama_tok_s": statistics.median(r["llama"]["tok_s"] for r in rows)})

    if a.json:
        print(json.dumps(result, indent=1))
        return
    print(f"CPU: {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}), "
          f"{cpu['cpus']} CPUs, L3 {cpu['l3']}; {' '.join(cpu['isa'])}")
    print(f"llama.cpp {result['llama_build']}: {llama_cpu}; Molly kernels: {result['molly_simd']}")
    print(f"{a.threads} threads, {a.rounds} rounds, started {started}, {result['seconds']:.0f} s; "
          f"load average {load_before[0]:.1f} before, {result['loadavg_after'][0]:.1f} after; "
          f"priority: {a.priority}")
    print("ratio = Molly / llama.cpp (> 1: Molly faster): median (min-max) over rounds; "
          "tok/s: medians")
    print()
    print(f"| case | pp{a.pp} ratio | tg{a.tg} ratio | Molly pp / tg tok/s | llama.cpp pp / tg tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for e in result["engine"]:
        print(f"| {e['model']} | {fmt_stat(e['pp_ratio'])} | {fmt_stat(e['tg_ratio'])} | "
              f"{e['molly_pp']:.1f} / {e['molly_tg']:.1f} | {e['llama_pp']:.1f} / {e['llama_tg']:.1f} |")
    for s in result["serve"]:
        what = (f"serve {SERVE_MODEL}, {s['streams']} streams, "
                + (f"{s['adapters']} adapters" if s["adapters"] else "no adapter"))
        print(f"| {what} | | {fmt_stat(s['ratio'])} | {s['molly_tok_s']:.1f} | {s['llama_tok_s']:.1f} |")


if __name__ == "__main__":
    main()
