#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Routing across tiers, against fake OpenAI-compatible targets on 127.0.0.1
# (lib/fake-openai.py, recording every byte they receive):
#  - a public request goes to T1 when T1's prior is higher than T0's, and comes back;
#  - with AllowExternal=yes a personal request goes to T3 redacted: the T3 server receives
#    only placeholders (its log holds none of the planted values), and the answer (which echoes
#    the placeholders, split across SSE chunks) comes back restored;
#  - the audit records name the target, the tier and the redactions.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

EMAIL=mario.rossi@example.com
IBAN=IT60X0542811101000000123456
PHONE="+39 347 123 4567"

rt_fake lan --reply "hello from the LAN"
rt_fake api --echo --split 3
ht_config "[Policy]
PublicTiers=T0,T1
PersonalTiers=T0,T3
AllowExternal=yes

[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
Model=lan-model
Quality.general=0.9
TimeoutSec=5

[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT/v1
Model=api-model
Quality.general=0.95
CostPerMTokIn=1
CostPerMTokOut=2
TimeoutSec=5"
ht_start

# --- public → T1 (0.9 > T0's neutral 0.5; T3 is not permitted for public) ---
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8}'
ht_expect_status 200 "public completion"
ht_expect_json 'j["choices"][0]["text"]' "hello from the LAN" "public answer from T1"
[ "$(rt_count lan)" = 1 ] || ht_fail "T1 should have received 1 request, got $(rt_count lan)"
grep -q '"model": *"lan-model"' "$HT_TMP/lan.log" || ht_fail "T1 request without its Model="
grep -q '"stream": *true' "$HT_TMP/lan.log" || ht_fail "T1 request not streamed"
[ "$(rt_count api)" = 0 ] || ht_fail "a public request reached T3"
ht_ok "public request routed to T1 (higher prior)"

# --- streaming through the daemon from T1 ---
curl -sS -N --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/chat/completions" -H 'Content-Type: application/json' \
	-d '{"messages": [{"role": "user", "content": "Hi"}], "stream": true, "max_tokens": 8}' \
	>"$HT_TMP/stream" || ht_fail "streamed chat"
grep -q 'hello from the LAN' "$HT_TMP/stream" || ht_fail "stream: $(cat "$HT_TMP/stream")"
grep -q 'data: \[DONE\]' "$HT_TMP/stream" || ht_fail "stream without [DONE]"
ht_ok "streamed chat from T1"

# --- personal → T3, redacted; the answer restored ---
PROMPT="Write to $EMAIL about the IBAN $IBAN, or call $PHONE."
body=$(python3 -c 'import json, sys; print(json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": sys.argv[1]}], "max_tokens": 64}))' "$PROMPT")
ht_req POST /v1/chat/completions "$body"
ht_expect_status 200 "personal chat"
got=$(ht_json 'j["choices"][0]["message"]["content"]')
[ "$got" = "ECHO:Be brief.
$PROMPT" ] || ht_fail "the answer was not restored: '$got'"
[ "$(rt_count api)" = 1 ] || ht_fail "T3 should have received 1 request, got $(rt_count api)"
for v in "$EMAIL" "$IBAN" "$PHONE" "mario.rossi" "IT60X054"; do
	grep -qF -- "$v" "$HT_TMP/api.log" && ht_fail "T3 received the planted value '$v'"
done
grep -q 'EMAIL_1' "$HT_TMP/api.log" || ht_fail "T3 did not receive placeholders: $(cat "$HT_TMP/api.log")"
ht_ok "personal request reached T3 only as placeholders; answer restored (split chunks)"

# Completions (prompt) too.
body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 64}))' "$PROMPT")
ht_req POST /v1/completions "$body"
ht_expect_status 200 "personal completion"
got=$(ht_json 'j["choices"][0]["text"]')
[ "$got" = "ECHO:$PROMPT" ] || ht_fail "completion not restored: '$got'"
for v in "$EMAIL" "$IBAN" "$PHONE"; do
	grep -qF -- "$v" "$HT_TMP/api.log" && ht_fail "T3 received '$v' (completion)"
done
ht_ok "personal completion redacted and restored"

ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit records: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 4, len(recs)
assert [r["target"] for r in recs] == ["lan", "lan", "api", "api"], [r["target"] for r in recs]
assert [r["tier"] for r in recs] == ["T1", "T1", "T3", "T3"], [r["tier"] for r in recs]
assert recs[0]["redactions"] == 0
assert recs[2]["redactions"] >= 3 and recs[3]["redactions"] >= 3, recs[2]
assert all(r["fallbacks"] == 0 and r["finish"] == "stop" for r in recs), recs
PY
ht_ok "audit records name target, tier and redactions"
