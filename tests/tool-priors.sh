#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# molly priors record / list: the router's EWMA priors in LMDB, without a daemon.
set -uo pipefail
molly=${MOLLY_BIN_DIR:?}/molly
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
passed=0 failed=0
check() { if eval "$2"; then echo "$1 ok"; passed=$((passed + 1)); else echo "$1 FAILED"; failed=$((failed + 1)); fi; }

check empty_list '[ -z "$("$molly" priors list --state-dir "$t")" ]'
"$molly" priors record --domain law --target t1:lan --score 0.8 --state-dir "$t" >/dev/null
"$molly" priors record --domain law --target t1:lan --score 0.4 --state-dir "$t" >/dev/null
"$molly" priors record --domain code --target local:base:coder --score 1 --state-dir "$t" >/dev/null
out=$("$molly" --json priors list --state-dir "$t")
check two_entries '[ "$(wc -l <<<"$out")" -eq 2 ]'
# first score is taken as is, the second weighs 1/2: (0.8 + 0.4) / 2
check ewma_mean 'grep -q "\"domain\":\"law\",\"target\":\"t1:lan\",\"mean\":0.6,\"count\":2" <<<"$out"'
check bad_score '! "$molly" priors record --domain law --target t1:lan --score 1.5 --state-dir "$t" 2>/dev/null'
check bad_name '! "$molly" priors record --domain "a b" --target t1:lan --score 0.5 --state-dir "$t" 2>/dev/null'
check missing_args '! "$molly" priors record --domain law --state-dir "$t" 2>/dev/null'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
