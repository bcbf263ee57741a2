#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The optional policy judge ([Policy] Judge=, docs/policy.md) with the real tiny model, against
# fake OpenAI-compatible targets on 127.0.0.1 that record every byte they receive. The test
# cannot rely on the model's wisdom; it checks the plumbing with the test-only switches
# (MOLLY_TEST=1: MOLLY_TEST_JUDGE_SCORE stands for the classifier's score,
# MOLLY_TEST_JUDGE_ANSWER for the model's answer, MOLLY_TEST_JUDGE_HOLD=1 for an answer that
# never comes in time):
#  A. off by default: a request in the band is not judged;
#  B. Judge=yes, in the band, answer "yes": the request becomes personal (finding "judge"),
#     is allowed to T3 by the configuration and leaves redacted: the identifier is replaced,
#     the special-category statement stays, the answer comes back restored; the judge's
#     question reaches no target (T0 only); an already personal request is not judged;
#  C. a score outside the band is not judged;
#  D. no answer within JudgeTimeoutMs=: the classifier's decision stands, the request is
#     answered, the timeout is counted;
#  E. the real model's own answer: one question, one verdict, whatever it is.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

EMAIL=mario.rossi@example.com
STATEMENT="I was diagnosed with HIV last year"
QUESTION="Answer only yes or no"

rt_fake lan --reply "hello from the LAN"
rt_fake api --echo --split 3

# conf EXTRA-POLICY-KEYS
conf() {
	ht_config "[Policy]
PublicTiers=T0,T1
PersonalTiers=T0,T3
AllowExternal=yes
$1

[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
Quality.general=0.9
TimeoutSec=5

[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT
Quality.general=0.95
TimeoutSec=5"
}

# ask PROMPT: a completion; prints the target that answered, then the text
ask() {
	local body
	body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 4, "temperature": 0}))' "$1")
	ht_req POST /v1/completions "$body"
	ht_expect_status 200 "completion '$1'"
	ht_json '(j.get("molly") or {}).get("target")'
	ht_json 'j["choices"][0]["text"]'
}

judge_metric() {
	ht_metric "molly_policy_judge_${1}"
}

start() {
	MOLLY_TEST=1 MOLLY_TEST_JUDGE_SCORE=$1 MOLLY_TEST_JUDGE_ANSWER=${2:-} \
		MOLLY_TEST_JUDGE_HOLD=${3:-0} ht_start
}

# --- A: off by default ---
conf ""
start 0.5 yes
out=$(ask "Tell me a story about a dragon")
[ "$(head -1 <<<"$out")" = lan ] || ht_fail "A: a public request should go to T1: $out"
[ "$(judge_metric asked_total)" = 0 ] || ht_fail "A: the judge ran without Judge=yes"
ht_stop
ht_ok "off by default"

# --- B: in the band, "yes" ---
conf "Judge=yes"
start 0.5 yes
# public for every layer: the judge's "yes" (the test switch's) makes it personal, which this
# configuration allows to T3 (public would go to T1)
out=$(ask "Tell me a story about a dragon")
[ "$(head -1 <<<"$out")" = api ] || ht_fail "B: the judged request should be personal and go to T3: $out"
[ "$(judge_metric asked_total)" = 1 ] || ht_fail "B: asked $(judge_metric asked_total) times"
[ "$(judge_metric 'verdicts_total{verdict="personal"}')" = 1 ] || ht_fail "B: no personal verdict"
# personal already (an identifier, and the statement for the special-category layer): not
# judged; to T3 redacted — the identifier replaced, the special-category statement kept (it is
# the question) — and the answer restored
out=$(ask "$STATEMENT; write to me at $EMAIL")
[ "$(judge_metric asked_total)" = 1 ] || ht_fail "B: a personal request was judged"
[ "$(head -1 <<<"$out")" = api ] || ht_fail "B: the personal request should go to T3: $out"
[ "$(tail -n +2 <<<"$out")" = "ECHO:$STATEMENT; write to me at $EMAIL" ] ||
	ht_fail "B: the answer is not restored: $out"
grep -qF "$STATEMENT; write to me at " "$HT_TMP/api.log" || ht_fail "B: the statement should reach T3"
grep -qF "$EMAIL" "$HT_TMP/api.log" && ht_fail "B: the e-mail address reached T3"
grep -qF "mario.rossi" "$HT_TMP/api.log" && ht_fail "B: part of the e-mail address reached T3"
# a value that shows only once another is replaced (the document rule takes the next number
# after "DNI" when the first is a placeholder) is replaced too: the egress worker, which scans
# what it sends, lets the request through, and the answer comes back whole
out=$(ask "Datos del solicitante: DNI 10000425W, referencia ABC12345, gracias")
[ "$(head -1 <<<"$out")" = api ] || ht_fail "B: the document request should go to T3: $out"
[ "$(tail -n +2 <<<"$out")" = "ECHO:Datos del solicitante: DNI 10000425W, referencia ABC12345, gracias" ] ||
	ht_fail "B: the document request's answer is not restored: $out"
grep -qF "10000425" "$HT_TMP/api.log" && ht_fail "B: the DNI reached T3"
grep -qF "ABC12345" "$HT_TMP/api.log" && ht_fail "B: the number after the DNI reached T3"
ht_stop
for f in lan api; do
	grep -qF "$QUESTION" "$HT_TMP/$f.log" && ht_fail "B: the judge's question reached $f"
done
grep -q "policy judge: .* the local model says personal" "$HT_TMP/mollyd.log" ||
	ht_fail "B: the verdict is not logged"
grep -qF "$EMAIL" "$HT_TMP/mollyd.log" && ht_fail "B: the log holds the e-mail address"
grep -qF "diagnosed" "$HT_TMP/mollyd.log" && ht_fail "B: the log holds the prompt"
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "B: audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])][-3:]
judged, mail, doc = recs
assert judged["findings"] == {"judge": 1}, judged
assert judged["class"] == "personal" and judged["tier"] == "T3" and judged["redactions"] == 0, judged
assert mail["findings"].get("email") == 1 and "judge" not in mail["findings"], mail
assert mail["class"] == "personal" and mail["tier"] == "T3" and mail["redactions"] == 1, mail
assert doc["tier"] == "T3" and doc["redactions"] == 2, doc
PY
grep -aqF "$EMAIL" "$HT_TMP/state/audit/data.mdb" && ht_fail "B: the audit store holds the e-mail address"
ht_ok "in the band and 'yes': personal (finding judge), to T3; identifiers replaced, statement kept, restored; T0 only"

# --- C: outside the band ---
conf "Judge=yes
JudgeBand=0.3,0.7"
start 0.29 yes
out=$(ask "Tell me a story about a dragon")
[ "$(head -1 <<<"$out")" = lan ] || ht_fail "C: $out"
[ "$(judge_metric asked_total)" = 0 ] || ht_fail "C: a score outside the band was judged"
ht_stop
ht_ok "outside the band: not judged"

# --- D: the budget ---
conf "Judge=yes
JudgeTimeoutMs=200"
start 0.5 yes 1
out=$(ask "Tell me a story about a dragon")
[ "$(head -1 <<<"$out")" = lan ] || ht_fail "D: the classifier's decision (public) should stand: $out"
[ "$(judge_metric asked_total)" = 1 ] || ht_fail "D: not asked"
[ "$(judge_metric 'verdicts_total{verdict="timeout"}')" = 1 ] || ht_fail "D: no timeout counted"
ht_stop
ht_ok "no answer within the budget: the classifier's decision stands"

# --- E: the real model's answer ---
conf "Judge=yes"
start 0.5
out=$(ask "Tell me a story about a dragon")
[ "$(judge_metric asked_total)" = 1 ] || ht_fail "E: not asked"
sum=0
for v in personal public unclear timeout; do
	sum=$((sum + $(judge_metric "verdicts_total{verdict=\"$v\"}")))
done
[ "$sum" = 1 ] || ht_fail "E: $sum verdicts for one question"
ht_stop
for f in lan api; do
	grep -qF "$QUESTION" "$HT_TMP/$f.log" && ht_fail "E: the judge's question reached $f"
done
ht_ok "the tiny model's own answer: one question, one verdict, on T0"
