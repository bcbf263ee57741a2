#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The adapter tiers through the daemon (issue 17), with real blobs in the registry and real
# io_uring:
#  - loaded adapters start cold; `molly adapters prefetch` makes one hot with no request;
#  - a request on a cold adapter reads it (warm miss), later ones hit; the loader path that
#    ran is in Daemon1.Status and the Adapter* properties;
#  - a blob changed on disk behind the daemon's back: the request on it fails naming the
#    corruption, the adapter shows tier=bad, Status counts it; the other adapters still answer.
source "$(dirname "$0")/lib/common.sh"
[ -x "$MOLLY_BIN_DIR/molly-mkadapter" ] || skip "molly-mkadapter is not built"
[ -r "$LORA" ] || skip "the test adapters are missing"

bus_start
M=("$MOLLY" --bus-address="$BUS_ADDR")
mkdir -p "$T/state/adapters"
cp "$LORA" "$T/state/adapters/tale.gguf"
for s in 1 2; do
	"$MOLLY_BIN_DIR/molly-mkadapter" --base "$MODEL" --rank 4 --seed "$s" --format gguf \
		--out "$T/state/adapters/gen$s.gguf" >/dev/null || fail "molly-mkadapter"
done
write_config "[Adapters]" "Load=tale gen1 gen2" "WarmBytes=64M" "Eviction=gdsf"
mollyd_start

tier_of() { "${M[@]}" adapters list | awk -v n="$1" '$1 == n' | grep -o 'tier=[a-z]*' | cut -d= -f2; }
status() { call Daemon1 Status; }

for n in tale gen1 gen2; do
	[ "$(tier_of $n)" = cold ] || fail "$n starts $(tier_of $n), not cold"
done
pass "loaded adapters start cold"

"${M[@]}" adapters prefetch tale || fail "adapters prefetch"
wait_until "$MOLLY_TEST_WAIT_S" bash -c "[ \"\$(\"$MOLLY\" --bus-address=$BUS_ADDR adapters list | awk '\$1 == \"tale\"' | grep -o 'tier=[a-z]*')\" = tier=hot ]" ||
	fail "tale did not become hot after prefetch: $("${M[@]}" adapters list)"
pass "prefetch makes an adapter hot without a request"

out=$("${M[@]}" ask "Once upon a time" --adapter gen1 --max-tokens 8 --temperature 0) ||
	fail "ask on a cold adapter: $out"
[ "$(tier_of gen1)" = hot ] || fail "gen1 is $(tier_of gen1) after a request"
line=$("${M[@]}" adapters list | awk '$1 == "gen1"')
grep -q 'warm_misses=1' <<<"$line" || fail "gen1 warm_misses: $line"
grep -Eq 'numa_node=(-1|[0-9]+)' <<<"$line" || fail "gen1 numa_node: $line"
"${M[@]}" status | grep -Eq 'adapter_hash_bytes_per_second[:= ]+[0-9]' ||
	fail "molly status lacks the hashing rate: $("${M[@]}" status)"
st=$(status)
grep -q '"adapter_load_path" s "uring' <<<"$st" || fail "Status adapter_load_path: $st"
grep -Eq '"adapter_loads" t [2-9]' <<<"$st" || fail "Status adapter_loads: $st"
grep -q '"adapter_hash" s "' <<<"$st" || fail "Status adapter_hash: $st"
prop=$(busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 \
	org.molly.Daemon1 AdapterLoadPath) || fail "AdapterLoadPath"
grep -q '^s "uring' <<<"$prop" || fail "AdapterLoadPath is $prop"
busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 \
	org.molly.Daemon1 AdapterBytesRead | grep -q '"uring"' || fail "AdapterBytesRead"
pass "a cold adapter is read on demand; Status and properties say how"

# gen2's blob changes on disk while it is cold
blob=$("${M[@]}" adapters list | awk '$1 == "gen2"' | grep -o 'path=[^ ]*' | cut -d= -f2)
[ -f "$blob" ] || fail "gen2's blob path: '$blob'"
size=$(stat -c %s "$blob")
chmod u+w "$blob"
orig=$(od -An -tx1 -j $((size - 1)) -N1 "$blob" | tr -d ' ')
flip=$(printf '%02x' $((0x$orig ^ 0xff)))
printf "\\x$flip" | dd of="$blob" bs=1 seek=$((size - 1)) conv=notrunc status=none
expect_fail "corrupt" "${M[@]}" ask "Once upon a time" --adapter gen2 --max-tokens 8 --temperature 0
[ "$(tier_of gen2)" = bad ] || fail "gen2 is $(tier_of gen2), not bad"
grep -q '"adapters_bad" t 1' <<<"$(status)" || fail "Status adapters_bad: $(status)"
grep -q "marked bad" "$T/mollyd.log" || fail "no log line for the bad blob"
out=$("${M[@]}" ask "Once upon a time" --adapter tale --max-tokens 8 --temperature 0) ||
	fail "tale after gen2 went bad: $out"
pass "a blob changed on disk is bad alone, with the reason"

# the mark outlives the daemon: at the next start gen2 is checked again and refused at once
mollyd_stop
mollyd_start
wait_until "$MOLLY_TEST_WAIT_S" bash -c "\"$MOLLY\" --bus-address=$BUS_ADDR adapters list | awk '\$1 == \"gen2\"' | grep -q tier=bad" ||
	fail "gen2 after a restart: $("${M[@]}" adapters list | awk '$1 == "gen2"')"
expect_fail "marked bad earlier" "${M[@]}" ask "Once upon a time" --adapter gen2 --max-tokens 8 --temperature 0
pass "the bad mark outlives a restart"

# repaired on disk (the byte back): the next start clears the mark and gen2 answers
mollyd_stop
printf "\\x$orig" | dd of="$blob" bs=1 seek=$((size - 1)) conv=notrunc status=none
last=$(od -An -tx1 -j $((size - 1)) -N1 "$blob" | tr -d ' ')
mollyd_start
out=$("${M[@]}" ask "Once upon a time" --adapter gen2 --max-tokens 8 --temperature 0) ||
	fail "gen2 after its blob was repaired (last byte $last): $out"
grep -q "bad mark .* is cleared" "$T/mollyd.log" || fail "no log line for the cleared mark"
pass "a repaired blob clears the mark"

mollyd_stop
pass "stopped"
