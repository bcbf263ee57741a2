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
	local name=$1 i port=
	shift
	: >"$HT_TMP/$name.log"
	python3 "$RT_LIB/fake-openai.py" --log "$HT_TMP/$name.log" "$@" >"$HT_TMP/$name.out" 2>&1 &
	local pid=$!
	RT_PIDS+=("$pid")
	for ((i = 0; i < 100; i++)); do
		port=$(sed -n 's/^ready //p' "$HT_TMP/$name.out" 2>/dev/null)
		[ -n "$port" ] && break
		kill -0 "$pid" 2>/dev/null || ht_fail "fake target $name did not start: $(cat "$HT_TMP/$name.out")"
		sleep 0.1
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
