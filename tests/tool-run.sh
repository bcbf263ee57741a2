#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# molly-run end to end: the exact flags of the engine issue on the real stories260K model.
set -uo pipefail
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:?}
model=$shared/models/stories260K.gguf
ref=$shared/reference/stories260K/vis_base
[ -r "$model" ] || { echo "skip: $model not found"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
passed=0 failed=0
ok() { echo "$1 ok"; passed=$((passed + 1)); }
bad() { echo "$1 FAILED${2:+: $2}"; failed=$((failed + 1)); }

# Greedy: prompt ids, ids and text as llama.cpp's reference run.
if "$bin/molly-run" --model "$model" --prompt "$(cat "$ref/prompt_text.txt")" -n 64 --temp 0 \
	--threads 2 --logits-out "$t/logits" --ids-out "$t/ids" --prompt-ids-out "$t/pids" \
	>"$t/out" 2>"$t/err"; then
	cmp -s "$t/pids" "$ref/prompt_ids.txt" && ok prompt_ids || bad prompt_ids "$(diff "$t/pids" "$ref/prompt_ids.txt" | head)"
	cmp -s "$t/ids" "$ref/gen_ids.txt" && ok greedy_ids || bad greedy_ids "$(diff "$t/ids" "$ref/gen_ids.txt" | head -5)"
	[ "$(wc -l <"$t/logits")" -eq 512 ] && awk 'NF != 2 || $1 != NR - 1 { exit 1 }' "$t/logits" \
		&& ok logits_format || bad logits_format
	# The text is the prompt and the continuation, as the reference's gen_text.txt.
	if [ "$(sed 's/^ //' "$ref/gen_text.txt")" = "$(cat "$t/out")" ]; then ok greedy_text
	else bad greedy_text "$(diff <(sed 's/^ //' "$ref/gen_text.txt") "$t/out" | head -5)"; fi
else
	bad greedy_run "$(cat "$t/err")"
fi

# --lora with llama.cpp's GGUF LoRA files: the reference's greedy ids, scale given after ':'.
for c in vis_lora_attn_r8:stories260K-lora-attn-r8.gguf vis_lora_all_r8_s05:stories260K-lora-all-r8.gguf:0.5; do
	IFS=: read -r dir file scale <<<"$c"
	r=$shared/reference/stories260K/$dir
	if "$bin/molly-run" --model "$model" --lora "$shared/models/$file${scale:+:$scale}" \
		--prompt "$(cat "$r/prompt_text.txt")" -n 64 --temp 0 --ids-out "$t/lids" --quiet 2>"$t/err"; then
		cmp -s "$t/lids" "$r/gen_ids.txt" && ok "lora_$dir" || bad "lora_$dir" "$(diff "$t/lids" "$r/gen_ids.txt" | head -3)"
	else
		bad "lora_$dir" "$(cat "$t/err")"
	fi
done

# Sampling: the same seed and thread count give the same output; another seed differs.
run_sampled() { "$bin/molly-run" --model "$model" --prompt "Lily wanted to" -n 48 --temp 0.9 \
	--top-k 40 --top-p 0.95 --min-p 0.02 --repeat-penalty 1.1 --seed "$1" --threads "$2" \
	--ids-out "$3" >/dev/null 2>&1; }
run_sampled 7 2 "$t/s1" && run_sampled 7 2 "$t/s2" && run_sampled 8 2 "$t/s3" && run_sampled 7 1 "$t/s4"
cmp -s "$t/s1" "$t/s2" && ok seeded_repeatable || bad seeded_repeatable
cmp -s "$t/s1" "$t/s3" && bad seed_changes_output "seeds 7 and 8 gave the same 48 ids" || ok seed_changes_output
cmp -s "$t/s1" "$t/s4" && ok threads_do_not_change_output || bad threads_do_not_change_output

# Chat on a model without a template uses chatml; an unknown template name is an error.
"$bin/molly-run" --model "$model" --prompt "hi" --chat -n 4 --temp 0 >/dev/null 2>"$t/err" \
	&& ok chat_default_template || bad chat_default_template "$(cat "$t/err")"
if "$bin/molly-run" --model "$model" --prompt "hi" --chat --chat-template nosuch -n 4 >/dev/null 2>"$t/err"; then
	bad chat_unknown_template "accepted"
else
	grep -q "nosuch" "$t/err" && ok chat_unknown_template || bad chat_unknown_template "$(cat "$t/err")"
fi

# Bad input: clear errors, non-zero exit.
expect_fail() { # name, grep pattern, args...
	local name=$1 pat=$2
	shift 2
	if "$bin/molly-run" "$@" >/dev/null 2>"$t/err"; then bad "$name" "exit 0"
	elif grep -qi -- "$pat" "$t/err"; then ok "$name"
	else bad "$name" "$(cat "$t/err")"; fi
}
expect_fail missing_model "No such file" --model "$t/none.gguf" --prompt x
head -c 1000 "$model" >"$t/trunc.gguf"
expect_fail truncated_model "trunc.gguf" --model "$t/trunc.gguf" --prompt x
expect_fail bad_temp "--temp" --model "$model" --prompt x --temp abc
expect_fail no_prompt "required" --model "$model"
long=$(printf 'Once upon a time %.0s' $(seq 1 400))
expect_fail prompt_over_context "context" --model "$model" --prompt "$long"
expect_fail lora_missing "nosuch" --model "$model" --prompt x --lora "$t/nosuch.gguf"
expect_fail lora_wrong_base "base" --model "$shared/models/tiny/tiny-llama-f32.gguf" --prompt x \
	--lora "$shared/models/stories260K-lora-all-r8.gguf"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
