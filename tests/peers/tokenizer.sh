#!/bin/bash
# SPDX-License-Identifier: MIT
# peers-tokenizer: Molly's trained BPE tokenizer gives the same ids in llama.cpp.
#
# Trains the tokenizer (molly-bpe-train, 4096 tokens) on the train split of the corpus, puts it
# in a tiny random model (molly-mkmodel --vocab), starts the pinned llama.cpp's llama-server on
# it, and checks on every held-out document (English, Italian and Spanish) that
#   - llama-server's /tokenize gives the ids molly-tokenize gives (BOS added, as both default);
#   - llama-server's /detokenize of those ids gives back the document's exact text;
# and that a ChatML string with parse_special gives the same ids on both sides.
#
# The corpus: $MOLLY_CORPUS_DIR, else build/corpus (tools/build-corpus.sh), else it is built
# here when its Debian packages are installed (about 5 minutes). Skips (77) without them or
# without ../shared/peers. Label peers: tools/run-tests.sh --peers.
set -u
bin=${MOLLY_BIN_DIR:?}
src=${MOLLY_SOURCE_DIR:?}
shared=${MOLLY_SHARED_DIR:-$src/../shared}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

[ -x "$shared/peers/llama-cpp.sh" ] || skip "no $shared/peers/llama-cpp.sh (the pinned llama.cpp)"
corpus=${MOLLY_CORPUS_DIR:-$src/build/corpus}
if [ ! -s "$corpus/docs.jsonl" ]; then
	missing=$(MOLLY_DEPS_LIST=corpus "$src/tools/install-deps.sh" | while read -r p; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			echo "$p"
	done)
	[ -z "$missing" ] || skip "no corpus in $corpus and its packages are missing" \
		"(MOLLY_DEPS=corpus tools/install-deps.sh):" $missing
	corpus=$tmp/corpus
	"$src/tools/build-corpus.sh" "$corpus" >"$tmp/corpus.log" 2>&1 ||
		fail "build-corpus.sh: $(tail -5 "$tmp/corpus.log")"
fi

llama=$("$shared/peers/llama-cpp.sh") || fail "building llama.cpp failed"
[ -x "$llama/llama-server" ] || fail "no llama-server in $llama"

"$bin/molly-bpe-train" --data "$corpus/docs.jsonl" --split train --vocab-size 4096 \
	--out "$tmp/tok.gguf" >"$tmp/train.out" 2>&1 || fail "molly-bpe-train: $(cat "$tmp/train.out")"
"$bin/molly-mkmodel" --vocab "$tmp/tok.gguf" --hidden 64 --layers 1 --heads 2 --kv-heads 2 \
	--ffn 128 --context 512 --tied --out "$tmp/m.gguf" >/dev/null || fail "molly-mkmodel --vocab"

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$llama/llama-server" -m "$tmp/m.gguf" --host 127.0.0.1 --port "$port" -c 512 -t 1 \
	>"$tmp/server.log" 2>&1 &
server_pid=$!

"$py" - "$bin/molly-tokenize" "$tmp/m.gguf" "$corpus/docs.jsonl" "$port" "$server_pid" <<'PY'
import json, os, subprocess, sys, time, urllib.request

tokenize, model, docs, port, pid = sys.argv[1:6]
base = "http://127.0.0.1:%s" % port


def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


# one generous deadline for the server to load the model; fail at once if it died
deadline = time.monotonic() + float(os.environ.get("MOLLY_TEST_WAIT_S", "300"))
while True:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    if not os.path.exists("/proc/%s" % pid):
        sys.exit("FAIL: llama-server exited while loading")
    if time.monotonic() > deadline:
        sys.exit("FAIL: llama-server not healthy in time")
    time.sleep(0.2)


def molly(text, *flags):
    out = subprocess.run([tokenize, "--model", model, *flags, "--", text], check=True,
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


per_lang, bad = {}, 0
for line in open(docs, encoding="utf-8"):
    d = json.loads(line)
    if d["split"] != "heldout":
        continue
    ids_m = molly(d["text"])
    ids_l = post("/tokenize", {"content": d["text"], "add_special": True,
                               "parse_special": False})["tokens"]
    back = post("/detokenize", {"tokens": ids_m[1:]})["content"]
    s = per_lang.setdefault(d["lang"], [0, 0, 0])
    s[0] += 1
    s[1] += len(ids_m)
    if ids_m != ids_l or back != d["text"]:
        bad += 1
        s[2] += 1
        if bad <= 3:
            first = next((i for i, (a, b) in enumerate(zip(ids_m, ids_l)) if a != b),
                         min(len(ids_m), len(ids_l)))
            print("MISMATCH %s: ids differ at %d (molly %s, llama.cpp %s); detokenized "
                  "back %s" % (d["id"], first, ids_m[first:first + 5], ids_l[first:first + 5],
                               "equal" if back == d["text"] else "different"))
for lang in sorted(per_lang):
    print("%s: %d held-out documents, %d tokens, %d mismatches" % ((lang,) + tuple(per_lang[lang])))

chat = "<|im_start|>user\nCiao, ¿qué tal? How are you?<|im_end|>\n<|im_start|>assistant\n"
ids_m = molly(chat, "--parse-special")
ids_l = post("/tokenize", {"content": chat, "add_special": True, "parse_special": True})["tokens"]
if ids_m != ids_l:
    print("MISMATCH chat: molly %s, llama.cpp %s" % (ids_m, ids_l))
    bad += 1
if sorted(per_lang) != ["en", "es", "it"]:
    sys.exit("FAIL: held-out documents in %s, not en, es and it" % sorted(per_lang))
sys.exit("FAIL: %d mismatches" % bad if bad else 0)
PY
rc=$?
[ $rc -eq 0 ] || { tail -5 "$tmp/server.log" >&2; fail "llama.cpp and Molly disagree (rc $rc)"; }
echo "ok: llama.cpp's ids equal Molly's on every held-out document"
