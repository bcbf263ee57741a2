#!/bin/bash
# SPDX-License-Identifier: MIT
# Clients that go away, and a daemon that stops, during generation:
#  - a stream client that hangs up after its first chunk, and clients that hang up while
#    their request is queued (streamed or not), have their requests cancelled (counted in
#    molly_http_client_disconnects_total; the queue drains at once);
#  - SIGTERM during streaming: every stream ends with "data: [DONE]" after either its finish
#    chunk or an error event (those cut short by StopTimeoutSec=), new requests are refused,
#    and mollyd exits 0.
# "Still streaming" and "still queued" are made certain, not likely, on any machine: those
# daemons run with the test-only MOLLY_TEST_HOLD_AFTER_TOKENS (the scheduler computes nothing
# after that many tokens; cancellations still run).
. "$(dirname "$0")/lib/http.sh"

ht_config "[Engine]
MaxSequences=1
QueueLength=64"
MOLLY_TEST=1 MOLLY_TEST_HOLD_AFTER_TOKENS=4 ht_start
grep -q "TEST ONLY: the scheduler holds after 4" "$HT_TMP/mollyd.log" ||
	ht_fail "the test hold is not announced in the log"

disconnects() { ht_metric molly_http_client_disconnects_total; }
disconnects_at_least() { [ "$(disconnects)" -ge "$1" ] 2>/dev/null; }
queue_empty() {
	[ "$(ht_metric molly_queue_depth)" = 0 ] && [ "$(ht_metric 'vllm:num_requests_running{')" = 0 ]
}

# ---- a stream client hangs up after the first chunk ----
python3 - "$HT_PORT" <<'EOF' || ht_fail "stream hang-up client"
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
body = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": True})
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
got = b""
while b"data: {" not in got:
    d = s.recv(4096)
    assert d, "closed before the first chunk"
    got += d
s.close()
EOF
wait_until "$MOLLY_TEST_WAIT_S" disconnects_at_least 1 ||
	ht_fail "the hung-up stream was not cancelled"
wait_until "$MOLLY_TEST_WAIT_S" queue_empty || ht_fail "the hung-up stream still runs"
n=$(disconnects)
ht_ok "a stream client that hangs up cancels its request"

# ---- clients hang up while queued (one sequence, the scheduler held) ----
python3 - "$HT_PORT" >"$HT_TMP/queued.out" <<'EOF' || ht_fail "queued hang-up clients"
import http.client, json, socket, sys, threading, time
port = int(sys.argv[1])
holders = []
for i in range(12):  # the scheduler is held: one of them runs without progress, 11 wait
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": True})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    holders.append(s)
# a non-streamed request that gives up while queued (held: it cannot be answered)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=0.4)
try:
    c.request("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 5}),
              {"Content-Type": "application/json"})
    c.getresponse().read()
    print("answered")  # cannot happen while the scheduler is held
except (socket.timeout, TimeoutError):
    print("timed out")
c.close()
for s in holders:  # the holders hang up too: running and queued streams
    s.close()
EOF
[ "$(cat "$HT_TMP/queued.out")" = "timed out" ] ||
	ht_fail "a request was answered while the scheduler was held: $(cat "$HT_TMP/queued.out")"
# all 13 hung up without an answer: each is cancelled, none is left waiting or running
wait_until "$MOLLY_TEST_WAIT_S" disconnects_at_least $((n + 13)) ||
	ht_fail "hang-ups of queued clients were not all cancelled ($n -> $(disconnects) of 13)"
wait_until "$MOLLY_TEST_WAIT_S" queue_empty ||
	ht_fail "the queue did not drain after its clients hung up (waiting $(ht_metric molly_queue_depth), running $(ht_metric 'vllm:num_requests_running{'))"
ht_ok "clients that hang up while queued are cancelled ($(($(disconnects) - n)) cancellations; the queue drained)"
ht_stop
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd (held) exited with $HT_EXIT"

# ---- a stream client that never reads stalls nobody ----
ht_config "[Engine]
MaxSequences=1
QueueLength=64"
ht_start
python3 - "$HT_PORT" <<'EOF' || ht_fail "a client that never reads stalled the others"
import http.client, json, socket, sys, time
port = int(sys.argv[1])
lazy = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": True,
                       "logprobs": 5})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    lazy.append(s)  # never read
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
c.request("POST", "/v1/completions", json.dumps({"prompt": "Hello", "max_tokens": 8}),
          {"Content-Type": "application/json"})
r = c.getresponse()
assert r.status == 200, r.status
r.read()
for s in lazy:
    s.close()
EOF
ht_ok "stream clients that never read do not stall other requests"
ht_stop
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"

# ---- SIGTERM during streaming ----
ht_config "[Engine]
MaxSequences=2
QueueLength=64

[Daemon]
StopTimeoutSec=100ms"
# held after the first token: the stream (or two) running has begun and cannot finish; the
# others wait
MOLLY_TEST=1 MOLLY_TEST_HOLD_AFTER_TOKENS=1 ht_start
python3 - "$HT_PORT" "$HT_TMP/streams" <<'EOF' &
import http.client, json, sys, threading
port, out = int(sys.argv[1]), sys.argv[2]
results = [None] * 6
def client(i):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/chat/completions" if i % 2 else "/v1/completions", json.dumps(
            {"prompt": "Once", "messages": [{"role": "user", "content": "Hi"}],
             "max_tokens": 400, "ignore_eos": True, "stream": True}),
            {"Content-Type": "application/json"})
        r = c.getresponse()
        results[i] = [r.status, r.read().decode()]
    except Exception as e:
        results[i] = [0, repr(e)]
ts = [threading.Thread(target=client, args=(i,)) for i in range(6)]
for t in ts:
    t.start()
for t in ts:
    t.join()
json.dump(results, open(out, "w"))
EOF
clients=$!
# wait until a stream is flowing and all six requests are in (running or waiting), then stop
streams_flowing() {
	local waiting running
	[ "$(ht_metric molly_http_time_to_first_token_seconds_count)" -ge 1 ] 2>/dev/null || return 1
	waiting=$(ht_metric molly_queue_depth)
	running=$(ht_metric 'vllm:num_requests_running{')
	[ $((waiting + running)) = 6 ] 2>/dev/null
}
wait_until "$MOLLY_TEST_WAIT_S" streams_flowing || ht_fail "the streams did not start"
kill -TERM "$HT_PID"
# the daemon logs "stopping" once its fronts refuse new requests
stopping() { grep -q "SIGTERM: stopping" "$HT_TMP/mollyd.log"; }
wait_until "$MOLLY_TEST_WAIT_S" stopping || ht_fail "mollyd did not log its stop"
late=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$HT_URL/v1/completions" \
	-d '{"prompt": "late", "max_tokens": 2}') || true
[ "$late" != 200 ] || ht_fail "a request after SIGTERM was served"
wait "$clients" || ht_fail "stream clients failed"
ht_stop
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT after SIGTERM during streaming"
python3 - "$HT_TMP/streams" <<'EOF' || ht_fail "streams at SIGTERM: $(head -c 3000 "$HT_TMP/streams")"
import json, sys
results = json.load(open(sys.argv[1]))
errors = 0
for status, raw in results:
    assert status == 200, (status, raw[:300])
    assert raw.endswith("data: [DONE]\n\n"), raw[-300:]
    events = [e[6:] for e in raw.split("\n\n") if e.startswith("data: {")]
    last = json.loads(events[-1])
    if "error" in last:
        assert last["error"]["message"] and last["error"]["type"], last
        errors += 1
    else:
        assert last["choices"][0]["finish_reason"] == "length", last
# held: none can finish, so every one ends with an error event (queued ones included)
assert errors == len(results), "%d of %d streams were not cut short" % (len(results) - errors, len(results))
print("streams: %d finished, %d ended with an error event" % (len(results) - errors, errors))
EOF
ht_ok "SIGTERM during streaming: final error events, [DONE], new requests refused (HTTP ${late:-000}), exit 0"
