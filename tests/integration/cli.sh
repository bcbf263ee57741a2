#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The molly CLI against a mollyd on a private bus: ask (streamed, --json, --chat, stdin),
# status, adapters import/list/load/pin/unpin/unload, config check, key new, and the errors
# that say what to do.
source "$(dirname "$0")/lib/common.sh"
need python3 sha256sum

# --- without a daemon ---
bus_start
expect_fail "mollyd is not running" "$MOLLY" --bus-address="$BUS_ADDR" status
expect_fail "cannot connect" "$MOLLY" --bus-address="unix:path=$T/nonexistent.sock" status
pass "errors without a daemon say what to do"

# --- config check ---
write_config
expect_out "^OK" "$MOLLY" config check "$T/mollyd.conf"
mkdir -p "$T/mollyd.conf.d"
printf '[Engine]\nQueueLength=zero\n' > "$T/mollyd.conf.d/50-bad.conf"
expect_fail "mollyd.conf.d/50-bad.conf:2: \\[Engine\\] QueueLength=: 'zero' is not a whole number" "$MOLLY" config check "$T/mollyd.conf"
printf '[Engine]\nQueueLength=9\n' > "$T/mollyd.conf.d/50-bad.conf"
expect_out "read .*50-bad.conf" "$MOLLY" config check "$T/mollyd.conf"
out=$("$MOLLY" --json config check "$T/mollyd.conf")
echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"] and len(d["files"]) == 2, d'
printf '[Nonsense]\n' > "$T/mollyd.conf.d/60-x.conf"
expect_fail "60-x.conf:1: unknown section \\[Nonsense\\]" "$MOLLY" config check "$T/mollyd.conf"
rm -f "$T/mollyd.conf.d/60-x.conf"
expect_fail "No such file" "$MOLLY" config check "$T/missing.conf"
pass "config check"

# --- key new ---
out=$("$MOLLY" key new alice)
key=$(echo "$out" | grep -Eo 'molly-[A-Za-z0-9_-]+' | head -1)
hash=$(echo "$out" | sed -n 's/^KeyHash=sha256://p')
[ -n "$key" ] && [ -n "$hash" ] || fail "key new output: $out"
[ "$(printf %s "$key" | sha256sum | cut -d' ' -f1)" = "$hash" ] || fail "KeyHash is not the SHA-256 of the key"
grep -q '^\[Member alice\]$' <<<"$out" || fail "no [Member alice] line: $out"
echo "$out" | sed -n '/^\[Member alice\]$/,$p' > "$T/mollyd.conf.d/70-alice.conf"
expect_out "^OK: 1 member" "$MOLLY" config check "$T/mollyd.conf"
json=$("$MOLLY" key new bob --json)
echo "$json" | python3 -c 'import json,sys,hashlib; d=json.load(sys.stdin); assert d["key_hash"] == "sha256:" + hashlib.sha256(d["key"].encode()).hexdigest(), d'
[ "$key" != "$(echo "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')" ] || fail "two keys are equal"
expect_fail "not a member name" "$MOLLY" key new "bad name"
pass "key new"

# --- with a daemon ---
rm -f "$T/mollyd.conf.d/50-bad.conf"
mollyd_start
M=("$MOLLY" --bus-address="$BUS_ADDR")
out=$("${M[@]}" ask "Once upon a time" --max-tokens 12 --temperature 0)
[[ "$out" == ", there was a little girl named Lily."* ]] || fail "ask: $out"
out=$(echo "Once upon a time" | "${M[@]}" ask - --max-tokens 12 --temperature 0)
[[ "$out" == ", there was a little girl"* ]] || fail "ask from stdin: $out"
"${M[@]}" --json ask "Once upon a time" --max-tokens 4 --seed 7 | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin]
assert [l["type"] for l in lines] == ["token"] * 4 + ["done"], lines
assert lines[-1]["usage"]["completion_tokens"] == 4, lines[-1]'
expect_out "." "${M[@]}" ask --chat "Hello" --max-tokens 4
out=$("${M[@]}" ask "Once upon a time" --max-tokens 40 --temperature 0 --stop Lily)
[ "$out" = ", there was a little girl named " ] || fail "ask --stop: '$out'"
expect_fail "does not exist" "${M[@]}" ask "Once" --adapter nope
expect_fail "molly adapters list" "${M[@]}" ask "Once" --adapter nope
expect_fail "Usage: molly ask" "${M[@]}" ask
expect_fail "--max-tokens needs" "${M[@]}" ask "x" --max-tokens -3
pass "ask"

expect_out "^model +stories260K" "${M[@]}" status
"${M[@]}" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["model"] == "stories260K" and d["requests_total"] >= 3, d'
pass "status"

expect_out "No adapters" "${M[@]}" adapters list
expect_out "Imported .* as 'tale'" "${M[@]}" adapters import "$LORA" --name tale
# the same content again: no new version
expect_out "Imported .* as 'tale'" "${M[@]}" adapters import "$LORA" --name tale
expect_fail "No such file" "${M[@]}" adapters import "$T/none.gguf"
# A file that is not an adapter for this base: the model itself.
expect_fail "adapters import" "${M[@]}" adapters import "$MODEL" --name notalora
expect_out "^tale .*loaded=no" "${M[@]}" adapters list
expect_out "" "${M[@]}" adapters load tale
expect_fail "already loaded" "${M[@]}" adapters load tale
expect_out "" "${M[@]}" adapters pin tale
expect_out "^tale +[0-9a-f]{12} .*loaded=yes.*pinned=yes.*rank=8" "${M[@]}" adapters list
"${M[@]}" --json adapters list | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d[0]["name"] == "tale" and d[0]["pinned"] and d[0]["rank"] == 8, d
assert len(d[0]["content_hash"]) == 64, d'
out=$("${M[@]}" ask "Once upon a time" --adapter tale --max-tokens 12 --temperature 0)
base=$("${M[@]}" ask "Once upon a time" --max-tokens 12 --temperature 0)
[ "$out" != "$base" ] || fail "the adapter does not change the answer"
expect_out "" "${M[@]}" adapters unpin tale
expect_out "" "${M[@]}" adapters unload tale
expect_fail "not loaded" "${M[@]}" adapters unload tale
expect_fail "unknown command" "${M[@]}" adapters frobnicate
expect_out "Imported .* and loaded" "${M[@]}" adapters import "$LORA" --name tale2 --load
expect_out "^tale2 .*loaded=yes" "${M[@]}" adapters list
pass "adapters"

# The registry (issue 16): versions, history, rollback, NAME@N, remove, gc, fsck.
ATTN=$MOLLY_SHARED_DIR/models/stories260K-lora-attn-r8.gguf
expect_out "^1 " "${M[@]}" adapters history tale
expect_out "Imported .* as 'tale'" "${M[@]}" adapters import "$ATTN" --name tale
"${M[@]}" --json adapters history tale | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert [v["version"] for v in d] == [1, 2], d
assert all(len(v["hash"]) == 64 and v["bytes"] > 0 and "gguf" in v["provenance"] for v in d), d'
"${M[@]}" --json adapters list | python3 -c '
import json, sys
d = {a["name"]: a for a in json.load(sys.stdin)}
t = d["tale"]
assert t["version"] == 2 and len(t["hash"]) == 64 and t["tier"] in ("hot", "cold"), t
assert t["bytes"] > 0 and t["pinned"] in (True, False), t'
expect_out "" "${M[@]}" adapters load tale
v2=$("${M[@]}" ask "Once upon a time" --adapter tale --max-tokens 12 --temperature 0)
v1=$("${M[@]}" ask "Once upon a time" --adapter tale@1 --max-tokens 12 --temperature 0)
[ "$v1" = "$out" ] || fail "tale@1 is not the first version's answer: '$v1' vs '$out'"
[ "$v2" != "$v1" ] || fail "tale (version 2) answers like version 1"
expect_out "" "${M[@]}" adapters rollback tale 1
now=$("${M[@]}" ask "Once upon a time" --adapter tale --max-tokens 12 --temperature 0)
[ "$now" = "$v1" ] || fail "after rollback tale answers '$now', not version 1's '$v1'"
expect_fail "no version 9" "${M[@]}" adapters rollback tale 9
expect_fail "Usage: molly adapters rollback" "${M[@]}" adapters rollback tale two
expect_out "^0 errors, 0 warnings" "${M[@]}" adapters fsck --state-dir "$T/state"
expect_fail "daemon is using the registry" "${M[@]}" adapters fsck --state-dir "$T/state" --repair
expect_out "" "${M[@]}" adapters remove tale2
expect_fail "no adapter 'tale2'" "${M[@]}" adapters history tale2
expect_out "^removed [0-9]+ blob" "${M[@]}" adapters gc
pass "registry: history, rollback, NAME@N, remove, gc, fsck"

mollyd_stop
