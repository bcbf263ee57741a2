#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cascades and fallback with a real T1: a second mollyd on another loopback address
# (127.0.0.2) serving over HTTP, plus a fake T3 (lib/fake-openai.py) that records every byte.
#  1. Low T0 confidence → escalation: [Router] ConfidenceThreshold=0.99 forces it (the local
#     answer's exp(mean log-probability) is far below); the answer comes from T1, which
#     received exactly one request and reported its tokens' log-probabilities (so its answer
#     has a confidence as well; still below, and T3 is over the budget: the note says so);
#     the audit says T1, one escalation, and why.
#  2. A personal request may not leave T0 (PersonalTiers=T0): the local answer comes back with
#     its confidence and an uncertainty note (HTTP "molly" object), T1 gets nothing.
#  3. Budgets: a T3 whose cost is over [Router] Budget= is never called, not even by the
#     cascade when T1 is down; the note says the budget allowed no higher tier.
#  3b. The request's own budget ("molly": {"budget": X}): tighter than [Router] Budget= it
#     keeps T1 (cost 0.008 for 8 tokens) out; looser, it changes nothing (T3 still not
#     called); malformed, a 400 naming it.
#  4. T1 killed mid-request (stopped with SIGSTOP after it accepted the connection, then
#     SIGKILL) → the request falls back to T0 and is answered; the next one skips T1 (cooling
#     down) without an attempt.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

rt_mollyd lan 127.0.0.2
rt_fake api --reply "from T3"
ht_config "[Policy]
PublicTiers=T0,T1,T3
PersonalTiers=T0
AllowExternal=yes
[Router]
ConfidenceThreshold=0.99
Budget=0.5
HealthCheckSec=1
[Target lan]
Tier=T1
URL=$lan_URL
Model=stories260K
Quality.general=0.3
CostPerMTokOut=1000
Retries=0
TimeoutSec=20
[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT
CostPerMTokOut=1000000
Quality.general=0.2"
ht_start

# --- 1. escalation ---
before=$(rt_metric "$lan_URL" molly_requests_finished_total)
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}'
ht_expect_status 200 "cascade request"
ht_expect_json 'j["molly"]["target"]' lan "the answer came from T1"
# T1 (a mollyd) reports its tokens' log-probabilities: its answer has a confidence too, below
# 0.99 as well, and T3 (the next tier) costs more than the budget: the note says so.
t1conf=$(ht_json 'j["molly"]["confidence"]')
python3 -c 'import sys; c = float(sys.argv[1]); assert 0 < c < 0.99, c' "$t1conf" || ht_fail "T1 confidence $t1conf"
note=$(ht_json 'j["molly"]["uncertainty"]')
[[ "$note" == *"budget"* ]] || ht_fail "T1's note: $note"
[ -n "$(ht_json 'j["choices"][0]["text"]')" ] || ht_fail "empty answer"
after=$(rt_metric "$lan_URL" molly_requests_finished_total)
[ "$((after - before))" = 1 ] || ht_fail "T1 answered $((after - before)) requests, expected 1"
[ "$(rt_count api)" = 0 ] || ht_fail "T3 was called over the budget"
ht_ok "low T0 confidence escalated to T1 (a second mollyd on 127.0.0.2)"

# --- 2. no higher tier permitted: the note ---
ht_req POST /v1/completions '{"prompt": "Write to anna.verdi@example.com about the story", "max_tokens": 8, "temperature": 0}'
ht_expect_status 200 "personal request"
target=$(ht_json 'j["molly"]["target"]')
[[ "$target" == local:* ]] || ht_fail "a personal request went to $target"
note=$(ht_json 'j["molly"]["uncertainty"]')
[[ "$note" == *"below the threshold 0.99"* && "$note" == *"no higher tier"* ]] || ht_fail "note: $note"
conf=$(ht_json 'j["molly"]["confidence"]')
python3 -c 'import sys; c = float(sys.argv[1]); assert 0 < c < 0.99, c' "$conf" || ht_fail "confidence $conf"
[ "$(rt_metric "$lan_URL" molly_requests_finished_total)" = "$after" ] || ht_fail "T1 got a personal request"
ht_ok "personal request: T0's answer with confidence $conf and the note '$note'"

# --- 3b. the request's own budget ---
before=$(rt_metric "$lan_URL" molly_requests_finished_total)
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "molly": {"budget": 0.001}}'
ht_expect_status 200 "request with a budget tighter than the operator's"
target=$(ht_json 'j["molly"]["target"]')
[[ "$target" == local:* ]] || ht_fail "a request with budget 0.001 went to $target (T1 costs 0.008)"
note=$(ht_json 'j["molly"]["uncertainty"]')
[[ "$note" == *"budget"* ]] || ht_fail "note without the request's budget: $note"
[ "$(rt_metric "$lan_URL" molly_requests_finished_total)" = "$before" ] || ht_fail "T1 was called over the request's budget"
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "molly": {"budget": 1000}}'
ht_expect_status 200 "request with a budget looser than the operator's"
ht_expect_json 'j["molly"]["target"]' lan "a looser budget: T1 as before"
[ "$(rt_count api)" = 0 ] || ht_fail "a request's budget widened the operator's: T3 was called"
for bad in '{"budget": -1}' '{"budget": "cheap"}' '{"bugdet": 1}' '[]'; do
	ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4, "molly": '"$bad"'}'
	ht_expect_status 400 "molly: $bad"
	msg=$(ht_json 'j["error"]["message"]')
	[[ "$msg" == *molly* ]] || ht_fail "the error for molly: $bad does not name it: $msg"
done
ht_ok "the request's budget tightens [Router] Budget= (T1 kept out), never widens it; bad values get a 400"

# --- 3. T1 down: the cascade may not buy T3 over the budget ---
kill -STOP "$lan_PID"
kill -KILL "$lan_PID"
wait "$lan_PID" 2>/dev/null
# The health check (every second) finds T1 down before a request pays for it.
budget_noted() {
	ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}'
	ht_expect_status 200 "request with T1 down"
	note=$(ht_json 'j["molly"].get("uncertainty", "")')
	[[ "$note" == *"budget"* ]] || { sleep 0.2; return 1; }
}
wait_until "$MOLLY_TEST_WAIT_S" budget_noted || ht_fail "note without the budget: $note"
[ "$(rt_count api)" = 0 ] || ht_fail "T3 was called over the budget"
[ "$(rt_count_health api)" -ge 1 ] || ht_fail "no health check reached T3"
ht_ok "budget: T3 never called; T0's answer says why ($note)"
ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(head -3 "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
r = recs[0]
assert r["target"] == "lan" and r["tier"] == "T1" and r["escalations"] == 1, r
assert "escalated: local:stories260K confidence" in r["route"], r["route"]
assert recs[1]["tier"] == "T0" and recs[1]["escalations"] == 0 and recs[1]["class"] == "personal", recs[1]
PY
ht_ok "audit: escalation to T1 recorded with the reason"

# --- 4. T1 killed mid-request: fallback ---
rt_mollyd lan2 127.0.0.2
rm -rf "$HT_TMP/state"
ht_config "[Policy]
PublicTiers=T0,T1
[Target lan]
Tier=T1
URL=$lan2_URL
Quality.general=0.9
Retries=0
TimeoutSec=30"
ht_start
# Frozen, T1 still accepts connections (the kernel's backlog) but answers nothing.
kill -STOP "$lan2_PID"
curl -s -o "$HT_TMP/fb.json" -w '%{http_code}' --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/completions" \
	-H 'Content-Type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 4}' \
	>"$HT_TMP/fb.status" &
CURL_PID=$!
# Wait until mollyd's connection to T1 is established, then kill T1.
port=${lan2_URL##*:}
connected_to_t1() { ss -Htn state established "( dport = :$port )" 2>/dev/null | grep >/dev/null 127.0.0.2; }
wait_until "$MOLLY_TEST_WAIT_S" connected_to_t1 || ht_fail "mollyd never connected to T1"
kill -KILL "$lan2_PID"
wait "$CURL_PID" || ht_fail "curl failed"
[ "$(cat "$HT_TMP/fb.status")" = 200 ] || ht_fail "after T1 died: HTTP $(cat "$HT_TMP/fb.status"): $(cat "$HT_TMP/fb.json")"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["choices"][0]["text"] != "" and j["molly"]["target"].startswith("local:"), j' \
	"$HT_TMP/fb.json" || ht_fail "no local answer: $(cat "$HT_TMP/fb.json")"
ht_ok "T1 killed mid-request: answered by T0"
start=$(date +%s%N)
ht_req POST /v1/completions '{"prompt": "Once", "max_tokens": 2}'
ht_expect_status 200 "request while T1 cools down"
ht_expect_json 'j["molly"]["target"]' local:stories260K "T0 at once"
ht_ok "T1 cooling down is skipped ($((($(date +%s%N) - start) / 1000000)) ms)"
ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert recs[0]["tier"] == "T0" and recs[0]["fallbacks"] == 1, recs[0]
assert "fallback after lan (error)" in recs[0]["route"], recs[0]
assert recs[1]["tier"] == "T0" and recs[1]["fallbacks"] == 0, recs[1]
PY
ht_ok "audit: T0 after one fallback, with the reason"
