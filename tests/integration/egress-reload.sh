#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Egress enforcement follows the configuration (issue #8), with real eBPF cgroup filters:
#  - a [Target]'s URL moves to another port (and from an address to the name localhost);
#    SIGHUP; the t1 worker resolves the new URL, the core sets the new allow-list atomically,
#    and the next request reaches the new port;
#  - a worker killed with SIGKILL is restarted into its cgroup (a new pid in t1) and the next
#    request succeeds; a request in flight when it dies ends with an error, not a hang.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"
source "$(dirname "$0")/lib/egress.sh"
eg_require_root

rt_fake old --reply "from the old port"
rt_fake new --reply "from the new port"
conf() {
	ht_config "[Policy]
PublicTiers=T1

[Target lan]
Tier=T1
URL=http://127.0.0.1:$1
TimeoutSec=5
Retries=0"
}
conf "$old_PORT"
ht_start
eg_require_enforced

ht_req POST /v1/completions '{"prompt": "Once", "max_tokens": 4}'
ht_expect_status 200 "before the reload"
ht_expect_json 'j["choices"][0]["text"]' "from the old port" "old port answers"

# Keep the port: rewrite only the URL, then reload.
port=$HT_PORT
# A name this time: the worker resolves it (getaddrinfo) and pins libcurl to the answer.
sed -i "s|^URL=http://127.0.0.1:$old_PORT\$|URL=http://localhost:$new_PORT|" "$HT_TMP/mollyd.conf"
grep -q "URL=http://localhost:$new_PORT" "$HT_TMP/mollyd.conf" || ht_fail "config not rewritten"
n=$(grep -c 'configuration reloaded' "$HT_TMP/mollyd.log")
kill -HUP "$HT_PID"
reloaded_since() { [ "$(grep -c 'configuration reloaded' "$HT_TMP/mollyd.log")" -gt "$1" ]; }
wait_until "$MOLLY_TEST_WAIT_S" reloaded_since "$n" || ht_fail "no reload"
grep -q 'reload: egress' "$HT_TMP/mollyd.log" && ht_fail "reload warned: $(grep 'reload: egress' "$HT_TMP/mollyd.log")"
ht_req POST /v1/completions '{"prompt": "Twice", "max_tokens": 4}'
ht_expect_status 200 "after the reload"
ht_expect_json 'j["choices"][0]["text"]' "from the new port" "the new port answers"
[ "$(rt_count new)" = 1 ] || ht_fail "the new port got $(rt_count new) requests"
[ "$(rt_count old)" = 1 ] || ht_fail "the old port got $(rt_count old) requests"
ht_ok "allow-list followed the reload: the new port works"

# --- a worker killed with SIGKILL comes back ---
w=$(eg_wait_worker 1) || ht_fail "no t1 worker"
kill -KILL "$w"
nw=$(eg_wait_worker 1 "$w") || ht_fail "the t1 worker was not restarted"
grep -q "the T1 worker (pid $w) is gone" "$HT_TMP/mollyd.log" || ht_fail "the death was not logged"
answers_again() {
	ht_req POST /v1/completions '{"prompt": "Thrice", "max_tokens": 4}'
	[ "$HT_STATUS" = 200 ]
}
wait_until "$MOLLY_TEST_WAIT_S" answers_again
ht_expect_status 200 "after the restart"
ht_expect_json 'j["choices"][0]["text"]' "from the new port" "answer after the restart"
sub=$(eg_subtree)
grep -qx "$nw" "$sub/t1/cgroup.procs" || ht_fail "the new worker $nw is not in t1"
ht_ok "a killed worker ($w) was restarted into t1 ($nw) and answers"

# A request in flight when the worker dies ends with an error (503), not a hang.
rt_fake hang --mode hang
sed -i "s|^URL=http://localhost:$new_PORT\$|URL=http://127.0.0.1:$hang_PORT|" "$HT_TMP/mollyd.conf"
n=$(grep -c 'configuration reloaded' "$HT_TMP/mollyd.log")
kill -HUP "$HT_PID"
wait_until "$MOLLY_TEST_WAIT_S" reloaded_since "$n" || ht_fail "no reload"
curl -s -o "$HT_TMP/inflight" -w '%{http_code}' --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/completions" \
	-H 'Content-Type: application/json' -d '{"prompt": "Hang", "max_tokens": 4}' \
	>"$HT_TMP/inflight.code" &
cpid=$!
# the worker is killed once the request has certainly reached the hanging target through it
hang_received() { grep -q 'POST' "$HT_TMP/hang.log"; }
wait_until "$MOLLY_TEST_WAIT_S" hang_received || ht_fail "the request never reached the hanging target"
w=$(eg_worker_pid 1)
kill -KILL "$w"
wait "$cpid"
code=$(cat "$HT_TMP/inflight.code")
[ "$code" != 200 ] && [ "$code" != 000 ] || ht_fail "in-flight request: HTTP $code $(cat "$HT_TMP/inflight")"
grep -q 'worker' "$HT_TMP/inflight" || ht_fail "the error does not name the worker: $(cat "$HT_TMP/inflight")"
ht_ok "a request in flight when its worker died ended with HTTP $code"
ht_stop
