#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job on a default setup: build, start mollyd on a private D-Bus in a temporary
# folder with a default config, ask it one question over D-Bus and one over its
# OpenAI-compatible HTTP API, print both answers, and stop it.
#
# Model: $MOLLY_MODEL, else Molly's own model, models/molly-mini.gguf (docs/model.md), which
# mollyd serves when its configuration names none. The question: $MOLLY_QUESTION or a default.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh --runtime
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" >/dev/null
bin=$PWD/build/release/bin

# mollyd finds the default model beside its binaries (the build copies models/ there)
model=${MOLLY_MODEL:-$PWD/build/release/share/molly/models/molly-mini.gguf}
[ -r "$model" ] || { echo "run-main: no model at '$model'" >&2; exit 1; }
question=${MOLLY_QUESTION:-The command}

t=$(mktemp -d /tmp/molly-main.XXXXXX)
bus_pid= daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	[ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null
	rm -rf "$t"
}
trap cleanup EXIT

# A private session-style bus (nothing else can reach it) and a default configuration.
read -r bus_addr bus_pid < <(dbus-daemon --session --fork --nopidfile --print-address=1 \
	--print-pid=1 --address="unix:path=$t/bus.sock" | paste -sd' ')
# No [Model] Path=: mollyd takes $MOLLY_MODEL, else its default model.
cat >"$t/mollyd.conf" <<CONF
[DBus]
Bus=session

[HTTP]
Listen=unix:$t/http.sock

[Paths]
StateDirectory=$t/state
RuntimeDirectory=$t/run
CONF

DBUS_SESSION_BUS_ADDRESS=$bus_addr "$bin/mollyd" --config "$t/mollyd.conf" >"$t/mollyd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 300); do
	busctl --address="$bus_addr" status org.molly.Daemon1 >/dev/null 2>&1 && [ -S "$t/http.sock" ] && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$t/mollyd.log" >&2; exit 1; }
	sleep 0.1
done
echo "mollyd is up: model $(basename "$model"), D-Bus on a private bus, HTTP on $t/http.sock"
echo

echo "== D-Bus: org.molly.Inference1.Generate(prompt: \"$question\")"
busctl --address="$bus_addr" --json=short call org.molly.Daemon1 /org/molly/Daemon1 \
	org.molly.Inference1 Generate 'a{sv}' 3 prompt s "$question" max_tokens u 48 temperature d 0 |
	python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(sys.argv[1] + d[0]); print("   ", {k: v["data"] for k, v in d[1].items()})' "$question"
echo

echo "== HTTP: POST /v1/completions {\"prompt\": \"$question\"}"
curl -sS --unix-socket "$t/http.sock" http://localhost/v1/completions \
	-H 'Content-Type: application/json' \
	-d "$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 48, "temperature": 0}))' "$question")" |
	python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1] + r["choices"][0]["text"]); print("   ", r["usage"], r["choices"][0]["finish_reason"])' "$question"
echo

kill -TERM "$daemon_pid"
wait "$daemon_pid" && echo "mollyd stopped cleanly (exit 0)"
daemon_pid=
