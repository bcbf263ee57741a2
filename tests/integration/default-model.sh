#!/bin/bash
# SPDX-License-Identifier: MIT
# The default model (issue 20): mollyd with no [Model] Path= serves Molly's own model,
# molly-mini, found beside its binaries (the build copies models/ to share/molly/models, as
# packages install it); $MOLLY_MODEL still wins; with neither, it refuses to start and says
# what to set. Needs nothing outside the repository.
HT_MODEL=${MOLLY_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/models/molly-mini.gguf
HT_NAME=molly-mini
. "$(dirname "$0")/lib/http.sh"

default=$(dirname "$HT_BIN")/share/molly/models/molly-mini.gguf
[ -r "$default" ] || ht_fail "the build did not copy the default model to $default"
cmp -s "$default" "$HT_MODEL" || ht_fail "$default differs from $HT_MODEL"

# ---- no Path=, no $MOLLY_MODEL: molly-mini ----
ht_config
sed -i '/^Path=/d' "$HT_TMP/mollyd.conf"
unset MOLLY_MODEL
ht_start
ht_req GET /v1/models
ht_expect_status 200 "GET /v1/models"
ht_json 'j["data"][0]["id"]' >"$HT_TMP/id"
[ "$(cat "$HT_TMP/id")" = molly-mini ] || ht_fail "the model is '$(cat "$HT_TMP/id")', not molly-mini"
prompt="The command"
ht_req POST /v1/completions "{\"model\": \"molly-mini\", \"prompt\": \"$prompt\", \"max_tokens\": 12, \"temperature\": 0}"
ht_expect_status 200 "a completion from the default model"
ht_json 'j["choices"][0]["text"]' >"$HT_TMP/served"
# the same file run directly gives the same greedy text: it is the model mollyd loaded
"$HT_BIN/molly-run" --model "$HT_MODEL" --prompt "$prompt" -n 12 --temp 0 --threads 1 \
	>"$HT_TMP/direct" 2>"$HT_TMP/direct.err" || ht_fail "molly-run: $(cat "$HT_TMP/direct.err")"
python3 - "$HT_TMP/served" "$HT_TMP/direct" "$prompt" <<'PY' || ht_fail "served and direct texts differ"
import sys
served = open(sys.argv[1]).read().rstrip("\n")
direct = open(sys.argv[2]).read().rstrip("\n")
prompt = sys.argv[3]
if direct.startswith(prompt):
    direct = direct[len(prompt):]
if not served or served != direct:
    print("served %r, molly-run %r" % (served, direct), file=sys.stderr)
    sys.exit(1)
PY
ht_stop
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
ht_ok "no [Model] Path=: mollyd serves molly-mini from beside its binaries"
"$HT_BIN/molly" config check "$HT_TMP/mollyd.conf" >"$HT_TMP/check" 2>&1 ||
	ht_fail "molly config check refuses a configuration that relies on the default model: $(cat "$HT_TMP/check")"
ht_ok "molly config check accepts it"

# ---- $MOLLY_MODEL wins over the default ----
"$HT_BIN/molly-mkmodel" --hidden 64 --layers 1 --heads 2 --kv-heads 2 --ffn 128 --vocab-size 300 \
	--context 128 --seed 3 --out "$HT_TMP/other.gguf" >/dev/null || ht_fail "molly-mkmodel"
MOLLY_MODEL=$HT_TMP/other.gguf ht_start
ht_req GET /v1/models
ht_expect_status 200 "GET /v1/models"
ht_json 'j["data"][0]["id"]' >"$HT_TMP/id"
[ "$(cat "$HT_TMP/id")" = other ] || ht_fail "with MOLLY_MODEL the model is '$(cat "$HT_TMP/id")'"
ht_stop
ht_ok "\$MOLLY_MODEL wins over the default"

# ---- neither: a clear refusal ----
# a copy of mollyd where no share/molly/models is beside it; the configured data directory
# may hold an installed molly-mini (Molly installed on this machine): then it starts, rightly
if ls /usr/share/molly/models/molly-mini.gguf /usr/local/share/molly/models/molly-mini.gguf >/dev/null 2>&1; then
	echo "note: molly-mini is installed on this machine; the refusal without it is not tested" >&2
else
	mkdir -p "$HT_TMP/alone/bin"
	cp "$HT_MOLLYD" "$HT_TMP/alone/bin/mollyd"
	if timeout "$MOLLY_TEST_WAIT_S" "$HT_TMP/alone/bin/mollyd" --config "$HT_TMP/mollyd.conf" \
		>"$HT_TMP/mollyd.log" 2>&1; then
		ht_fail "mollyd started with no model anywhere"
	fi
	grep -q "Path=" "$HT_TMP/mollyd.log" && grep -q "molly-mini" "$HT_TMP/mollyd.log" ||
		ht_fail "the refusal does not say what to set: $(tail -3 "$HT_TMP/mollyd.log")"
	cp "$HT_BIN/molly" "$HT_TMP/alone/bin/molly"
	if "$HT_TMP/alone/bin/molly" config check "$HT_TMP/mollyd.conf" >"$HT_TMP/check" 2>&1; then
		ht_fail "molly config check accepts a configuration with no model anywhere"
	fi
	grep -q "molly-mini" "$HT_TMP/check" || ht_fail "molly config check says: $(cat "$HT_TMP/check")"
	ht_ok "no model anywhere: mollyd refuses and names [Model] Path= and molly-mini"
fi
