#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# molly-train-sensitive: training is deterministic, so re-running it on the committed corpus
# reproduces the committed built-in model (daemon/policy/sensitive-model.c) byte for byte,
# and the generator reproduces the committed generated corpus; `molly explain` classes the
# issue's examples from the build tree with no configuration.
set -uo pipefail
bin=${MOLLY_BIN_DIR:?}
src=${MOLLY_SOURCE_DIR:?}
train=$bin/molly-train-sensitive
[ -x "$train" ] || { echo "skipped: $train is not built"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
passed=0 failed=0
check() { if eval "$2"; then echo "$1 ok"; passed=$((passed + 1)); else echo "$1 FAILED"; failed=$((failed + 1)); fi; }

c=$src/tests/data/sensitive-corpus
(cd "$src" && "$train" -o "$t/model.c" tests/data/sensitive-corpus/generated.tsv \
	tests/data/sensitive-corpus/handwritten-train.tsv tests/data/sensitive-corpus/blind-ad-train.tsv \
	tests/data/sensitive-corpus/handwritten-train-2.tsv tests/data/sensitive-corpus/public-g-train.tsv \
	tests/data/sensitive-corpus/blind-j-train.tsv tests/data/sensitive-corpus/blind-e-train.tsv \
	tests/data/sensitive-corpus/blind-f-train.tsv tests/data/sensitive-corpus/public-l-train.tsv \
	tests/data/sensitive-corpus/public-n-train.tsv tests/data/sensitive-corpus/blind-qr-train.tsv tests/data/sensitive-corpus/blind-p2s2-train.tsv tests/data/sensitive-corpus/blind-tu-train.tsv tests/data/sensitive-corpus/blind-vw-train.tsv \
	2>/dev/null)
check model_reproduced 'cmp -s "$t/model.c" "$src/daemon/policy/sensitive-model.c"'
if [ -x /usr/bin/python3 ]; then
	/usr/bin/python3 "$src/tools/gen-sensitive-corpus.py" >"$t/generated.tsv"
	check corpus_reproduced 'cmp -s "$t/generated.tsv" "$c/generated.tsv"'
fi
if [ -x "$bin/molly" ]; then
	out=$(cd "$t" && "$bin/molly" explain "I am HIV positive and need advice on medication" 2>&1)
	check explain_personal 'grep -q "Class: personal" <<<"$out" && grep -q health <<<"$out"'
	out=$(cd "$t" && "$bin/molly" explain "What are the symptoms of HIV?" 2>&1)
	check explain_public 'grep -q "Class: public" <<<"$out"'
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
