#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fallback across targets, against fake OpenAI-compatible targets on 127.0.0.1:
#  - T1 killed in the middle of a request (before its answer) → the request falls back to T0
#    and is answered; the audit record says T0 with one fallback;
#  - a target that always fails (HTTP 500) and is the only one permitted: the request ends
#    with a clear error after 1 + Retries= attempts, within a bound; the next request finds the
#    target cooling down and fails at once without reaching it (no retry loops).
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

# --- T1 killed mid-request ---
rt_fake lan --mode hang
ht_config "[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
Quality.general=0.9
Retries=0
TimeoutSec=30"
ht_start
curl -s -o "$HT_TMP/fb.json" -w '%{http_code}' --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/completions" \
	-H 'Content-Type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 4}' \
	>"$HT_TMP/fb.status" &
CURL_PID=$!
t1_received() { [ "$(rt_count lan)" -ge 1 ]; }
wait_until "$MOLLY_TEST_WAIT_S" t1_received || ht_fail "T1 never received the request"
[ "$(rt_count lan)" = 1 ] || ht_fail "T1 received $(rt_count lan) requests"
kill -KILL "$lan_PID"
wait "$CURL_PID" || ht_fail "curl failed"
[ "$(cat "$HT_TMP/fb.status")" = 200 ] || ht_fail "after T1 died: HTTP $(cat "$HT_TMP/fb.status"): $(cat "$HT_TMP/fb.json")"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["choices"][0]["text"] != "", j' \
	"$HT_TMP/fb.json" || ht_fail "no local answer: $(cat "$HT_TMP/fb.json")"
ht_ok "T1 killed mid-request: answered by T0"
# T1 is cooling down now: the next request goes straight to T0.
ht_req POST /v1/completions '{"prompt": "Once", "max_tokens": 2}'
ht_expect_status 200 "request while T1 cools down"
[ "$(rt_count lan)" = 1 ] || ht_fail "a cooling-down target was called"
ht_ok "a target cooling down is skipped"
ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2, recs
assert recs[0]["tier"] == "T0" and recs[0]["fallbacks"] == 1, recs[0]
assert recs[0]["target"].startswith("local:"), recs[0]
assert recs[1]["tier"] == "T0", recs[1]
PY
ht_ok "audit: T0 after one fallback"

# --- a target that always fails, and nothing else permitted ---
rt_fake bad --mode fail
rm -rf "$HT_TMP/state"
ht_config "[Policy]
PublicTiers=T2
[Router]
MaxFallbacks=3
[Target bad]
Tier=T2
UserControlled=yes
URL=http://127.0.0.1:$bad_PORT
Retries=2
TimeoutSec=5"
ht_start
start=$(date +%s%N)
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4}'
elapsed=$((($(date +%s%N) - start) / 1000000))
cp "$HT_TMP/body" "$HT_TMP/first.json"
first_status=$HT_STATUS
# At once (the first cool-down lasts 1 s): the target is cooling down, no attempt is made.
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4}'
second_status=$HT_STATUS
second_count=$(rt_count bad)
HT_STATUS=$first_status
cp "$HT_TMP/first.json" "$HT_TMP/body"
ht_expect_error 503 "" "always-failing target"
msg=$(ht_json 'j["error"]["message"]')
[[ "$msg" == *bad* && "$msg" == *"fake failure"* ]] || ht_fail "the error does not say what failed: $msg"
[ "$(rt_count bad)" = 3 ] || ht_fail "expected 1 + Retries=2 = 3 attempts, got $(rt_count bad)"
[ "$elapsed" -lt 10000 ] || ht_fail "took $elapsed ms"
ht_ok "always-failing target: clear error after 3 attempts in $elapsed ms ($msg)"
HT_STATUS=$second_status
ht_expect_status 503 "while cooling down"
[ "$second_count" = 3 ] || ht_fail "the cooling-down target was called again ($second_count requests)"
ht_ok "cool-down: no further attempts"
# A personal request: T2 is not in PersonalTiers (default T0,T1), so no attempt at all.
ht_req POST /v1/completions '{"prompt": "Write to anna.verdi@example.com", "max_tokens": 4}'
ht_expect_status 200 "personal request on T0"
[ "$(rt_count bad)" = 3 ] || ht_fail "a personal request reached T2"
ht_ok "personal request stays on T0"
ht_stop
