#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-bpe: molly-bpe-train end to end: the same input gives the same file, the file loads in
# vocab.c (molly-tokenize) and in a model made by molly-mkmodel --preset mini --vocab, held-out
# text in English, Italian and Spanish round-trips; on the real corpus too when it is built
# (MOLLY_CORPUS_DIR, else build/corpus). And tools/train-default-model.sh says clearly when
# molly-train is missing.
set -u
bin=${MOLLY_BIN_DIR:?}
src=${MOLLY_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# a small corpus in the docs.jsonl form (text, lang, split), written here
"$py" - "$tmp/docs.jsonl" <<'PY'
import json, sys
train = {
    "en": ["The cat sleeps on the sofa while the city wakes up.",
           "Use the ls command to list the files of a directory; see the manual page.",
           "A dictionary gives the meaning of words, and a manual the use of commands."],
    "it": ["Il gatto dorme sul divano mentre la città si sveglia.",
           "Usa il comando ls per elencare i file di una directory; vedi la pagina di manuale.",
           "Un dizionario dà il significato delle parole, e un manuale l'uso dei comandi."],
    "es": ["El gato duerme en el sofá mientras la ciudad se despierta.",
           "Usa la orden ls para listar los ficheros de un directorio; mira la página de manual.",
           "Un diccionario da el significado de las palabras, y un manual el uso de las órdenes."],
}
heldout = {
    "en": "Which command lists the files? The manual says: ls -la /tmp (all of them).",
    "it": "Perché il gatto non si sveglia? È già mezzogiorno, e c'è il sole sulla città.",
    "es": "¿Por qué el gato no se despierta? ¡Ya es mediodía y hace sol en la ciudad!",
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for k in range(20):
        for lang, texts in sorted(train.items()):
            for t in texts:
                f.write(json.dumps({"text": t, "lang": lang, "split": "train"},
                                   ensure_ascii=False) + "\n")
    for lang, t in sorted(heldout.items()):
        f.write(json.dumps({"text": t, "lang": lang, "split": "heldout"},
                           ensure_ascii=False) + "\n")
PY

train() {
	"$bin/molly-bpe-train" --data "$tmp/docs.jsonl" --split train --vocab-size 400 "$@"
}
train --out "$tmp/a.gguf" 2>"$tmp/a.err" || fail "molly-bpe-train: $(cat "$tmp/a.err")"
grep -q '2760 words (94 distinct), 140 merges' "$tmp/a.err" || fail "summary: $(cat "$tmp/a.err")"
train --out "$tmp/b.gguf" --eval "$tmp/docs.jsonl" >"$tmp/eval.tsv" 2>/dev/null ||
	fail "molly-bpe-train --eval (rc $?): $(cat "$tmp/eval.tsv")"
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "two runs on the same text differ"
for lang in en it es all; do
	grep -qP "^$lang\t[1-9][0-9]*\t[0-9]+\t[0-9]+\t[0-9.]+\t0$" "$tmp/eval.tsv" ||
		fail "held-out $lang: $(cat "$tmp/eval.tsv")"
done

# bad input is named by file and line
printf '{"text": "ok"}\n{"txt": 1}\n' >"$tmp/bad.jsonl"
"$bin/molly-bpe-train" --data "$tmp/bad.jsonl" --out "$tmp/c.gguf" 2>"$tmp/bad.err" &&
	fail "a line without text was accepted"
grep -q 'bad.jsonl:2: not an object with a "text" string' "$tmp/bad.err" ||
	fail "error message: $(cat "$tmp/bad.err")"
"$bin/molly-bpe-train" --data "$tmp/docs.jsonl" --pre nope --out "$tmp/c.gguf" 2>/dev/null
[ $? -eq 2 ] || fail "an unknown pre-tokenizer is a usage error"

# the vocabulary in a model: tokenizer keys copied, same ids from both files
"$bin/molly-mkmodel" --preset mini --layers 1 --vocab "$tmp/a.gguf" --out "$tmp/m.gguf" \
	>"$tmp/mk.out" || fail "molly-mkmodel --preset mini --vocab"
grep -q 'vocab 400, tied' "$tmp/mk.out" || fail "mkmodel summary: $(cat "$tmp/mk.out")"
text="Perché il gatto? ¿Por qué el gato? Why the cat?"
ids_v=$("$bin/molly-tokenize" --model "$tmp/a.gguf" "$text") || fail "molly-tokenize (vocab)"
ids_m=$("$bin/molly-tokenize" --model "$tmp/m.gguf" "$text") || fail "molly-tokenize (model)"
[ "$ids_v" = "$ids_m" ] || fail "ids differ: '$ids_v' vs '$ids_m'"
[ "${ids_v%% *}" = 396 ] || fail "no BOS (id 396) first: $ids_v"
chat_ids=$("$bin/molly-tokenize" --model "$tmp/m.gguf" --no-bos --parse-special \
	"<|im_start|>user<|im_end|>") || fail "molly-tokenize --parse-special"
[ "${chat_ids%% *}" = 398 ] && [ "${chat_ids##* }" = 399 ] || fail "ChatML ids: $chat_ids"

# the real corpus, when built: every held-out document of the three languages round-trips
corpus=${MOLLY_CORPUS_DIR:-$src/build/corpus}
if [ -s "$corpus/docs.jsonl" ]; then
	"$bin/molly-bpe-train" --data "$corpus/docs.jsonl" --split train --vocab-size 4096 \
		--out "$tmp/corpus.gguf" --eval "$corpus/docs.jsonl" >"$tmp/corpus.tsv" \
		2>/dev/null || fail "corpus round trip (rc $?): $(cat "$tmp/corpus.tsv")"
	for lang in en it es; do
		grep -qP "^$lang\t[1-9][0-9]*\t.*\t0$" "$tmp/corpus.tsv" ||
			fail "corpus held-out $lang: $(cat "$tmp/corpus.tsv")"
	done
	echo "corpus held-out round trip:"
	cat "$tmp/corpus.tsv"
else
	echo "note: no corpus in $corpus (tools/build-corpus.sh): its round trip was not run"
fi

# the training script without molly-train: a clear message, exit 3, nothing built
mkdir "$tmp/nobin"
"$src/tools/train-default-model.sh" --bin "$tmp/nobin" --work "$tmp/work" 2>"$tmp/tdm.err"
[ $? -eq 3 ] || fail "train-default-model.sh without molly-train: rc is not 3"
grep -q 'molly-train is missing' "$tmp/tdm.err" || fail "message: $(cat "$tmp/tdm.err")"
[ ! -e "$tmp/work" ] || fail "train-default-model.sh built something without molly-train"
echo ok
