#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Evaluates Molly's own model after tools/train-default-model.sh and prepares the file to
# ship (docs/model.md, "Evaluation and shipping"): held-out perplexity per source, language
# and overall of the F32 model and of its q8_0 and f16 conversions, beside the unigram and
# bigram baselines, as JSON files and one Markdown table.
#
#   tools/eval-default-model.sh [--work DIR] [--bin DIR] [--model FILE] [--corpus DIR]
#
#   --work DIR    where train-default-model.sh left its results (build/molly-mini)
#   --bin DIR     where molly-perplexity and molly-quantize are (build/release/bin)
#   --model FILE  the trained F32 model (WORK/molly-mini-f32.gguf)
#   --corpus DIR  the corpus (WORK/corpus, else build/corpus): its docs.jsonl
#
# Writes WORK/eval/{f32,q8_0,f16}.json, WORK/eval/molly-mini-{q8_0,f16}.gguf and
# WORK/eval/table.md. Choosing the file to commit as models/molly-mini.gguf (at most 30 MB)
# is left to the person reading the table. MAX_DOCS=N in the environment limits the held-out
# documents (a quick trial); THREADS (2) the threads.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$root/build/molly-mini
bin=$root/build/release/bin
model=
corpus=
while [ $# -gt 0 ]; do
	case $1 in
	--work) work=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--model) model=$2; shift 2 ;;
	--corpus) corpus=$2; shift 2 ;;
	-h | --help) awk 'NR > 2 && !/^#/ { exit } NR > 2 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) echo "eval-default-model: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
model=${model:-$work/molly-mini-f32.gguf}
if [ -z "$corpus" ]; then
	corpus=$work/corpus
	[ -s "$corpus/docs.jsonl" ] || corpus=$root/build/corpus
fi
THREADS=${THREADS:-2}
limit=()
[ -n "${MAX_DOCS:-}" ] && limit=(--max-docs "$MAX_DOCS")
say() { echo "eval-default-model: $*"; }

for f in "$model" "$corpus/docs.jsonl" "$bin/molly-perplexity" "$bin/molly-quantize"; do
	[ -e "$f" ] || { say "$f is missing" >&2; exit 1; }
done
mkdir -p "$work/eval"
say "F32 model and baselines (about 5 minutes on 2 cores)"
"$bin/molly-perplexity" --model "$model" --data "$corpus/docs.jsonl" --baselines --json \
	--threads "$THREADS" "${limit[@]}" >"$work/eval/f32.json.part"
mv "$work/eval/f32.json.part" "$work/eval/f32.json"
for t in q8_0 f16; do
	"$bin/molly-quantize" "$model" "$work/eval/molly-mini-$t.gguf" --type "$t"
	say "$t model"
	"$bin/molly-perplexity" --model "$work/eval/molly-mini-$t.gguf" \
		--data "$corpus/docs.jsonl" --json --threads "$THREADS" "${limit[@]}" \
		>"$work/eval/$t.json.part"
	mv "$work/eval/$t.json.part" "$work/eval/$t.json"
done
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" - "$work/eval" <<'PY' | tee "$work/eval/table.md"
import json, os, sys
d = sys.argv[1]
runs = {t: json.load(open(os.path.join(d, t + ".json"))) for t in ("f32", "q8_0", "f16")}
groups = {t: {g["group"]: g for g in r["groups"]} for t, r in runs.items()}
sizes = {t: os.path.getsize(os.path.join(d, "molly-mini-%s.gguf" % t)) for t in ("q8_0", "f16")}
base = runs["f32"]
print("Held-out perplexity (window %d, stride %d; baselines from %s tokens of the train split, "
      "bigram discount %.4f); bits per byte in brackets. q8_0 file %.1f MB, f16 %.1f MB.\n" % (
          base["ctx"], base["stride"], format(base["train_tokens"], ","),
          base["bigram_discount"], sizes["q8_0"] / 1e6, sizes["f16"] / 1e6))
print("| group | targets | model F32 | q8_0 | f16 | unigram | bigram |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, g in groups["f32"].items():
    cell = lambda s: "%.2f (%.3f)" % (s["ppl"], s["bits_per_byte"])
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        name, format(g["tokens"], ","), cell(g["model"]), cell(groups["q8_0"][name]["model"]),
        cell(groups["f16"][name]["model"]), cell(g["unigram"]), cell(g["bigram"])))
PY
say "done: $work/eval/table.md"
