#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-adapter: molly-mkadapter and molly-adapter end to end (run by ctest with MOLLY_BIN_DIR,
# MOLLY_SHARED_DIR and MOLLY_SOURCE_DIR set).
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
src=${MOLLY_SOURCE_DIR:?}
base=$shared/models/stories260K.gguf
q8=$shared/models/stories260K-Q8_0.gguf
tiny=$shared/models/tiny/tiny-llama-f32.gguf
[ -r "$base" ] && [ -r "$q8" ] && [ -r "$tiny" ] || { echo "shared models missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { # json FILE KEY: a top-level string value of molly-adapter inspect --json
	sed -n "s/^  \"$2\": \"\(.*\)\",\?$/\1/p" "$1"
}

# The same seed in both public formats: the same weights, so the same content hash.
"$bin/molly-mkadapter" --base "$base" --rank 4 --alpha 8 --targets q,v,down --seed 9 \
	--format peft --out "$tmp/peft" >"$tmp/out" || fail "mkadapter peft"
grep -q 'peft LoRA for .*rank 4, alpha 8, targets q,v,down, f32, seed 9' "$tmp/out" ||
	fail "mkadapter summary: $(cat "$tmp/out")"
[ -f "$tmp/peft/adapter_config.json" ] && [ -f "$tmp/peft/adapter_model.safetensors" ] ||
	fail "PEFT directory incomplete"
grep -q '"target_modules": \[' "$tmp/peft/adapter_config.json" || fail "config"
grep -q '"q_proj"' "$tmp/peft/adapter_config.json" || fail "config lacks q_proj"
"$bin/molly-mkadapter" --base "$base" --rank 4 --alpha 8 --targets q,v,down --seed 9 \
	--format gguf --out "$tmp/a.gguf" >/dev/null || fail "mkadapter gguf"
"$bin/molly-adapter" inspect --json "$tmp/peft" --base "$base" >"$tmp/p.json" ||
	fail "inspect peft"
"$bin/molly-adapter" inspect --json "$tmp/a.gguf" --base "$base" >"$tmp/g.json" ||
	fail "inspect gguf"
hp=$(json "$tmp/p.json" content_hash)
hg=$(json "$tmp/g.json" content_hash)
[ ${#hp} -eq 64 ] || fail "no content hash in $(cat "$tmp/p.json")"
[ "$hp" = "$hg" ] || fail "PEFT and GGUF of the same weights hash differently ($hp, $hg)"
grep -q '"format": "peft"' "$tmp/p.json" || fail "format"
grep -q '"max_rank": 4' "$tmp/p.json" || fail "max_rank"

# Seeds: the same seed, the same bytes; another seed, others.
"$bin/molly-mkadapter" --base "$base" --rank 4 --alpha 8 --targets q,v,down --seed 9 \
	--format gguf --out "$tmp/b.gguf" >/dev/null || fail "mkadapter again"
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "same seed, different files"
"$bin/molly-mkadapter" --base "$base" --rank 4 --alpha 8 --targets q,v,down --seed 10 \
	--format gguf --out "$tmp/c.gguf" >/dev/null || fail "mkadapter seed 10"
cmp -s "$tmp/a.gguf" "$tmp/c.gguf" && fail "seeds 9 and 10 gave the same file"

# Import with metadata from a sidecar and flags (flags win); reopen; identity kept.
printf '{"name": "side", "domains": ["x"], "exemplars": ["from sidecar"]}\n' >"$tmp/side.json"
printf 'Once upon a time\r\n\nThe little dog\n' >"$tmp/ex.txt"
"$bin/molly-adapter" import "$tmp/peft" "$tmp/a.molly" --base "$base" --json-sidecar \
	"$tmp/side.json" --domains stories,kids --exemplars "$tmp/ex.txt" >"$tmp/out" ||
	fail "import"
grep -q "a.molly: 15 matrices (max rank 4, targets q,v,down, f16)" "$tmp/out" ||
	fail "import summary: $(cat "$tmp/out")"
[ ! -e "$tmp/a.molly.tmp" ] || fail "a.molly.tmp left behind"
[ $(($(stat -c %s "$tmp/a.molly") % 4096)) -eq 0 ] || fail "file size not page aligned"
"$bin/molly-adapter" inspect "$tmp/a.molly" >"$tmp/out" || fail "inspect molly"
for pattern in "molly adapter" "name: *side" "domains: *stories, kids" "exemplars: *2" \
	"^  Once upon a time$" "^  The little dog$" "content sha256: *$hp" \
	"base weights: *[0-9a-f]\{64\}" "targets: *q,v,down" "matrices: *15"; do
	grep -q -- "$pattern" "$tmp/out" || fail "inspect output lacks /$pattern/: $(cat "$tmp/out")"
done
# the per-tensor table: page-aligned offsets
awk '$1 ~ /^[0-9]+$/ && NF >= 14 { if ($9 % 4096 || $11 % 4096) bad = 1; n++ }
	END { exit !(n == 15 && !bad) }' "$tmp/out" || fail "tensor table: $(cat "$tmp/out")"
"$bin/molly-adapter" import "$tmp/a.gguf" "$tmp/g.molly" --base "$base" --name named \
	--dtype bf16 >/dev/null || fail "import gguf bf16"
"$bin/molly-adapter" inspect --json "$tmp/g.molly" >"$tmp/gm.json" || fail "inspect g.molly"
grep -q '"name": "named"' "$tmp/gm.json" || fail "--name"
grep -q '"dtype": "bf16"' "$tmp/gm.json" || fail "--dtype bf16"
[ "$(json "$tmp/gm.json" content_hash)" != "$hp" ] || fail "bf16 weights, same hash"

# verify: reads every tensor; the base is checked by fingerprint (Q8_0 is the same base).
"$bin/molly-adapter" verify "$tmp/a.molly" --base "$q8" >"$tmp/out" || fail "verify q8"
grep -q "ok (15 matrices verified, made for this base)" "$tmp/out" || fail "verify output"
"$bin/molly-adapter" verify "$tmp/a.molly" --base "$tiny" 2>"$tmp/err" && fail "tiny accepted"
grep -q "adapter 'side' was made for base 'llama 5x64 vocab 512 .*loaded base is 'llama 2x256" \
	"$tmp/err" || fail "mismatch message: $(cat "$tmp/err")"
# a flipped data byte: open works, verify names the matrix
cp "$tmp/a.molly" "$tmp/bad.molly"
printf '\x55' | dd of="$tmp/bad.molly" bs=1 seek=4100 conv=notrunc 2>/dev/null
"$bin/molly-adapter" verify "$tmp/bad.molly" 2>"$tmp/err" && fail "corrupt data verified"
grep -q "matrix 0 (layer 0 q) A: checksum mismatch" "$tmp/err" || fail "$(cat "$tmp/err")"

# Errors: exit 1 with the problem named, no output file.
mal=$src/tests/data/adapter-malformed
"$bin/molly-adapter" import "$mal/peft-lm-head" "$tmp/x.molly" --base "$base" 2>"$tmp/err" &&
	fail "lm_head accepted"
grep -q "module 'lm_head' is not a supported LoRA target" "$tmp/err" || fail "$(cat "$tmp/err")"
[ ! -e "$tmp/x.molly" ] && [ ! -e "$tmp/x.molly.tmp" ] || fail "a file was left"
"$bin/molly-adapter" import "$mal/peft-lm-head" "$tmp/x.molly" --base "$base" \
	--skip-unsupported >/dev/null 2>"$tmp/err" || fail "--skip-unsupported: $(cat "$tmp/err")"
grep -q "warning: skipped tensor 'base_model.model.lm_head.lora_A.weight'" "$tmp/err" ||
	fail "no warning: $(cat "$tmp/err")"
"$bin/molly-adapter" import "$tmp/peft" "$tmp/y.molly" 2>"$tmp/err" && fail "no --base accepted"
grep -q -- "--base MODEL.gguf is required" "$tmp/err" || fail "$(cat "$tmp/err")"
"$bin/molly-adapter" inspect "$tmp/peft" 2>"$tmp/err" && fail "PEFT without base accepted"
grep -q "needs its base model" "$tmp/err" || fail "$(cat "$tmp/err")"
printf '{"name": "x", "domain": []}' >"$tmp/bad.json"
"$bin/molly-adapter" import "$tmp/peft" "$tmp/y.molly" --base "$base" --json-sidecar \
	"$tmp/bad.json" 2>"$tmp/err" && fail "bad sidecar accepted"
grep -q 'unknown key "domain"' "$tmp/err" || fail "$(cat "$tmp/err")"
"$bin/molly-adapter" inspect "$mal/molly-header-checksum.molly" 2>"$tmp/err" &&
	fail "corrupt header accepted"
grep -q "header checksum mismatch" "$tmp/err" || fail "$(cat "$tmp/err")"
"$bin/molly-adapter" frobnicate 2>/dev/null && fail "unknown command accepted"
"$bin/molly-mkadapter" --base "$base" --rank 0 --format peft --out "$tmp/z" 2>/dev/null &&
	fail "rank 0 accepted"
"$bin/molly-mkadapter" --base "$base" --rank 2 --format onnx --out "$tmp/z" 2>/dev/null &&
	fail "format onnx accepted"
"$bin/molly-mkadapter" --base "$base" --rank 2 --format gguf --dtype q8_0 --out "$tmp/z" \
	2>/dev/null && fail "dtype q8_0 accepted"
"$bin/molly-mkadapter" --base "$base" --rank 2 --targets q,lm_head --format gguf \
	--out "$tmp/z" 2>"$tmp/err" && fail "target lm_head accepted"
grep -q "unknown target 'lm_head'" "$tmp/err" || fail "$(cat "$tmp/err")"
[ ! -e "$tmp/z" ] || fail "a file was left"
echo "tool-adapter: ok"
