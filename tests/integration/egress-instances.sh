#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Two daemons side by side with egress enforcement (issue #8): each gets its own cgroup
# subtree (molly-mollyd-<pid>) and its own workers and allow-lists; both answer through
# their own T1 targets; stopping one leaves the other working, and each removes its subtree.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
source "$(dirname "$0")/lib/egress.sh"
eg_require_root

rt_fake a --reply "from A's target"
rt_fake b --reply "from B's target"
mkconf() { # DIR PORT TARGET_PORT
	mkdir -p "$1/state/adapters" "$1/run"
	cat >"$1/mollyd.conf" <<CONF
[Model]
Path=$HT_MODEL
Threads=1
[HTTP]
Listen=127.0.0.1:$2
[DBus]
Bus=none
[Adapters]
Directory=$1/state/adapters
[Paths]
StateDirectory=$1/state
RuntimeDirectory=$1/run
[Policy]
PublicTiers=T1
[Target lan]
Tier=T1
URL=http://127.0.0.1:$3
TimeoutSec=5
CONF
}
# port 0: each daemon binds a port the kernel picks, and logs it
mkconf "$HT_TMP/A" 0 "$a_PORT"
mkconf "$HT_TMP/B" 0 "$b_PORT"
"$HT_MOLLYD" --config "$HT_TMP/A/mollyd.conf" >"$HT_TMP/A.log" 2>&1 &
PIDA=$!
RT_PIDS+=("$PIDA")
"$HT_MOLLYD" --config "$HT_TMP/B/mollyd.conf" >"$HT_TMP/B.log" 2>&1 &
PIDB=$!
RT_PIDS+=("$PIDB")
URLA=$(ht_await_daemon "$HT_TMP/A.log" "$PIDA") || ht_fail "daemon A did not start: $(tail -5 "$HT_TMP/A.log")"
URLB=$(ht_await_daemon "$HT_TMP/B.log" "$PIDB") || ht_fail "daemon B did not start: $(tail -5 "$HT_TMP/B.log")"
PA=${URLA##*:}
PB=${URLB##*:}
for l in A B; do
	if grep -q 'egress enforcement could not start' "$HT_TMP/$l.log"; then
		ht_skip "egress enforcement could not start: $(grep -m1 'could not start' "$HT_TMP/$l.log")"
	fi
done
SA=$(eg_subtree "$PIDA") || ht_fail "daemon A has no subtree: $(cat "$HT_TMP/A.log")"
SB=$(eg_subtree "$PIDB") || ht_fail "daemon B has no subtree: $(cat "$HT_TMP/B.log")"
[ "$SA" != "$SB" ] || ht_fail "both daemons share $SA"
[ -n "$(eg_worker_pid 1 "$PIDA")" ] && [ -n "$(eg_worker_pid 1 "$PIDB")" ] ||
	ht_fail "a daemon serves without its T1 worker"
ht_ok "two subtrees: $SA and $SB"

ask() { # PORT EXPECTED
	curl -s --max-time "$MOLLY_TEST_WAIT_S" "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt": "Hi", "max_tokens": 4}' >"$HT_TMP/ans"
	python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["choices"][0]["text"]; sys.exit(t != sys.argv[2])' \
		"$HT_TMP/ans" "$2" || ht_fail "port $1: $(cat "$HT_TMP/ans")"
}
ask "$PA" "from A's target"
ask "$PB" "from B's target"
[ "$(rt_count a)" = 1 ] && [ "$(rt_count b)" = 1 ] || ht_fail "counts a=$(rt_count a) b=$(rt_count b)"
ht_ok "both daemons answer through their own T1 worker"

kill -TERM "$PIDA"
wait "$PIDA"
no_dir() { [ ! -d "$1" ]; }
wait_until "$MOLLY_TEST_WAIT_S" no_dir "$SA" || ht_fail "A's subtree $SA is left behind"
ask "$PB" "from B's target"
kill -TERM "$PIDB"
wait "$PIDB"
wait_until "$MOLLY_TEST_WAIT_S" no_dir "$SB" || ht_fail "B's subtree $SB is left behind"
ht_ok "stopping A leaves B working; each removes its own subtree"
