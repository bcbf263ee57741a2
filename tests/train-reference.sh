#!/bin/bash
# SPDX-License-Identifier: MIT
# train-reference: molly-train against PyTorch (tests/train_reference.py, float64) on the tiny
# F32 llama and qwen2 models, LoRA (every target, B non-zero at the start so every gradient is
# visible) and full mode, 50 AdamW steps each (warmup, clipping, weight decay, accumulation):
# gradients of the first steps within 1e-4 × max|g_ref| per tensor, losses within 1e-3 nats
# at every step, final weights within 1e-3 × max|w|. Exits 77 when python3-torch is missing.
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
src=${MOLLY_SOURCE_DIR:?}
llama=$shared/models/tiny/tiny-llama-f32.gguf
qwen=$shared/models/tiny/tiny-qwen2-f32.gguf
[ -r "$llama" ] && [ -r "$qwen" ] || { echo "SKIP: shared tiny models missing"; exit 77; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
	{ echo "SKIP: python3-torch is not installed (tools/install-deps.sh installs it)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/data.jsonl" <<'DATA'
{"prompt": "Once upon a time, there was a", "completion": " little girl named Lily."}
{"text": "The cat sat on the mat. It was happy."}
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there, friend."}]}
{"prompt": "Tom had a ball.", "completion": " He played with it all day."}
{"prompt": "The sun was", "completion": " bright and warm."}
{"text": "One day, a big dog ran to the park. He saw a bird."}
DATA
status=0
run() { # run NAME MODEL ARGS...
	local name=$1 model=$2
	shift 2
	"$bin/molly-train" --model "$model" --data "$tmp/data.jsonl" --out "$tmp/$name.out" \
		--steps 50 --batch 2 --seq-len 40 --lr 2e-3 --seed 3 --threads 2 --json \
		--dump "$tmp/$name" "$@" >"$tmp/$name.jsonl" || { echo "FAIL: molly-train $name"; status=1; return; }
	/usr/bin/python3 "$src/tests/train_reference.py" "$tmp/$name" "$tmp/$name.jsonl" || status=1
}
run llama-lora "$llama" --format gguf --targets all --rank 4 --alpha 8 --init-b-std 0.05 \
	--warmup 5 --weight-decay 0.01
run qwen2-lora "$qwen" --format gguf --targets all --rank 4 --init-b-std 0.05 --grad-accum 2 \
	--schedule linear
run llama-full "$llama" --full --lr 5e-4 --warmup 3 --weight-decay 0.1 --clip 0.5
run qwen2-full "$qwen" --full --lr 5e-4 --grad-accum 2 --no-pack
exit $status
