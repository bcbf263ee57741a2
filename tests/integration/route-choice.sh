#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The router's choices in a running daemon, with adapters as T0 candidates:
#  - five adapters (one per domain: cooking, law, medicine, code, finance), each carrying its
#    domain tag and the exemplars of tests/data/router/adapters.tsv in its metadata
#    (molly-adapter import --domains --exemplars), loaded at start: the daemon builds its
#    classifier from them;
#  - priors seeded in LMDB with `molly priors record` (each adapter 0.85 in its own domain);
#  - prefetch hints: one routed request brings exactly the two best ranked adapters' weights
#    into the pool (/metrics molly_adapter_resident);
#  - the 60 hand-written prompts of tests/data/router/labelled.tsv (none of them an
#    exemplar) sent over HTTP without a model: the adapter the router chose ("molly" object)
#    matches the prompt's domain in at least 90% of them;
#  - molly explain --daemon lists the candidates with their scores and why one is excluded;
#  - a request naming the base model runs on the base (no adapter chosen);
#  - with [Router] MixtureEntropy=0 every request is a mixture of the top 2 (the winner's
#    log-probabilities come with its held-back answer): the audit says
#    which of the two won and why, and the answer comes from one of them.
source "$(dirname "$0")/lib/common.sh"
need curl python3
[ -x "$MOLLY_BIN_DIR/molly-adapter" ] || skip "molly-adapter is not built"
ATTN=$MOLLY_SHARED_DIR/models/stories260K-lora-attn-r8.gguf
[ -r "$ATTN" ] || skip "the test adapter $ATTN is missing"
DATA=$MOLLY_SOURCE_DIR/tests/data/router
DOMS="cooking law medicine code finance"

mkdir -p "$T/state/adapters"
seed=0
for d in $DOMS; do
	awk -F'\t' -v d="$d" '$1 == d {print $2}' "$DATA/adapters.tsv" >"$T/$d.txt"
	# Distinct weights per domain: the registry keys residency by content, so five copies of
	# one adapter would be one resident adapter.
	seed=$((seed + 1))
	"$MOLLY_BIN_DIR/molly-mkadapter" --base "$MODEL" --rank 8 --targets q,v --seed $seed \
		--format gguf --out "$T/$d.gguf" >/dev/null || fail "making $d's adapter"
	"$MOLLY_BIN_DIR/molly-adapter" import "$T/$d.gguf" "$T/state/adapters/$d.molly" --base "$MODEL" \
		--name "$d" --domains "$d" --exemplars "$T/$d.txt" >/dev/null || fail "importing $d"
	"$MOLLY" priors record --domain "$d" --target "local:stories260K:$d" --score 0.85 \
		--state-dir "$T/state" >/dev/null || fail "seeding the prior of $d"
done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT

bus_start
HTTP_LISTEN=127.0.0.1:$PORT write_config "[Adapters]" "Directory=$T/state/adapters" \
	"Load=cooking law medicine code finance" "[Router]" "MixtureEntropy=1" \
	"[Target far]" "Tier=T3" "URL=http://127.0.0.1:9" "Quality.general=0.99"
mollyd_start

# Prefetch: before any request no adapter's weights are in the pool; one routed request
# brings in exactly the two best ranked adapters (the chosen one, and the runner-up by the
# prefetch hint), not the other three.
P="My landlord wants to keep the deposit, can I take him to small claims court?"
json=$("$MOLLY" --bus-address="$BUS_ADDR" --json explain --daemon "$P") || fail "explain: $json"
top2=$(python3 -c 'import json, sys; c = [x for x in json.loads(sys.argv[1])["route"]["candidates"] if ":" in x["name"][6:]]; c.sort(key=lambda x: -x["score"]); print(" ".join(sorted(x["name"].split(":")[2] for x in c[:2])))' "$json")
resident() { curl -s "$URL/metrics" | sed -n 's/^molly_adapter_resident{adapter="\([^"]*\)"} 1$/\1/p' | sort | tr '\n' ' ' | sed 's/ $//'; }
[ -z "$(resident)" ] || fail "adapters resident before any request: $(resident)"
code=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' \
	-d "{\"prompt\": \"$P\", \"max_tokens\": 1}")
[ "$code" = 200 ] || fail "prefetch request: HTTP $code"
[ "$(resident)" = "$top2" ] || fail "resident after one request: '$(resident)', expected the two best ranked '$top2'"
pass "prefetch hint: the runner-up adapter ($top2) came into the pool with the chosen one"

python3 - "$URL" "$DATA/labelled.tsv" <<'PY' || fail "labelled set"
import json, sys, urllib.request
url, path = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t", 1) for l in open(path, encoding="utf-8") if l[0] != "#" and "\t" in l]
right = 0
for dom, text in rows:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 1}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    j = json.load(urllib.request.urlopen(req, timeout=60))
    target = j["molly"]["target"]
    if target == "local:stories260K:" + dom:
        right += 1
    else:
        print(f"  {dom}: {text} -> {target}", file=sys.stderr)
print(f"{right}/{len(rows)} chose the domain's adapter")
assert len(rows) >= 50 and right * 10 >= len(rows) * 9, (right, len(rows))
PY
pass "labelled set through the daemon: the domain's adapter chosen in >= 90%"

out=$("$MOLLY" --bus-address="$BUS_ADDR" explain --daemon "How do I appeal a court judgment about my lease?") ||
	fail "molly explain --daemon: $out"
grep -Eq '^Domain: law' <<<"$out" || fail "explain: no domain: $out"
grep -Eq 'local:stories260K:law +T0 .* chosen' <<<"$out" || fail "explain: law adapter not chosen: $out"
grep -Eq 'far +T3 .*excluded: tier not permitted by the policy' <<<"$out" || fail "explain: T3 not excluded with its reason: $out"
grep -Eq 'local:stories260K:cooking +T0 +[0-9.]+ +0\.0000 +0\.000s +[0-9.]+' <<<"$out" || fail "explain: no scores: $out"
json=$("$MOLLY" --bus-address="$BUS_ADDR" --json explain --daemon "How do I appeal a court judgment about my lease?")
python3 -c 'import json, sys; j = json.loads(sys.argv[1]); c = j["route"]["candidates"]; assert len(c) == 7 and sum(x["chosen"] for x in c) == 1, c' "$json" ||
	fail "explain --json: $json"
pass "molly explain --daemon lists the candidates, their scores and exclusions"

code=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' \
	-d '{"model": "stories260K", "prompt": "How do I appeal a court judgment about my lease?", "max_tokens": 1}')
[ "$code" = 200 ] || fail "naming the base: HTTP $code"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["molly"]["target"] == "local:stories260K", j' "$T/body" ||
	fail "naming the base: $(cat "$T/body")"
pass "a request naming the base runs on the base"
out=$(call Inference1 Generate 'a{sv}' 2 prompt s "How do I appeal a court judgment about my lease?" max_tokens u 1) ||
	fail "Generate: $out"
grep -q '"target" s "local:stories260K:law"' <<<"$out" || fail "Generate's info lacks the target: $out"
pass "D-Bus Generate names the routed target"
mollyd_stop

# --- mixtures ---
rm -rf "$T/state/audit"
HTTP_LISTEN=127.0.0.1:$PORT write_config "[Adapters]" "Directory=$T/state/adapters" \
	"Load=cooking law medicine code finance" "[Router]" "MixtureEntropy=0" "MixtureTopK=2"
mollyd_start
code=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "Is my landlord allowed to raise the rent while I am sick in hospital?", "max_tokens": 6, "logprobs": 1}')
[ "$code" = 200 ] || fail "mixture: HTTP $code: $(cat "$T/body")"
# the answers are held back until one is chosen; the winner's log-probabilities come with it
winner=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); c = j["choices"][0]
assert c["text"] and 0 < j["molly"]["confidence"] <= 1
# (a last token cut off inside a UTF-8 character by max_tokens has no text of its own, so
# it may be missing from the tokens; seen once, when the finance adapter won)
n = j["usage"]["completion_tokens"]
assert n > 0 and n - (c["finish_reason"] == "length") <= len(c["logprobs"]["tokens"]) <= n, c
assert "".join(c["logprobs"]["tokens"]) == c["text"], c
print(j["molly"]["target"])' "$T/body") ||
	fail "mixture: $(cat "$T/body")"
mollyd_stop
"$MOLLY" audit --state-dir "$T/state" --json >"$T/audit.jsonl" || fail "molly audit"
python3 - "$T/audit.jsonl" "$winner" <<'PY' || fail "mixture audit: $(cat "$T/audit.jsonl")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
assert r["target"] == sys.argv[2] and r["tier"] == "T0", r
assert "mixture of 2: " + sys.argv[2] + " won" in r["route"], r["route"]
PY
pass "mixture of the top 2 specialists: $winner won, the audit says why"
