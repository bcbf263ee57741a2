#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Egress enforcement, the allowed path (issue #8), with real eBPF cgroup filters:
#  - mollyd moves itself into its "core" cgroup and starts one molly-egress worker per remote
#    tier with targets, each in its own cgroup (t1, t3);
#  - a public request routed to T1 goes through the t1 worker to the fake target on
#    127.0.0.1:P (allowed) and the answer comes back; a personal one to T3 goes redacted
#    through the t3 worker and comes back restored;
#  - the audit records say egress_enforced=true;
#  - Daemon1.Status (over a private bus) says "enforced".
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
source "$(dirname "$0")/lib/egress.sh"
eg_require_root
[ -x "$HT_BIN/molly" ] || ht_skip "molly is not built"

EMAIL=mario.rossi@example.com
rt_fake lan --reply "hello through the t1 worker"
rt_fake api --echo --split 3
ht_config "[Policy]
PublicTiers=T0,T1
PersonalTiers=T0,T3
AllowExternal=yes

[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
Quality.general=0.9
TimeoutSec=5

[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT/v1
Quality.general=0.95
TimeoutSec=5"
ht_start
eg_require_enforced

sub=$(eg_subtree) || ht_fail "the daemon is not in an egress subtree: $(cat /proc/$HT_PID/cgroup)"
grep -qx "$HT_PID" "$sub/core/cgroup.procs" || ht_fail "mollyd is not in $sub/core"
w1=$(eg_wait_worker 1) || ht_fail "no worker in $sub/t1"
w3=$(eg_wait_worker 3) || ht_fail "no worker in $sub/t3"
[ -z "$(eg_worker_pid 2)" ] || ht_fail "a T2 worker runs without T2 targets"
grep -q "molly-egress" "/proc/$w1/cmdline" || ht_fail "pid $w1 in t1 is not molly-egress"
wuid=$(awk '/^Uid:/ { print $2 }' "/proc/$w1/status")
if grep -q 'the egress workers run as root' "$HT_TMP/mollyd.log"; then
	echo "note: user nobody cannot execute molly-egress here; the workers run as root (warned)"
else
	[ "$wuid" != 0 ] || ht_fail "the t1 worker runs as root"
fi
# Not dumpable (the core, same user, cannot ptrace it): its /proc entries belong to root.
[ "$(stat -c %u "/proc/$w1/mem")" = 0 ] || ht_fail "the t1 worker is dumpable"
ht_ok "core in $sub/core, workers in t1 (pid $w1) and t3 (pid $w3), none in t2"

ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 8}'
ht_expect_status 200 "public completion through T1"
ht_expect_json 'j["choices"][0]["text"]' "hello through the t1 worker" "answer from T1"
[ "$(rt_count lan)" = 1 ] || ht_fail "T1 should have received 1 request, got $(rt_count lan)"
ht_ok "public request reached the T1 fake through the t1 worker"

PROMPT="Write to $EMAIL about it."
body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 64}))' "$PROMPT")
ht_req POST /v1/completions "$body"
ht_expect_status 200 "personal completion through T3"
got=$(ht_json 'j["choices"][0]["text"]')
[ "$got" = "ECHO:$PROMPT" ] || ht_fail "T3 answer not restored: '$got'"
grep -qF -- "$EMAIL" "$HT_TMP/api.log" && ht_fail "T3 received the e-mail address"
grep -q 'EMAIL_1' "$HT_TMP/api.log" || ht_fail "T3 did not get placeholders"
ht_ok "personal request went redacted through the t3 worker, answer restored"

ht_stop
# The helper removes the sealed core's cgroup once the daemon has exited.
no_dir() { [ ! -d "$1" ]; }
wait_until "$MOLLY_TEST_WAIT_S" no_dir "$sub" || true
[ -d "$sub" ] && ht_fail "the egress subtree $sub is still there after the stop"
rt_audit
python3 - "$HT_TMP/audit.jsonl" <<'PY' || ht_fail "audit: $(cat "$HT_TMP/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
reqs = [r for r in recs if r["front"] == "http"]
assert [r["target"] for r in reqs] == ["lan", "api"], reqs
assert all(r["egress_enforced"] is True for r in reqs), reqs
assert not [r for r in recs if r.get("error") == "egress_denied"], recs
PY
ht_ok "audit records say egress_enforced=true (no denials on the allowed path)"

# Daemon1.Status over a private bus says "enforced".
if command -v busctl >/dev/null && command -v dbus-daemon >/dev/null; then
	read -r ADDR BUSPID < <(dbus-daemon --session --fork --nopidfile --print-address=1 \
		--print-pid=1 --address="unix:path=$HT_TMP/bus.sock" | paste -sd' ')
	RT_PIDS+=("$BUSPID")
	sed -i 's/^Bus=none$/Bus=session/' "$HT_TMP/mollyd.conf"
	DBUS_SESSION_BUS_ADDRESS=$ADDR ht_start
	eg_require_enforced
	st=$(busctl --address="$ADDR" call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Status)
	grep -q '"egress" s "enforced"' <<<"$st" || ht_fail "Status: $st"
	ht_stop
	ht_ok "Daemon1.Status says egress enforced"
fi
