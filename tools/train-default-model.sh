#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes Molly's own small model from text Debian ships: corpus, tokenizer, initial weights,
# training (docs/model.md). Resumable: every stage leaves its result in WORK and is skipped
# when that result is there; training continues from molly-train's last checkpoint.
#
#   tools/train-default-model.sh [--work DIR] [--bin DIR] [--out FILE] [--prepare]
#
#   --work DIR  where the stages keep their results (build/molly-mini)
#   --bin DIR   where molly-bpe-train, molly-mkmodel and molly-train are (build/release/bin)
#   --out FILE  the trained model (WORK/molly-mini-f32.gguf)
#   --prepare   stop before training (corpus, tokenizer, initial model: no molly-train needed)
#
# The recipe (change it here, and docs/model.md with it):
#   corpus     tools/build-corpus.sh: 26.2 MB of train text in 5,233 documents (en 18.6 MB,
#              it 3.5 MB, es 4.1 MB), 8.9M tokens; 5% held out by hash
#   tokenizer  byte-level BPE, 4096 tokens (256 bytes, 3836 merges, 4 special), llama-bpe
#              pre-tokenizer: 2.90 bytes per token on the held-out text
#   model      llama, 320 hidden, 8 layers, 8 heads (MHA, head size 40), SwiGLU 864, tied
#              embeddings, context 256: 11.2M parameters (molly-mkmodel --preset mini)
#   training   2400 steps of 8 x 256 tokens (4.9M tokens, 0.55 of an epoch; long documents as
#              windows: --split-long), AdamW lr 6e-4, 100 warmup steps, seed 1234, 2 threads
#   shipped    molly-quantize --type q8_0 of the result: models/molly-mini.gguf
# Wall time on 2 cores (measured, see docs/model.md): corpus, tokenizer and initial model
# ~2 min, training 56 min (~1.3 s a step). Set STEPS (and the rest below) in the environment
# to change the schedule; a calibration run (steps 5 to 15 timed) prints the ETA first.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$root/build/molly-mini
bin=$root/build/release/bin
out=
prepare=false
while [ $# -gt 0 ]; do
	case $1 in
	--work) work=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--prepare) prepare=true; shift ;;
	-h | --help) awk 'NR > 2 && !/^#/ { exit } NR > 2 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) echo "train-default-model: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
out=${out:-$work/molly-mini-f32.gguf}

VOCAB_SIZE=${VOCAB_SIZE:-4096}
STEPS=${STEPS:-2400}
LR=${LR:-6e-4}
WARMUP=${WARMUP:-100}
BATCH=${BATCH:-8}
SEQ_LEN=${SEQ_LEN:-256}
SEED=${SEED:-1234}
THREADS=${THREADS:-2}

say() { echo "train-default-model: $*"; }

# molly-train comes with the trainer (issue 19); without it nothing else is worth doing
if ! $prepare && [ ! -x "$bin/molly-train" ]; then
	say "$bin/molly-train is missing: build it (cmake --build build/release --target" \
		"molly-train) once the trainer is in the tree, then run this again" >&2
	exit 3
fi
for t in molly-bpe-train molly-mkmodel; do
	[ -x "$bin/$t" ] || { say "$bin/$t is missing: cmake --build build/release" >&2; exit 1; }
done
mkdir -p "$work"

# 1. corpus (tools/build-corpus.sh skips nothing itself: the stamp is its last file)
if [ ! -s "$work/corpus/train.jsonl" ] || [ ! -e "$work/corpus/.done" ]; then
	say "building the corpus"
	"$here/build-corpus.sh" "$work/corpus"
	touch "$work/corpus/.done"
fi

# 2. tokenizer, on the train split only; the held-out figures go next to it
if [ ! -s "$work/tokenizer.gguf" ]; then
	say "training the tokenizer ($VOCAB_SIZE tokens)"
	"$bin/molly-bpe-train" --data "$work/corpus/docs.jsonl" --split train \
		--vocab-size "$VOCAB_SIZE" --out "$work/tokenizer.gguf.part" \
		--eval "$work/corpus/docs.jsonl" --eval-split heldout >"$work/tokenizer-heldout.tsv"
	mv "$work/tokenizer.gguf.part" "$work/tokenizer.gguf"
	cat "$work/tokenizer-heldout.tsv"
fi

# 3. the initial random model of the chosen shape around that tokenizer
if [ ! -s "$work/init.gguf" ]; then
	say "writing the initial model"
	"$bin/molly-mkmodel" --preset mini --vocab "$work/tokenizer.gguf" --seed "$SEED" \
		--name molly-mini --out "$work/init.gguf"
fi

if $prepare; then
	say "prepared: $work/corpus, $work/tokenizer.gguf, $work/init.gguf"
	exit 0
fi
if [ -s "$out" ]; then
	say "$out is there already (remove it to train again)"
	exit 0
fi

# 4. training: a calibration run first (15 steps in a scratch directory) for the ETA: the time
# per step is taken between steps 5 and 15, after start-up (tokenizing the corpus takes longer
# than a step) and the first steps' page faults
train_args=(--model "$work/init.gguf" --data "$work/corpus/train.jsonl" --full --split-long
	--lr "$LR" --warmup "$WARMUP" --batch "$BATCH" --seq-len "$SEQ_LEN" --seed "$SEED"
	--threads "$THREADS")
if [ ! -e "$work/calibration.txt" ]; then
	rm -rf "$work/calibration"
	mkdir -p "$work/calibration"
	"$bin/molly-train" "${train_args[@]}" --steps 15 --json --checkpoint-every 0 \
		--out "$work/calibration/model.gguf" 2>"$work/calibration/log" |
		while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$work/calibration/steps" ||
		{ say "calibration run failed:" >&2; tail "$work/calibration/log" >&2; exit 1; }
	awk -v s="$STEPS" '/"step": *5,/ { a = $1 } /"step": *15,/ { b = $1 }
		END { if (!a || !b) { print "calibration: no step times"; exit 1 }
		per = (b - a) / 10
		printf "%.2f s per step (steps 5 to 15): %d steps take about %.0f min", per, s, per * s / 60
		if (per * s > 105 * 60) printf "; over the budget: STEPS=%d fits 105 min", 105 * 60 / per
		printf "\n" }' "$work/calibration/steps" | tee "$work/calibration.txt"
	rm -rf "$work/calibration"
fi
say "$(cat "$work/calibration.txt")"

# a run that was stopped (SIGINT, a crash) continues from molly-train's last checkpoint in
# $work/train (issue 19: --resume continues bit-identically)
resume=()
[ -e "$work/train/.started" ] && resume=(--resume)
mkdir -p "$work/train"
touch "$work/train/.started"
say "training: $STEPS steps of $BATCH x $SEQ_LEN tokens${resume:+ (resuming)}"
"$bin/molly-train" "${train_args[@]}" --steps "$STEPS" --out "$work/train/model.gguf" \
	"${resume[@]}"
cp "$work/train/model.gguf" "$out.part"
mv "$out.part" "$out"
say "done: $out"
