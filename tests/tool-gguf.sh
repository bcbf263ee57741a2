#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-gguf: molly-mkmodel and molly-gguf end to end (run by ctest with MOLLY_BIN_DIR,
# MOLLY_SHARED_DIR and MOLLY_SOURCE_DIR set).
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
src=${MOLLY_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mk() { "$bin/molly-mkmodel" --hidden 256 --layers 2 --heads 4 --kv-heads 2 --ffn 256 \
	--vocab-size 300 --context 128 "$@"; }

# A small quantized model: written, renamed into place, listed.
mk --type q8_0 --seed 5 --name m --out "$tmp/m.gguf" >"$tmp/mk.out" || fail "molly-mkmodel q8_0"
grep -q '21 tensors' "$tmp/mk.out" || fail "mkmodel summary: $(cat "$tmp/mk.out")"
[ ! -e "$tmp/m.gguf.tmp" ] || fail "m.gguf.tmp left behind"
"$bin/molly-gguf" "$tmp/m.gguf" >"$tmp/out" || fail "molly-gguf on a mkmodel file"
for pattern in 'GGUF version 3, alignment 32' \
	'llama.embedding_length  *u32 = 256' 'llama.attention.head_count_kv  *u32 = 2' \
	'llama.rope.dimension_count  *u32 = 64' 'general.file_type  *u32 = 7' \
	'tokenizer.ggml.tokens  *arr\[str,300\] = \["<unk>", "<s>", "</s>", "<0x00>"' \
	'token_embd.weight  *q8_0  *\[256, 300\]' 'blk.1.ffn_down.weight  *q8_0  *\[256, 256\]' \
	'blk.0.attn_k.weight  *q8_0  *\[256, 128\]' 'output_norm.weight  *f32  *\[256\]' \
	'output.weight  *q8_0'; do
	grep -q -- "$pattern" "$tmp/out" || fail "molly-gguf output lacks /$pattern/"
done

# Deterministic: the same seed gives the same bytes, another seed different ones.
mk --type q8_0 --seed 5 --name m --out "$tmp/same.gguf" >/dev/null || fail "mkmodel again"
cmp -s "$tmp/m.gguf" "$tmp/same.gguf" || fail "same seed, different files"
mk --type q8_0 --seed 6 --name m --out "$tmp/other.gguf" >/dev/null || fail "mkmodel seed 6"
cmp -s "$tmp/m.gguf" "$tmp/other.gguf" && fail "seeds 5 and 6 gave the same file"

# Every supported type; qwen2 biases; a tied output.
for t in f32 f16 bf16 q4_0 q4_k q6_k; do
	mk --type "$t" --out "$tmp/$t.gguf" >/dev/null || fail "mkmodel --type $t"
	"$bin/molly-gguf" "$tmp/$t.gguf" | grep >/dev/null "blk.0.attn_q.weight  *$t " ||
		fail "--type $t not applied"
done
mk --arch qwen2 --tied --out "$tmp/q.gguf" >/dev/null || fail "mkmodel qwen2"
"$bin/molly-gguf" "$tmp/q.gguf" >"$tmp/out" || fail "molly-gguf qwen2"
grep -q 'blk.1.attn_v.bias  *f32  *\[128\]' "$tmp/out" || fail "qwen2 without biases"
grep -qE '[[:space:]]output\.weight[[:space:]]' "$tmp/out" && fail "--tied still wrote output.weight"

# --vocab copies the tokenizer of another file, and its size.
vocab="$shared/reference/tokenizers/ggml-vocab-llama-spm.gguf"
if [ -r "$vocab" ]; then
	"$bin/molly-mkmodel" --hidden 64 --layers 1 --heads 2 --ffn 64 --vocab "$vocab" \
		--out "$tmp/v.gguf" >/dev/null || fail "mkmodel --vocab"
	"$bin/molly-gguf" "$tmp/v.gguf" >"$tmp/out" || fail "molly-gguf --vocab file"
	grep -q 'tokenizer.ggml.add_bos_token  *bool = true' "$tmp/out" || fail "keys not copied"
	grep -q 'llama.vocab_size  *u32 = 32000' "$tmp/out" || fail "vocab size not taken"
	grep -q 'token_embd.weight  *f32  *\[64, 32000\]' "$tmp/out" || fail "embedding shape"
fi

# Bad arguments fail with a message and leave no file.
mk --type q4_k --hidden 96 --heads 2 --out "$tmp/bad.gguf" 2>"$tmp/err" &&
	fail "q4_k with hidden 96 accepted"
grep -q 'block size 256' "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
[ ! -e "$tmp/bad.gguf" ] && [ ! -e "$tmp/bad.gguf.tmp" ] || fail "a file was left"
"$bin/molly-mkmodel" --preset 7b --out "$tmp/x.gguf" 2>/dev/null && fail "--preset 7b accepted"
"$bin/molly-mkmodel" --preset 100m 2>/dev/null && fail "no --out accepted"

# molly-gguf on bad input: exit 1, "molly-gguf: FILE: reason".
f="$src/tests/data/gguf-malformed/version-1.gguf"
"$bin/molly-gguf" "$f" >/dev/null 2>"$tmp/err" && fail "version 1 accepted"
grep -q "^molly-gguf: $f: GGUF version 1" "$tmp/err" || fail "message: $(cat "$tmp/err")"
"$bin/molly-gguf" "$tmp/nonexistent.gguf" 2>"$tmp/err" && fail "missing file accepted"
grep -q "No such file" "$tmp/err" || fail "message: $(cat "$tmp/err")"

# A real llama.cpp file.
if [ -r "$shared/models/stories260K.gguf" ]; then
	"$bin/molly-gguf" "$shared/models/stories260K.gguf" >"$tmp/out" || fail "stories260K"
	grep -q '48 tensors' "$tmp/out" || fail "stories260K tensor count"
	grep -q 'blk.4.ffn_down.weight  *f32  *\[172, 64\]' "$tmp/out" || fail "stories260K shape"
fi
echo "tool-gguf: ok"
