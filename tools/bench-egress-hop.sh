#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cost of the egress worker hop: N sequential HTTP completions through mollyd to a fake
# OpenAI-compatible T1 target on 127.0.0.1 (tests/integration/lib/fake-openai.py), once with
# [Egress] Enforce=yes (core → molly-egress in the t1 cgroup under the eBPF filter → target)
# and once with Enforce=no (libcurl in the daemon's process). Prints p50/p90/mean of curl's
# time_total for each and the p50 difference. Needs root for the enforced run.
#   tools/bench-egress-hop.sh [N]          (MOLLY_BIN_DIR: default build/release/bin)
set -u
N=${1:-200}
export MOLLY_BIN_DIR=${MOLLY_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/release/bin}
source "$(dirname "$0")/../tests/integration/lib/http.sh"
source "$(dirname "$0")/../tests/integration/lib/route.sh"
[ "$(id -u)" = 0 ] || ht_skip "the enforced run needs root"

rt_fake lan --reply "ok"
run() { # ENFORCE
	ht_config "[Policy]
PublicTiers=T1
[Target lan]
Tier=T1
URL=http://127.0.0.1:$lan_PORT
TimeoutSec=5
Retries=0
[Egress]
Enforce=$1"
	ht_start
	if [ "$1" = yes ] && ! grep -q 'egress enforcement: core cgroup' "$HT_TMP/mollyd.log"; then
		ht_fail "enforcement did not start: $(grep -m1 egress "$HT_TMP/mollyd.log")"
	fi
	for ((i = 0; i < 5; i++)); do # warm-up
		curl -s -o /dev/null "$HT_URL/v1/completions" -H 'Content-Type: application/json' \
			-d '{"prompt": "Hi", "max_tokens": 2}'
	done
	for ((i = 0; i < N; i++)); do
		curl -s -o /dev/null -w '%{time_total}\n' "$HT_URL/v1/completions" \
			-H 'Content-Type: application/json' -d '{"prompt": "Hi", "max_tokens": 2}'
	done >"$HT_TMP/times.$1"
	ht_stop
}
run yes
run no
python3 - "$HT_TMP/times.yes" "$HT_TMP/times.no" "$N" <<'PY'
import statistics as st, sys
def load(p):
    v = sorted(float(x) * 1e3 for x in open(p))
    return v, v[len(v) // 2], v[int(len(v) * 0.9)], st.mean(v)
y, yp50, yp90, ym = load(sys.argv[1])
n, np50, np90, nm = load(sys.argv[2])
print(f"N={sys.argv[3]} sequential completions through mollyd to a fake T1 on 127.0.0.1")
print(f"Enforce=yes (worker hop): p50 {yp50:.2f} ms  p90 {yp90:.2f} ms  mean {ym:.2f} ms")
print(f"Enforce=no  (in-process): p50 {np50:.2f} ms  p90 {np90:.2f} ms  mean {nm:.2f} ms")
print(f"worker hop p50 overhead: {yp50 - np50:+.2f} ms")
PY
