#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Egress enforcement fails closed (issue #8): when it cannot start, remote tiers are refused
# with a clear message, T0 keeps answering, the reason is logged at start, and audit records
# say egress_enforced=false.
#  - run 1: mollyd really without root (setpriv to nobody) when this test runs as root;
#  - run 2: as whoever runs the test, with the test-only knob MOLLY_EGRESS_TEST_FAIL_START
#    (so the same checks run on machines where the test is not root).
# With [Egress] Enforce=no the remote calls run in the daemon (audit says false).
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

rt_fake lan --reply "from T1"
CONF="[Policy]
PublicTiers=T0,T1
PersonalTiers=T1

[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
Quality.general=0.9
TimeoutSec=5
Retries=0"

check_closed() { # WHAT
	grep -q 'egress enforcement could not start' "$HT_TMP/mollyd.log" ||
		ht_fail "$1: no reason logged at start"
	grep -q 'Remote tiers (T1..T3) are DISABLED' "$HT_TMP/mollyd.log" ||
		ht_fail "$1: the log does not say remote tiers are disabled"
	# public: T1 is preferred, refused, T0 answers.
	ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4}'
	ht_expect_status 200 "$1: a public request (T0 permitted)"
	[ "$(ht_json 'j["model"]')" = "$HT_NAME" ] || ht_fail "$1: not answered by T0"
	# personal: only T1 is permitted: a clear error.
	body='{"prompt": "Write to mario.rossi@example.com", "max_tokens": 4}'
	ht_req POST /v1/completions "$body"
	[ "$HT_STATUS" = 503 ] || ht_fail "$1: personal request: HTTP $HT_STATUS"
	grep -q 'remote tiers are disabled' "$HT_TMP/body" ||
		ht_fail "$1: the error does not say why: $(cat "$HT_TMP/body")"
	[ "$(rt_count lan)" = 0 ] || ht_fail "$1: the T1 target was reached"
}

if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	ht_config "$CONF"
	chmod 755 "$HT_TMP"
	chown -R 65534:65534 "$HT_TMP/state" "$HT_TMP/run"
	chmod 644 "$HT_TMP/mollyd.conf"
	cat >"$HT_TMP/mollyd-nobody" <<WRAP
#!/bin/sh
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$HT_MOLLYD" "\$@"
WRAP
	chmod 755 "$HT_TMP/mollyd-nobody"
	save=$HT_MOLLYD
	HT_MOLLYD=$HT_TMP/mollyd-nobody
	ht_start
	HT_MOLLYD=$save
	grep -q 'not started as root' "$HT_TMP/mollyd.log" ||
		ht_fail "without root: the reason is not 'not started as root'"
	check_closed "without root"
	ht_stop
	ht_ok "without root: remote tiers refused with a clear message, T0 answers"
	rm -rf "$HT_TMP/state/audit"
fi

ht_config "$CONF"
MOLLY_EGRESS_TEST=1 MOLLY_EGRESS_TEST_FAIL_START=1 ht_start
check_closed "start failure"
ht_stop
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2, recs
assert all(r["egress_enforced"] is False for r in recs), recs
assert recs[0]["tier"] == "T0", recs[0]  # the unavailable T1 ranks last
assert recs[1]["error"] is not None, recs[1]
PY
ht_ok "enforcement failed at start: remote tiers refused, T0 answers, audit says not enforced"

# Daemon1.Status says why (over a private bus).
if command -v busctl >/dev/null && command -v dbus-daemon >/dev/null; then
	read -r ADDR BUSPID < <(dbus-daemon --session --fork --nopidfile --print-address=1 \
		--print-pid=1 --address="unix:path=$HT_TMP/bus.sock" | paste -sd' ')
	RT_PIDS+=("$BUSPID")
	sed -i 's/^Bus=none$/Bus=session/' "$HT_TMP/mollyd.conf"
	MOLLY_EGRESS_TEST=1 MOLLY_EGRESS_TEST_FAIL_START=1 DBUS_SESSION_BUS_ADDRESS=$ADDR ht_start
	st=$(busctl --address="$ADDR" call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Status)
	grep -q '"egress" s "disabled: TEST: MOLLY_EGRESS_TEST_FAIL_START is set"' <<<"$st" ||
		ht_fail "Status: $st"
	ht_stop
	ht_ok "Daemon1.Status says egress is disabled, and why"
fi

# Enforce=no: in-process, audit says false.
ht_config "$CONF
[Egress]
Enforce=no"
ht_start
grep -q 'Enforce=no' "$HT_TMP/mollyd.log" || ht_fail "Enforce=no is not logged"
ht_req POST /v1/completions '{"prompt": "Once", "max_tokens": 4}'
ht_expect_status 200 "Enforce=no"
ht_expect_json 'j["choices"][0]["text"]' "from T1" "in-process T1 call"
ht_stop
rm -f "$HT_TMP/audit.jsonl"
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
last = recs[-1]
assert last["target"] == "lan" and last["egress_enforced"] is False, last
PY
ht_ok "Enforce=no: remote calls in-process, audit says egress_enforced=false"
