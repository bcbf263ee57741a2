#!/bin/bash
# SPDX-License-Identifier: MIT
# The HTTP part of the load test: with QueueLength=64 and MaxSequences=8, 200 concurrent
# clients (a quarter of them streaming) hit /v1/completions at once. Every client must get an
# answer (200 with a complete body, or 429 in OpenAI's error shape), at least 72 (8 running +
# 64 queued) must complete, none may hang (each has a 120 s limit, the whole run 300 s),
# mollyd's RSS must stay under the ceiling below, and it must still serve and exit 0 after.
. "$(dirname "$0")/lib/http.sh"

CLIENTS=${CLIENTS:-200}
# The ceiling for the daemon's RSS during the run: 128 MiB for a release build, 384 MiB for a
# sanitizer build (ASan's shadow memory and quarantine); measured peaks with stories260K were
# about 45 MiB under ASan.
RSS_CEILING_MIB=128
if grep -q __asan_init "$HT_MOLLYD" 2>/dev/null; then
	RSS_CEILING_MIB=384
fi

ht_config "[Engine]
MaxSequences=8
QueueLength=64"
ht_start

# sample the RSS every 50 ms while the clients run
(
	peak=0
	while kill -0 "$HT_PID" 2>/dev/null && [ ! -e "$HT_TMP/load-done" ]; do
		rss=$(ht_rss_kib)
		[ "${rss:-0}" -gt "$peak" ] && peak=$rss && echo "$peak" >"$HT_TMP/rss-peak"
		sleep 0.05
	done
) &
sampler=$!

timeout 300 python3 - "$HT_PORT" "$CLIENTS" >"$HT_TMP/load.out" <<'EOF'
import http.client, json, sys, threading, time

port, n = int(sys.argv[1]), int(sys.argv[2])
results = [None] * n
start = threading.Barrier(n)

def client(i):
    stream = i % 4 == 0
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0.7,
                       "seed": i, "stream": stream})
    try:
        start.wait(60)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode("utf-8")
        if r.status == 200 and stream:
            ok = data.endswith("data: [DONE]\n\n") and \
                ('"finish_reason":"length"' in data or '"finish_reason":"stop"' in data)
            results[i] = ("ok" if ok else "bad-stream", r.status, data[-300:])
        elif r.status == 200:
            j = json.loads(data)
            ok = j["choices"][0]["finish_reason"] in ("length", "stop") and \
                j["usage"]["completion_tokens"] > 0
            results[i] = ("ok" if ok else "bad-body", r.status, data[-300:])
        elif r.status == 429:
            j = json.loads(data)
            ok = j["error"]["code"] and j["error"]["message"]
            results[i] = ("429" if ok else "bad-429", r.status, data[-300:])
        else:
            results[i] = ("status", r.status, data[-300:])
        c.close()
    except Exception as e:
        results[i] = ("exception", 0, repr(e))

t0 = time.time()
threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join(150)
hung = sum(t.is_alive() for t in threads)
kinds = {}
for r in results:
    k = r[0] if r else "hung"
    kinds[k] = kinds.get(k, 0) + 1
print(json.dumps({"seconds": round(time.time() - t0, 2), "hung": hung, "kinds": kinds}))
for r in results:
    if r and r[0] not in ("ok", "429"):
        print("unexpected:", r, file=sys.stderr)
        break
EOF
rc=$?
touch "$HT_TMP/load-done"
wait "$sampler"
[ $rc = 0 ] || ht_fail "the load client failed or timed out (status $rc): $(cat "$HT_TMP/load.out")"
summary=$(head -n 1 "$HT_TMP/load.out")
echo "load: $summary"
python3 - "$summary" "$CLIENTS" <<'EOF' || ht_fail "load results: $summary"
import json, sys
s, n = json.loads(sys.argv[1]), int(sys.argv[2])
k = s["kinds"]
assert s["hung"] == 0, "clients hung"
assert k.get("ok", 0) + k.get("429", 0) == n, "every client gets an answer or a 429"
assert k.get("ok", 0) >= 72, "at least 72 complete"
EOF
peak_kib=$(cat "$HT_TMP/rss-peak" 2>/dev/null || echo 0)
hwm_kib=$(ht_hwm_kib)
echo "load: RSS peak sampled $((peak_kib / 1024)) MiB, VmHWM $((hwm_kib / 1024)) MiB (ceiling $RSS_CEILING_MIB MiB)"
[ "$hwm_kib" -le $((RSS_CEILING_MIB * 1024)) ] ||
	ht_fail "mollyd's RSS reached $((hwm_kib / 1024)) MiB, over the $RSS_CEILING_MIB MiB ceiling"
ht_ok "$CLIENTS concurrent clients: every one answered (200 or 429), >= 72 complete, none hung"

# still serving, and the queue drained
ht_req POST /v1/completions '{"prompt": "After the storm", "max_tokens": 4}'
ht_expect_status 200 "a request after the load"
[ "$(ht_metric 'molly_queue_depth')" = 0 ] || ht_fail "queue not empty after the load"
[ "$(ht_metric 'vllm:num_requests_running')" = 0 ] || ht_fail "sequences still running after the load"
n429=$(ht_metric 'molly_http_requests_total{endpoint="/v1/completions",status="429"}')
echo "load: 429s counted in /metrics: ${n429:-0}"
ht_stop 60
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
ht_ok "serves after the load; SIGTERM exit 0"
