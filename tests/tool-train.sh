#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-train: molly-train end to end (issue #19): data errors name file, line and field; the
# three adapter formats and a full model come out and load back into Molly; the same seed
# gives the same bits with 1 and 2 threads; a run stopped at a step boundary (as on Ctrl-C)
# and resumed gives the same bits as one never stopped; --json prints one object per step.
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
llama=$shared/models/tiny/tiny-llama-f32.gguf
qwen=$shared/models/tiny/tiny-qwen2-f32.gguf
q8=$shared/models/tiny/tiny-llama-q8_0.gguf
[ -r "$llama" ] && [ -r "$qwen" ] && [ -r "$q8" ] || { echo "shared tiny models missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/data.jsonl" <<'DATA'
{"prompt": "Once upon a time, there was a", "completion": " little girl named Lily."}
{"text": "The cat sat on the mat. It was happy."}
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there, friend."}]}
{"prompt": "Tom had a ball.", "completion": " He played with it all day."}

{"prompt": "The sun was", "completion": " bright and warm."}
{"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Who?"}, {"role": "assistant", "content": "A dog."}, {"role": "user", "content": "And?"}, {"role": "assistant", "content": "A cat."}]}
DATA
common=(--data "$tmp/data.jsonl" --batch 2 --seq-len 48 --lr 1e-3 --seed 5 --json)

# Data errors: file, line, field.
check_err() { # check_err LINE-TEXT EXPECTED-SUBSTRING
	printf '{"text": "fine"}\n%s\n' "$1" >"$tmp/bad.jsonl"
	if "$bin/molly-train" --model "$llama" --data "$tmp/bad.jsonl" --out "$tmp/x" \
		--steps 1 2>"$tmp/err"; then fail "bad data accepted: $1"; fi
	grep -qF "$2" "$tmp/err" || fail "error for '$1': $(cat "$tmp/err") (wanted '$2')"
}
check_err '{"prompt": 3, "completion": "x"}' "bad.jsonl:2: field 'prompt': expected a string"
check_err '{"prompt": "x"}' "bad.jsonl:2: field 'completion' is missing"
check_err '{"messages": [{"role": "bot", "content": "x"}]}' "bad.jsonl:2: field 'messages[0].role'"
check_err '{"messages": [{"role": "user"}]}' "bad.jsonl:2: field 'messages[0].content'"
check_err '{"text": "x"' "bad.jsonl:2: not a JSON object"
check_err '{"other": 1}' "bad.jsonl:2: no field"

# LoRA on every target, the three formats; one JSON object per step.
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/a.gguf" --format gguf \
	--steps 4 --targets all --rank 4 --threads 2 >"$tmp/a.jsonl" || fail "train gguf"
[ "$(grep -c '"step": ' "$tmp/a.jsonl")" -eq 4 ] || fail "--json: $(cat "$tmp/a.jsonl")"
grep -q '"step": 4, "loss": [0-9.]*' "$tmp/a.jsonl" || fail "no step 4 loss"
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/a.peft" --format peft \
	--steps 4 --targets all --rank 4 --threads 2 >/dev/null || fail "train peft"
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/a.molly" --format molly \
	--steps 4 --targets all --rank 4 --threads 2 >/dev/null || fail "train molly"
[ -f "$tmp/a.peft/adapter_config.json" ] && [ -f "$tmp/a.peft/adapter_model.safetensors" ] ||
	fail "PEFT directory incomplete"
grep -q '"lora_alpha": 4' "$tmp/a.peft/adapter_config.json" || fail "alpha = rank by default"
for f in a.gguf a.peft a.molly; do
	"$bin/molly-adapter" inspect "$tmp/$f" --base "$llama" >/dev/null || fail "inspect $f"
done
# The same F32 weights as GGUF LoRA and PEFT: the same logits in Molly.
for f in a.gguf a.peft; do
	"$bin/molly-run" --model "$llama" --prompt "Once upon a time" -n 4 --temp 0 --quiet \
		--lora "$tmp/$f" --logits-out "$tmp/$f.logits" >/dev/null || fail "molly-run --lora $f"
done
cmp -s "$tmp/a.gguf.logits" "$tmp/a.peft.logits" || fail "GGUF and PEFT outputs give other logits"
"$bin/molly-run" --model "$llama" --prompt "Once upon a time" -n 4 --temp 0 --quiet \
	--logits-out "$tmp/base.logits" >/dev/null || fail "molly-run base"
cmp -s "$tmp/a.gguf.logits" "$tmp/base.logits" && fail "the trained adapter changes nothing"

# Thread count and seed: the same bits.
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/t1.gguf" --format gguf \
	--steps 4 --targets all --rank 4 --threads 1 >"$tmp/t1.jsonl" || fail "train 1 thread"
cmp -s "$tmp/a.gguf" "$tmp/t1.gguf" || fail "1 and 2 threads give different adapters"

# Stopped at a step boundary, resumed: the same bits as straight through.
"$bin/molly-train" --model "$qwen" "${common[@]}" --out "$tmp/s.gguf" --format gguf \
	--steps 6 --targets q,v,down --threads 2 --grad-accum 2 >"$tmp/s.jsonl" || fail "straight"
"$bin/molly-train" --model "$qwen" "${common[@]}" --out "$tmp/r.gguf" --format gguf \
	--steps 6 --targets q,v,down --threads 2 --grad-accum 2 --stop-after 3 >"$tmp/r1.jsonl"
[ $? -eq 130 ] || fail "--stop-after: exit status not 130"
[ -f "$tmp/r.gguf.ckpt" ] && [ ! -e "$tmp/r.gguf.ckpt.tmp" ] || fail "no checkpoint"
"$bin/molly-train" --model "$qwen" "${common[@]}" --out "$tmp/r.gguf" --format gguf \
	--steps 6 --targets q,v,down --threads 2 --grad-accum 2 --resume >"$tmp/r2.jsonl" ||
	fail "resume"
cmp -s "$tmp/s.gguf" "$tmp/r.gguf" || fail "resumed run differs from the straight one"
diff <(grep '"step": [456],' "$tmp/s.jsonl" | sed 's/, "tokens_per_s.*//') \
	<(grep '"step": [456],' "$tmp/r2.jsonl" | sed 's/, "tokens_per_s.*//') >/dev/null ||
	fail "resumed losses differ"
# A checkpoint of another run is refused.
"$bin/molly-train" --model "$qwen" "${common[@]}" --out "$tmp/r.gguf" --format gguf \
	--steps 6 --targets q,v --threads 2 --grad-accum 2 --resume 2>"$tmp/err" >/dev/null &&
	fail "resumed another run's checkpoint"
grep -q "another run" "$tmp/err" || fail "stale checkpoint message: $(cat "$tmp/err")"

# A real SIGINT once the first step is reported: the run ends at a step boundary (130), its
# checkpoint resumes. The run is far longer than any machine finishes before the signal
# arrives, so the stop is always what is tested (a run that ignored it would hang until the
# test's timeout: a failure).
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/i.gguf" --format gguf \
	--steps 10000000 --threads 1 >"$tmp/i.jsonl" &
pid=$!
# (no bound of its own: the process exiting ends the wait, ctest's timeout a hang)
until grep -q '"step": 1,' "$tmp/i.jsonl" 2>/dev/null; do
	kill -0 $pid 2>/dev/null || break
	sleep 0.05
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "SIGINT: exit status $rc, not 130"
last=$(grep -o '"step": [0-9]*' "$tmp/i.jsonl" | tail -1 | grep -o '[0-9]*$')
[ -n "$last" ] && [ "$last" -ge 1 ] || fail "SIGINT: no step reported"
# one more step from the checkpoint is enough to show it resumes
"$bin/molly-train" --model "$llama" "${common[@]}" --out "$tmp/i.gguf" --format gguf \
	--steps 10000000 --threads 1 --resume --stop-after $((last + 1)) >"$tmp/i2.jsonl"
[ $? -eq 130 ] || fail "resume after SIGINT"
grep -q "\"step\": $((last + 1))," "$tmp/i2.jsonl" || fail "resume did not continue at $((last + 1))"

# QLoRA: a Q8_0 base, dropout; the adapter loads on it.
"$bin/molly-train" --model "$q8" "${common[@]}" --out "$tmp/q.molly" --steps 2 --dropout 0.1 \
	--threads 2 >/dev/null || fail "train on Q8_0"
"$bin/molly-adapter" inspect "$tmp/q.molly" --base "$q8" >/dev/null || fail "inspect q.molly"

# Full mode: a GGUF model that Molly loads and runs.
"$bin/molly-train" --model "$qwen" "${common[@]}" --out "$tmp/full.gguf" --full --steps 2 \
	--threads 2 --recompute >/dev/null || fail "train full"
"$bin/molly-run" --model "$tmp/full.gguf" --prompt "Once upon a time" -n 4 --temp 0 --quiet \
	--logits-out "$tmp/full.logits" >/dev/null || fail "molly-run on the full model"
echo "tool-train: all checks passed"
