#!/bin/bash
# SPDX-License-Identifier: MIT
# Constrained decoding cost (issue #21): decode tok/s of 8 concurrent streams with a JSON schema
# against without, on Molly (mollyd over HTTP) and on llama.cpp (llama-server with json_schema),
# same model, prompt, seeds and token counts, runs alternated. Prints one JSON line per run and
# the median ratio (schema / plain) of each server.
#
#   tools/bench-structured.sh MODEL.gguf [ROUNDS]
#
# Environment: MOLLYD (default build/release/bin/mollyd), LLAMA_BIN (the folder of
# llama-server; default: ../shared/peers/llama-cpp.sh's), THREADS (default: online CPUs).
set -eu
set -o pipefail
MODEL=$1
ROUNDS=${2:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
MOLLYD=${MOLLYD:-$SRC/build/release/bin/mollyd}
THREADS=${THREADS:-$(nproc)}
LLAMA_BIN=${LLAMA_BIN:-$("$SRC/../shared/peers/llama-cpp.sh")}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() {
	for _ in $(seq 600); do
		curl -sf "$1" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "no answer from $1" >&2
	return 1
}

MPORT=$(free_port)
mkdir -p "$TMP/state/adapters" "$TMP/run"
cat >"$TMP/mollyd.conf" <<EOF
[Model]
Path=$MODEL
Threads=$THREADS
[Engine]
MaxSequences=8
ContextLength=2048
[HTTP]
Listen=127.0.0.1:$MPORT
[DBus]
Bus=none
[Adapters]
Directory=$TMP/state/adapters
[Paths]
StateDirectory=$TMP/state
RuntimeDirectory=$TMP/run
EOF
"$MOLLYD" --config "$TMP/mollyd.conf" >"$TMP/mollyd.log" 2>&1 &
PIDS+=($!)
LPORT=$(free_port)
"$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np 8 -c 4096 --port "$LPORT" \
	--host 127.0.0.1 --metrics >"$TMP/llama.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$MPORT/health"
wait_http "http://127.0.0.1:$LPORT/health"

python3 - "$MPORT" "$LPORT" "$ROUNDS" <<'PY'
import json, re, statistics, sys, threading, time, urllib.error, urllib.request

mport, lport, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
N, TOKENS, PROMPT = 8, 64, "Once upon a time"
# one long string: a random-weight model stays inside it until the budget makes it close
SCHEMA = {"type": "object", "properties": {"story": {"type": "string"}},
          "required": ["story"], "additionalProperties": False}

def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)

def molly(i, schema):
    body = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0.8, "seed": i, "ignore_eos": True}
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}
    j = post(f"http://127.0.0.1:{mport}/v1/completions", body)
    return j["usage"]["completion_tokens"]

def llama(i, schema):
    body = {"prompt": PROMPT, "n_predict": TOKENS, "temperature": 0.8, "seed": i, "ignore_eos": True,
            "cache_prompt": False}
    if schema:
        body["json_schema"] = SCHEMA
    j = post(f"http://127.0.0.1:{lport}/completion", body)
    return j["tokens_predicted"]

def llama_generated():
    """llama-server's own count of generated tokens: a request its chat-output parser refuses
    (HTTP 500 on a random model's text) generated its tokens all the same, so the answers'
    counts would undercount its plain runs (as tools/bench-vs-llama.py does)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{lport}/metrics", timeout=60) as r:
        text = r.read().decode()
    return int(float(re.search(r"^llamacpp:tokens_predicted_total\s+(\S+)", text, re.M).group(1)))

def run(fn, schema):
    counts, errors = [0] * N, [0]
    def one(i):
        try:
            counts[i] = fn(i, schema)
        except urllib.error.HTTPError:
            errors[0] += 1
    before = llama_generated() if fn is llama else 0
    ts = [threading.Thread(target=one, args=(i,)) for i in range(N)]
    t0 = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    wall = time.monotonic() - t0
    n = llama_generated() - before if fn is llama else sum(counts)
    if fn is molly and errors[0]:
        raise SystemExit(f"mollyd refused {errors[0]} requests")
    return n / wall, n

res = {"molly": {False: [], True: []}, "llama.cpp": {False: [], True: []}}
run(molly, False); run(llama, False)  # warm-up
for r in range(rounds):
    for name, fn in (("molly", molly), ("llama.cpp", llama)):
        for schema in (False, True):
            tps, n = run(fn, schema)
            res[name][schema].append(tps)
            print(json.dumps({"round": r, "server": name, "schema": schema, "tokens": n,
                              "tok_s": round(tps, 1)}), flush=True)
for name in res:
    plain, sch = statistics.median(res[name][False]), statistics.median(res[name][True])
    print(json.dumps({"server": name, "plain_tok_s": round(plain, 1), "schema_tok_s": round(sch, 1),
                      "ratio": round(sch / plain, 3)}))
PY
