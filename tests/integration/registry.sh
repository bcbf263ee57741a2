#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The adapter registry through the daemon (issue 16):
#  - the test-only crash switch (MOLLY_TEST=1 MOLLY_TEST_CRASH_AT=STEP) kills mollyd at every
#    step of an import and of a removal; after each, `molly adapters fsck` (no daemon) finds no
#    error, `--repair` removes what the crash left, and a restarted daemon has the old state or
#    the new one and answers with it;
#  - unloading an adapter gives its memory back: VmRSS returns to within max(4 MiB, 5%) of its
#    level before the load (a 23 MB adapter on a generated 768-wide model);
#  - release builds only: kill -9 at random moments during imports, a bounded loop; the state
#    is consistent after every one.
source "$(dirname "$0")/lib/common.sh"
need python3
[ -x "$MOLLY_BIN_DIR/molly-mkmodel" ] && [ -x "$MOLLY_BIN_DIR/molly-mkadapter" ] ||
	skip "molly-mkmodel / molly-mkadapter are not built"
ATTN=$MOLLY_SHARED_DIR/models/stories260K-lora-attn-r8.gguf
[ -r "$ATTN" ] && [ -r "$LORA" ] || skip "the test adapters are missing"

bus_start
write_config
M=("$MOLLY" --bus-address="$BUS_ADDR")

# The daemon died (the crash switch's SIGKILL, or ours): reap it.
REAP_RC=
mollyd_reap() {
	REAP_RC=0
	wait "$MOLLYD_PID" || REAP_RC=$?
	MOLLYD_PID=
}

# fsck without a daemon: no error; warnings repaired; clean afterwards.
fsck_clean() {
	local what=$1 out rc=0
	out=$("${M[@]}" adapters fsck --state-dir "$T/state" 2>&1) || rc=$?
	[ $rc -eq 0 ] || fail "$what: fsck finds errors: $out"
	out=$("${M[@]}" adapters fsck --state-dir "$T/state" --repair 2>&1) ||
		fail "$what: fsck --repair: $out"
	out=$("${M[@]}" adapters fsck --state-dir "$T/state" 2>&1) || fail "$what: fsck: $out"
	grep -q "^0 errors, 0 warnings" <<<"$out" || fail "$what: not clean after --repair: $out"
}

answer() {
	"${M[@]}" ask "Once upon a time" --adapter "$1" --max-tokens 10 --temperature 0
}

# ---- crash at every step ----
# The old state: tale = version 1 (LORA), loaded by Load=.
write_config "[Adapters]" "Load=tale"
rm -rf "$T/state"
mkdir -p "$T/state/adapters"
cp "$LORA" "$T/state/adapters/tale.gguf"
mollyd_start
old=$(answer tale)
mollyd_stop
"${M[@]}" adapters fsck --state-dir "$T/state" >/dev/null || fail "fsck after the first start"
cp -a "$T/state" "$T/state.v1"

for step in import-temp-written import-temp-synced import-renamed import-before-commit \
	import-after-commit; do
	rm -rf "$T/state" && cp -a "$T/state.v1" "$T/state"
	MOLLY_TEST=1 MOLLY_TEST_CRASH_AT=$step mollyd_start
	"${M[@]}" adapters import "$ATTN" --name tale >/dev/null 2>&1 &&
		fail "$step: the import succeeded through a crash"
	mollyd_reap
	[ "$REAP_RC" = 137 ] || fail "$step: mollyd exited with $REAP_RC, not by the crash switch (SIGKILL)"
	fsck_clean "$step"
	mollyd_start
	v=$("${M[@]}" --json adapters list | python3 -c 'import json, sys; print([a["version"] for a in json.load(sys.stdin) if a["name"] == "tale"][0])')
	now=$(answer tale)
	case $v in
	1) [ "$now" = "$old" ] || fail "$step: tale@1 answers differently after the crash" ;;
	2) [ "$now" != "$old" ] || fail "$step: tale@2 answers like version 1" ;;
	*) fail "$step: tale is at version $v" ;;
	esac
	mollyd_stop
	pass "crash at $step: version $v afterwards, fsck clean"
done

cp -a "$T/state.v1" "$T/state.v1b"
for step in remove-before-commit remove-after-commit remove-after-unlink; do
	rm -rf "$T/state" && cp -a "$T/state.v1b" "$T/state"
	# Without Load=: a loaded name would be unloaded first, which is not what is tested.
	write_config
	MOLLY_TEST=1 MOLLY_TEST_CRASH_AT=$step mollyd_start
	"${M[@]}" adapters remove tale >/dev/null 2>&1 && fail "$step: the removal succeeded through a crash"
	mollyd_reap
	[ "$REAP_RC" = 137 ] || fail "$step: mollyd exited with $REAP_RC, not by the crash switch (SIGKILL)"
	fsck_clean "$step"
	mollyd_start
	if "${M[@]}" adapters history tale >/dev/null 2>&1; then
		state=old
		"${M[@]}" adapters load tale >/dev/null || fail "$step: tale cannot be loaded"
		[ "$(answer tale)" = "$old" ] || fail "$step: tale answers differently after the crash"
	else
		state=new
		# the drop folder's tale.gguf was imported before: removed stays removed
		expect_fail "no adapter" "${M[@]}" adapters load tale
	fi
	mollyd_stop
	pass "crash at $step: $state state afterwards, fsck clean"
done

# ---- the drop folder: a changed file becomes a new version at the next start ----
rm -rf "$T/state" && cp -a "$T/state.v1" "$T/state"
cp "$ATTN" "$T/state/adapters/tale.gguf"
write_config "[Adapters]" "Load=tale"
mollyd_start
n=$("${M[@]}" --json adapters history tale | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$n" = 2 ] || fail "the changed drop-folder file did not become version 2 ($n versions)"
[ "$(answer tale)" != "$old" ] || fail "tale still answers with version 1 after the drop folder changed"
mollyd_stop
mollyd_start
n=$("${M[@]}" --json adapters history tale | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$n" = 2 ] || fail "an unchanged drop-folder file was imported again ($n versions)"
mollyd_stop
pass "drop folder: a changed file becomes a new version at start, an unchanged one does not"

# ---- unload gives the memory back ----
"$MOLLY_BIN_DIR/molly-mkmodel" --preset 100m --layers 4 --ffn 1024 --type q8_0 \
	--vocab "$MODEL" --out "$T/wide.gguf" >/dev/null || fail "molly-mkmodel"
"$MOLLY_BIN_DIR/molly-mkadapter" --base "$T/wide.gguf" --rank 256 --targets all --dtype f16 \
	--format gguf --out "$T/wide-lora.gguf" >/dev/null || fail "molly-mkadapter"
rm -rf "$T/state"
MOLLY_TEST_MODEL=$T/wide.gguf
MODEL=$T/wide.gguf write_config "[Engine]" "PoolBytes=256M"
mollyd_start
"${M[@]}" adapters import "$T/wide-lora.gguf" --name big >/dev/null || fail "import big"
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$MOLLYD_PID/status"; }
for i in 1 2; do "${M[@]}" ask "Once upon a time" --max-tokens 8 >/dev/null || fail "base"; done
rss0=$(rss)
"${M[@]}" adapters load big >/dev/null || fail "load big"
"${M[@]}" adapters pin big >/dev/null || fail "pin big"
"${M[@]}" ask "Once upon a time" --adapter big --max-tokens 8 >/dev/null || fail "ask big"
rss1=$(rss)
"${M[@]}" adapters unpin big >/dev/null || fail "unpin big"
"${M[@]}" adapters unload big >/dev/null || fail "unload big"
rss2=$(rss)
# The check means something only if the adapter took memory (23 MB of weights).
[ $((rss1 - rss0)) -ge 16384 ] || fail "the loaded adapter took only $((rss1 - rss0)) KiB (rss $rss0 -> $rss1)"
slack=$((rss0 * 5 / 100))
[ "$slack" -ge 4096 ] || slack=4096
[ "$rss2" -le $((rss0 + slack)) ] ||
	fail "VmRSS after unload is $rss2 KiB: more than $slack KiB above $rss0 KiB before the load (loaded: $rss1)"
mollyd_stop
pass "unload gives the memory back: VmRSS $rss0 -> $rss1 (loaded) -> $rss2 KiB"

# ---- kill -9 at random moments during imports (release builds) ----
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "${MOLLY_BUILD_DIR:-/nonexistent}/CMakeCache.txt" 2>/dev/null || true)
if [ "$build_type" = Release ] || [ "$build_type" = RelWithDebInfo ]; then
	rm -rf "$T/state"
	write_config
	for i in $(seq 1 12); do
		mollyd_start
		for n in 1 2 3; do
			"${M[@]}" adapters import "$([ $((RANDOM % 2)) = 0 ] && echo "$ATTN" || echo "$LORA")" \
				--name "r$((RANDOM % 3))" >/dev/null 2>&1 &
		done
		# The moment is the test's input, not a wait for a state: anything from before the
		# first import starts to after the last one ends is a valid crash.
		sleep "0.$((RANDOM % 300))"
		kill -KILL "$MOLLYD_PID"
		mollyd_reap
		wait || true
		fsck_clean "kill -9 round $i"
	done
	mollyd_start
	"${M[@]}" --json adapters list | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    assert a["version"] >= 1 and len(a["hash"]) == 64, a' || fail "list after the kill -9 rounds"
	mollyd_stop
	pass "kill -9 at random moments during imports: 12 rounds, fsck clean after each"
else
	echo "ok - kill -9 loop: release builds only (this is '${build_type:-unknown}')"
fi
