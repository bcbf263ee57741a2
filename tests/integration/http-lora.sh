#!/bin/bash
# SPDX-License-Identifier: MIT
# LoRA adapters over HTTP: vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter (admin),
# the adapter in /v1/models (parent = the base), requests naming it as "adapter",
# "base:adapter" or "lora": [...], its per-adapter metrics and vllm:lora_requests_info.
. "$(dirname "$0")/lib/http.sh"

ADAPTER=$HT_SHARED/models/stories260K-lora-attn-r8.gguf
[ -f "$ADAPTER" ] || ht_skip "the test adapter is missing ($ADAPTER)"
KEY=molly-$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))')
HASH=$(python3 -c 'import hashlib, sys; print("sha256:" + hashlib.sha256(sys.argv[1].encode()).hexdigest())' "$KEY")
AUTH=(-H "Authorization: Bearer $KEY")

ht_config "[Member admin]
KeyHash=$HASH
Models=*
Admin=yes"
MOLLY_TEST=1 ht_start # test mode: SIGUSR1/SIGUSR2 hold the scheduler (metrics section)

# ---- load ----
ht_req POST /v1/load_lora_adapter "{\"lora_name\": \"attn\", \"lora_path\": \"$ADAPTER\"}" "${AUTH[@]}"
ht_expect_status 200 "load_lora_adapter"
grep -q "attn" "$HT_TMP/body" || ht_fail "load_lora_adapter: unexpected body"
ht_req POST /v1/load_lora_adapter "{\"lora_name\": \"attn\", \"lora_path\": \"$ADAPTER\"}" "${AUTH[@]}"
ht_expect_error 400 "" "loading the same name twice"
ht_req POST /v1/load_lora_adapter "{\"lora_name\": \"notlora\", \"lora_path\": \"$HT_MODEL\"}" "${AUTH[@]}"
ht_expect_error 400 "" "loading a file that is not an adapter"
ht_req POST /v1/load_lora_adapter '{"lora_name": "attn2"}' "${AUTH[@]}"
ht_expect_error 400 "" "load without lora_path"
ht_expect_json 'j["error"]["param"]' lora_path
ht_req GET /v1/models - "${AUTH[@]}"
ht_expect_status 200 "models after load"
ht_expect_json '[(m["id"], m["parent"]) for m in j["data"]]' "[[\"$HT_NAME\", null], [\"attn\", \"$HT_NAME\"]]" "the adapter is listed with its parent"
ht_ok "load_lora_adapter, errors, /v1/models lists the adapter"

# ---- requests with the adapter ----
G='"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0'
text_of() {
	ht_req POST /v1/completions "{$1, $G}" "${AUTH[@]}"
	ht_expect_status 200 "completion with $1"
	ht_json 'j["choices"][0]["text"]'
}
base=$(text_of '"model": "'$HT_NAME'"')
by_name=$(text_of '"model": "attn"')
ht_expect_json 'j["model"]' attn "the response names the model as asked"
by_pair=$(text_of '"model": "'$HT_NAME':attn"')
by_list=$(text_of '"lora": [{"name": "attn", "scale": 1.0}]')
[ "$by_name" != "$base" ] || ht_fail "the adapter does not change the greedy text"
[ "$by_pair" = "$by_name" ] || ht_fail "base:adapter differs from adapter: '$by_pair' vs '$by_name'"
[ "$by_list" = "$by_name" ] || ht_fail "lora list differs from adapter: '$by_list' vs '$by_name'"
ht_req POST /v1/chat/completions '{"model": "attn", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}' "${AUTH[@]}"
ht_expect_status 200 "chat with the adapter"
ht_ok "adapter by name, base:adapter and lora list give the same text, unlike the base"

# ---- versions (issue 16): NAME@N and NAME@sha256:PREFIX in model and lora ----
# attn's one version is the registry's one blob, named by its hash
blob=$(ls "$HT_TMP"/state/registry/blobs/sha256/*/*) || ht_fail "no blob in the registry"
BLOB_HASH=$(basename "$blob")
by_hash=$(text_of '"lora": [{"name": "attn@sha256:'${BLOB_HASH:0:12}'", "scale": 1.0}]')
[ "$by_hash" = "$by_name" ] || ht_fail "lora attn@sha256:PREFIX differs from attn: '$by_hash' vs '$by_name'"
by_version=$(text_of '"model": "attn@1"')
[ "$by_version" = "$by_name" ] || ht_fail "attn@1 differs from attn: '$by_version' vs '$by_name'"
by_pair_version=$(text_of '"model": "'$HT_NAME':attn@1"')
[ "$by_pair_version" = "$by_name" ] || ht_fail "base:attn@1 differs from attn"
ht_req POST /v1/completions '{"model": "attn@7", "prompt": "x", "max_tokens": 2}' "${AUTH[@]}"
ht_expect_error 404 model_not_found "a version that does not exist"
ht_req POST /v1/completions '{"model": "attn@sha256:12", "prompt": "x", "max_tokens": 2}' "${AUTH[@]}"
ht_expect_error 400 "" "a hash prefix shorter than 8 digits"
ht_ok "NAME@N (model, base:NAME@N), NAME@sha256:PREFIX (lora), unknown versions, short prefixes"

# ---- metrics: per-adapter counts, and vllm:lora_requests_info while one runs ----
curl -s "$HT_URL/metrics" >"$HT_TMP/metrics"
grep -q '^molly_adapter_requests_total{adapter="attn"} [1-9]' "$HT_TMP/metrics" ||
	ht_fail "no per-adapter request count in /metrics"
# Running for certain while /metrics is read: the scheduler holds after one more token
# (SIGUSR2, test mode) until the client has seen the metric and sends SIGUSR1.
n_holds=$(grep -c "SIGUSR2: the scheduler holds" "$HT_TMP/mollyd.log")
kill -USR2 "$HT_PID"
hold_set() { [ "$(grep -c "SIGUSR2: the scheduler holds" "$HT_TMP/mollyd.log")" -gt "$n_holds" ]; }
wait_until "$MOLLY_TEST_WAIT_S" hold_set || ht_fail "SIGUSR2 was not acted on"
python3 - "$HT_PORT" "$KEY" "$HT_TMP/seen" "$HT_PID" <<'EOF' || ht_fail "vllm:lora_requests_info never named the running adapter"
import http.client, json, os, signal, sys, threading, time
port, key, out, daemon = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
H = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
def long_stream():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps({"model": "attn", "prompt": "Once",
              "max_tokens": 400, "ignore_eos": True, "stream": True}), H)
    c.getresponse().read()
ts = [threading.Thread(target=long_stream) for _ in range(3)]
for t in ts:
    t.start()
seen = None
deadline = time.time() + float(os.environ.get("MOLLY_TEST_WAIT_S", "120"))
while time.time() < deadline and any(t.is_alive() for t in ts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith("vllm:lora_requests_info{") and 'running_lora_adapters="attn"' in line:
            seen = line
    if seen:
        break
    time.sleep(0.01)
os.kill(daemon, signal.SIGUSR1)  # lift the hold: the streams finish
for t in ts:
    t.join()
open(out, "w").write(seen or "")
sys.exit(0 if seen else 1)
EOF
ht_ok "metrics: molly_adapter_requests_total, vllm:lora_requests_info ($(cat "$HT_TMP/seen"))"

# ---- unload ----
ht_req POST /v1/unload_lora_adapter '{"lora_name": "attn"}' "${AUTH[@]}"
ht_expect_status 200 "unload_lora_adapter"
ht_req POST /v1/completions '{"model": "attn", "prompt": "x", "max_tokens": 2}' "${AUTH[@]}"
ht_expect_error 404 model_not_found "the unloaded adapter"
ht_req POST /v1/unload_lora_adapter '{"lora_name": "attn"}' "${AUTH[@]}"
ht_expect_error 404 "" "unloading an adapter that is not loaded"
ht_req GET /v1/models - "${AUTH[@]}"
ht_expect_json 'len(j["data"])' 1 "only the base after unload"
ht_ok "unload_lora_adapter"

ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
