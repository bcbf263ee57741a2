#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-perplexity: molly-perplexity end to end, on a molly-mkmodel model (no ../shared needed).
#   - the perplexity of a small text equals exp(mean NLL) computed in float64 from the logits
#     molly-run gives at each prefix (an independent path: one model_decode per prefix);
#   - a model whose logits are all 0 (output_norm zeroed) has perplexity = vocabulary size;
#   - groups: per source and language sums add up to "all"; --stride = --ctx (chunks) and a
#     small sliding window run; the unigram/bigram baselines equal a Python recomputation
#     from the formulas in daemon/engine/ngram.h on the same token ids;
#   - tools/eval-default-model.sh runs on it and writes its table.
set -u
bin=${MOLLY_BIN_DIR:?}
src=${MOLLY_SOURCE_DIR:?}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export PYTHONPATH=$src/tests

"$bin/molly-mkmodel" --hidden 64 --layers 2 --heads 2 --kv-heads 2 --ffn 128 --vocab-size 300 \
	--context 128 --seed 11 --out "$tmp/m.gguf" >/dev/null || fail "molly-mkmodel"
text="the cat sat"
printf '{"source":"toy","lang":"en","split":"heldout","text":"%s"}\n' "$text" >"$tmp/one.jsonl"

# ---- exp(mean NLL) by hand, from molly-run's logits at every character prefix ----
"$bin/molly-run" --model "$tmp/m.gguf" --prompt "$text" -n 0 --quiet \
	--prompt-ids-out "$tmp/ids-full.txt" 2>/dev/null || fail "molly-run"
i=0
for ((c = 0; c <= ${#text}; c++)); do
	prefix=${text:0:c}
	"$bin/molly-run" --model "$tmp/m.gguf" --prompt "$prefix" -n 0 --quiet \
		--prompt-ids-out "$tmp/ids-$i.txt" --logits-out "$tmp/logits-$i.txt" 2>/dev/null ||
		fail "molly-run '$prefix'"
	i=$((i + 1))
done
"$bin/molly-perplexity" --model "$tmp/m.gguf" --data "$tmp/one.jsonl" --json \
	>"$tmp/one.json" || fail "molly-perplexity"
"$py" - "$tmp" "$i" <<'PY' || exit 1
import json, math, sys
tmp, n = sys.argv[1], int(sys.argv[2])
full = [int(x) for x in open(tmp + "/ids-full.txt").read().split()]
nll = {}
for k in range(n):
    ids = [int(x) for x in open("%s/ids-%d.txt" % (tmp, k)).read().split()]
    if ids != full[:len(ids)]:
        continue  # a prefix that cuts a token: tokenized differently, not used
    z = [float(l.split()[1]) for l in open("%s/logits-%d.txt" % (tmp, k))]
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    if len(ids) < len(full):
        nll[len(ids)] = lse - z[full[len(ids)]]
# every target needs a character prefix that ends at its token boundary
assert sorted(nll) == list(range(1, len(full))), (sorted(nll), len(full))
want = math.exp(sum(nll.values()) / len(nll))
got = json.load(open(tmp + "/one.json"))["groups"][0]
assert got["group"] == "all" and got["tokens"] == len(full) - 1, got
print("  perplexity %.9g, by hand %.9g (%d tokens)" % (got["model"]["ppl"], want, len(nll)))
assert abs(got["model"]["ppl"] - want) <= 1e-5 * want, "perplexity differs"
PY

# ---- all-zero logits: perplexity = the vocabulary size, in every group ----
cp "$tmp/m.gguf" "$tmp/zero.gguf"
"$py" -c 'import sys, gguf_read; gguf_read.zero_tensor(sys.argv[1], "output_norm.weight")' \
	"$tmp/zero.gguf" || fail "zeroing output_norm"
cat >"$tmp/docs.jsonl" <<'DOCS'
{"source":"a","lang":"en","split":"train","text":"the cat sat on the mat"}
{"source":"a","lang":"en","split":"train","text":"the dog sat on the cat"}
{"source":"b","lang":"it","split":"train","text":"il gatto e il cane"}
{"source":"a","lang":"en","split":"heldout","text":"the cat and the dog"}
{"source":"b","lang":"it","split":"heldout","text":"il cane e il gatto sat"}
{"source":"c","lang":"it","split":"heldout","text":"x"}
DOCS
"$bin/molly-perplexity" --model "$tmp/zero.gguf" --data "$tmp/docs.jsonl" --split held-out \
	--json >"$tmp/zero.json" || fail "molly-perplexity zero"
"$bin/molly-perplexity" --model "$tmp/m.gguf" --data "$tmp/docs.jsonl" --baselines --json \
	>"$tmp/full.json" || fail "molly-perplexity --baselines"
"$bin/molly-perplexity" --model "$tmp/m.gguf" --data "$tmp/docs.jsonl" --ctx 4 --stride 4 \
	--json >"$tmp/chunks.json" || fail "molly-perplexity chunks"
"$bin/molly-perplexity" --model "$tmp/m.gguf" --data "$tmp/docs.jsonl" --ctx 6 --stride 2 \
	>"$tmp/slide.txt" || fail "molly-perplexity sliding"
grep -q 'window 6, stride 2 (sliding)' "$tmp/slide.txt" || fail "text output: $(cat "$tmp/slide.txt")"
for d in train heldout; do
	: >"$tmp/ids-$d.txt"
	"$py" -c 'import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["split"] == sys.argv[2]: print(o["text"])' "$tmp/docs.jsonl" $d | while IFS= read -r t; do
		"$bin/molly-run" --model "$tmp/m.gguf" --prompt "$t" -n 0 --quiet \
			--prompt-ids-out "$tmp/x.txt" 2>/dev/null || exit 1
		tr '\n' ' ' <"$tmp/x.txt" >>"$tmp/ids-$d.txt"
		echo >>"$tmp/ids-$d.txt"
	done || fail "molly-run ids"
done
"$py" - "$tmp" <<'PY' || exit 1
import json, math, sys
from collections import Counter
tmp = sys.argv[1]
V = 300
zero = {g["group"]: g for g in json.load(open(tmp + "/zero.json"))["groups"]}
for name, g in zero.items():
    if g["tokens"]:
        assert abs(g["model"]["ppl"] - V) < 1e-9 * V, (name, g)
print("  all-zero logits: perplexity %.12g in every group (vocabulary %d)" % (
    zero["all"]["model"]["ppl"], V))
full = json.load(open(tmp + "/full.json"))
groups = {g["group"]: g for g in full["groups"]}
assert sorted(groups) == ["all", "lang=en", "lang=it", "source=a", "source=b", "source=c"]
assert groups["source=c"]["docs"] == 1 and groups["all"]["docs"] == 3
for s in ("model", "unigram", "bigram"):
    for kind in ("lang=", "source="):
        parts = [g for n, g in groups.items() if n.startswith(kind)]
        assert abs(sum(g[s]["nll"] for g in parts) - groups["all"][s]["nll"]) < 1e-9
        assert sum(g["tokens"] for g in parts) == groups["all"]["tokens"]
chunks = {g["group"]: g for g in json.load(open(tmp + "/chunks.json"))["groups"]}
assert chunks["all"]["tokens"] == groups["all"]["tokens"]
# the baselines from ngram.h's formulas, on molly-run's ids
train = [[int(x) for x in l.split()] for l in open(tmp + "/ids-train.txt")]
held = [[int(x) for x in l.split()] for l in open(tmp + "/ids-heldout.txt")]
uni, pair = Counter(), Counter()
for d in train:
    for v, w in zip(d, d[1:]):
        uni[w] += 1
        pair[v, w] += 1
N = sum(uni.values())
n1 = sum(1 for c in pair.values() if c == 1)
n2 = sum(1 for c in pair.values() if c == 2)
D = n1 / (n1 + 2 * n2)
cv, types, cont = Counter(), Counter(), Counter()
for (v, w), c in pair.items():
    cv[v] += c
    types[v] += 1
    cont[w] += 1
def pkn(v, w):
    pc = (cont[w] + 1) / (len(pair) + V)
    if not cv[v]:
        return pc
    return max(pair[v, w] - D, 0) / cv[v] + D * types[v] / cv[v] * pc
nu = -sum(math.log((uni[w] + 1) / (N + V)) for d in held for w in d[1:])
nb = -sum(math.log(pkn(v, w)) for d in held for v, w in zip(d, d[1:]))
a = groups["all"]
assert full["train_tokens"] == N and abs(full["bigram_discount"] - D) < 1e-12
assert a["tokens"] == sum(len(d) - 1 for d in held)
assert abs(a["unigram"]["nll"] - nu) < 1e-9 and abs(a["bigram"]["nll"] - nb) < 1e-9, (a, nu, nb)
print("  baselines: unigram ppl %.6g, bigram ppl %.6g (D %.4f) as recomputed; model %.6g" % (
    a["unigram"]["ppl"], a["bigram"]["ppl"], D, a["model"]["ppl"]))
PY

# ---- tools/eval-default-model.sh on the toy corpus: three runs, one table ----
mkdir -p "$tmp/corpus" "$tmp/work"
cp "$tmp/docs.jsonl" "$tmp/corpus/docs.jsonl"
"$src/tools/eval-default-model.sh" --work "$tmp/work" --bin "$bin" --model "$tmp/m.gguf" \
	--corpus "$tmp/corpus" >"$tmp/eval.out" 2>&1 || fail "eval-default-model.sh: $(tail -5 "$tmp/eval.out")"
grep -q '^| all | 36 | [0-9.]* (' "$tmp/work/eval/table.md" ||
	fail "eval table: $(cat "$tmp/work/eval/table.md")"
[ "$(grep -c '^| ' "$tmp/work/eval/table.md")" = 8 ] || fail "eval table rows"
echo "tool-perplexity: ok"
