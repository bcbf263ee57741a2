# SPDX-License-Identifier: MIT
# Helpers for tests/integration/route-*.sh (sourced after lib/http.sh): fake OpenAI-compatible
# targets (lib/fake-openai.py) on 127.0.0.1 that record every byte they receive.

RT_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RT_PIDS=()

rt_cleanup() {
	local p
	for p in "${RT_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	ht_cleanup
}
trap rt_cleanup EXIT

# rt_fake NAME [fake-openai.py args...]: starts a fake target; sets NAME_PORT and NAME_PID;
# its log is $HT_TMP/NAME.log.
rt_fake() {
	local name=$1 port= deadline
	shift
	: >"$HT_TMP/$name.log"
	python3 "$RT_LIB/fake-openai.py" --log "$HT_TMP/$name.log" "$@" >"$HT_TMP/$name.out" 2>&1 &
	local pid=$!
	RT_PIDS+=("$pid")
	deadline=$(($(date +%s) + MOLLY_TEST_WAIT_S))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		port=$(sed -n 's/^ready //p' "$HT_TMP/$name.out" 2>/dev/null)
		[ -n "$port" ] && break
		kill -0 "$pid" 2>/dev/null || ht_fail "fake target $name did not start: $(cat "$HT_TMP/$name.out")"
		sleep 0.05
	done
	[ -n "$port" ] || ht_fail "fake target $name did not start"
	printf -v "${name}_PORT" %s "$port"
	printf -v "${name}_PID" %s "$pid"
}

# The number of completion requests (POST) a fake target received; health checks (GET
# /v1/models on the daemon's timer) are counted by rt_count_health.
rt_count() {
	grep -c -- '^POST ' "$HT_TMP/$1.log" || true
}
rt_count_health() {
	grep -c -- '^GET /v1/models' "$HT_TMP/$1.log" || true
}

# rt_audit: the audit records as JSON lines in $HT_TMP/audit.jsonl (the daemon stopped).
rt_audit() {
	"$HT_BIN/molly" audit --state-dir "$HT_TMP/state" --json >"$HT_TMP/audit.jsonl" ||
		ht_fail "molly audit"
}

# rt_mollyd NAME ADDR [EXTRA-INI]: a second mollyd (a real T1) with its own state, HTTP on
# ADDR (a loopback address such as 127.0.0.2) and a port the kernel picks (read from its log);
# sets NAME_URL and NAME_PID; its log is $HT_TMP/NAME.mollyd.log. Waits for /health.
rt_mollyd() {
	local name=$1 addr=$2 extra=${3:-} dir pid url
	python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0))' "$addr" ||
		ht_skip "cannot bind $addr (loopback addresses beyond 127.0.0.1 unavailable)"
	dir=$HT_TMP/$name
	mkdir -p "$dir/state/adapters" "$dir/run"
	cat >"$dir/mollyd.conf" <<CONF
[Model]
Path=$HT_MODEL
Threads=1
[HTTP]
Listen=$addr:0
[DBus]
Bus=none
[Adapters]
Directory=$dir/state/adapters
[Paths]
StateDirectory=$dir/state
RuntimeDirectory=$dir/run
$extra
CONF
	"$HT_MOLLYD" --config "$dir/mollyd.conf" >"$HT_TMP/$name.mollyd.log" 2>&1 &
	pid=$!
	RT_PIDS+=("$pid")
	url=$(ht_await_daemon "$HT_TMP/$name.mollyd.log" "$pid") ||
		ht_fail "$name (a second mollyd) did not start: $(tail -5 "$HT_TMP/$name.mollyd.log")"
	printf -v "${name}_URL" %s "$url"
	printf -v "${name}_PID" %s "$pid"
}

# rt_metric URL NAME: a counter of a daemon's /metrics.
rt_metric() {
	curl -s --max-time 10 "$1/metrics" | awk -v p="$2" 'index($0, p) == 1 {print $NF; exit}'
}
