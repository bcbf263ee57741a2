#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Egress enforcement, the negative controls (issue #8), with real eBPF cgroup filters and the
# test-only switches (honoured only with MOLLY_EGRESS_TEST=1; see docs/config.md):
#  - the core cannot connect anywhere: at start it tries 127.0.0.1:P of a live fake server
#    (MOLLY_EGRESS_TEST_CORE_CONNECT) and gets EPERM; the fake receives nothing; a denial
#    record (tier T0, the core) is in the audit;
#  - the t3 worker made to try the T1 endpoint (MOLLY_EGRESS_TEST_WRONG_TARGET_T3, i.e.
#    molly-egress --test-wrong-target) is blocked by the kernel (EPERM → error "blocked"), the
#    T1 fake receives nothing, the request falls back to T0, and a T3 denial is audited;
#  - a personal payload forced toward the t3 worker (the core's detectors switched off with
#    MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS, so the router sees "public" and sends it to T3
#    unredacted) is refused by the worker's own check and never reaches the T3 fake.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
source "$(dirname "$0")/lib/egress.sh"
eg_require_root
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

rt_fake lan --reply "from T1"
rt_fake api --reply "from T3"
CONF="[Policy]
PublicTiers=T0,T3
PersonalTiers=T0,T3
AllowExternal=yes

[Router]
MaxFallbacks=2

[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
TimeoutSec=5
Retries=0

[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT
Quality.general=0.95
TimeoutSec=5
Retries=0"

# --- run 1: the core's connect, and the t3 worker aimed at the T1 endpoint ---
ht_config "$CONF"
export MOLLY_EGRESS_TEST=1
export MOLLY_EGRESS_TEST_CORE_CONNECT=127.0.0.1:$lan_PORT
export MOLLY_EGRESS_TEST_WRONG_TARGET_T3=http://127.0.0.1:$lan_PORT
ht_start
unset MOLLY_EGRESS_TEST_CORE_CONNECT MOLLY_EGRESS_TEST_WRONG_TARGET_T3
eg_require_enforced

grep -q "TEST: core connect to 127.0.0.1:$lan_PORT: Operation not permitted" "$HT_TMP/mollyd.log" ||
	ht_fail "the core's connect was not refused with EPERM: $(grep 'TEST: core' "$HT_TMP/mollyd.log")"
[ "$(rt_count lan)" = 0 ] || ht_fail "the core reached the T1 fake"
ht_ok "the core cannot connect (EPERM), the target received nothing"

ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8}'
ht_expect_status 200 "a request whose T3 attempt is blocked falls back to T0"
[ "$(rt_count lan)" = 0 ] || ht_fail "the t3 worker reached the T1 endpoint ($(rt_count lan) requests)"
[ "$(rt_count api)" = 0 ] || ht_fail "the T3 fake was reached although the worker was aimed elsewhere"
grep -q "blocked by the egress filter (EPERM)" "$HT_TMP/mollyd.log" ||
	grep -q "denied a TCP connection to 127.0.0.1:$lan_PORT" "$HT_TMP/mollyd.log" ||
	ht_fail "no trace of the blocked connection in the log"
ht_ok "the t3 worker trying the T1 endpoint was blocked; T0 answered"
ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" "$lan_PORT" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
port = sys.argv[2]
den = [r for r in recs if r.get("error") == "egress_denied"]
core = [r for r in den if r["tier"] == "T0" and r["target"].startswith("127.0.0.1:" + port + " tcp")]
t3 = [r for r in den if r["tier"] == "T3" and r["target"].startswith("127.0.0.1:" + port + " tcp")]
assert core, ("no denial for the core", den)
assert t3, ("no denial for the t3 worker", den)
assert all(r["front"] == "egress" and r["egress_enforced"] for r in den), den
req = [r for r in recs if r["front"] == "http"]
assert len(req) == 1 and req[0]["tier"] == "T0" and req[0]["fallbacks"] >= 1, req
assert req[0]["egress_enforced"] is True, req
PY
ht_ok "denials audited for the core (T0) and the t3 worker; the request fell back to T0"

# --- run 2: a personal payload forced toward T3 ---
: >"$HT_TMP/api.log"
export MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS=1
ht_start
unset MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS
eg_require_enforced
EMAIL=mario.rossi@example.com
body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 8}))' "Mail $EMAIL the report")
ht_req POST /v1/completions "$body"
ht_expect_status 200 "the refused T3 attempt falls back to T0"
[ "$(rt_count api)" = 0 ] || ht_fail "the T3 fake received the request"
grep -qF -- "$EMAIL" "$HT_TMP/api.log" && ht_fail "the e-mail address reached T3"
grep -q "request .* to api refused: .*email" "$HT_TMP/mollyd.log" ||
	ht_fail "the t3 worker did not say it refused: $(grep -i refus "$HT_TMP/mollyd.log")"
ht_ok "a personal payload forced toward T3 was refused by the t3 worker's own check"
ht_stop
