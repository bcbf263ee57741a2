#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The sovereignty policy end to end through the daemon: ROUTE_POLICY_N (default 10,000)
# generated requests (tools/gen-policy-corpus.py --requests: every detector kind and secret
# assignments planted, hard negatives as the public third) sent by 8 concurrent clients, half
# to each of two daemons, against fake OpenAI-compatible targets on 127.0.0.1 that record every
# byte they receive (lib/fake-openai.py):
#  A. default tiers for personal (T0,T1) and secret (T0), public may go to T2/T3: T2/T3 receive
#     exactly the public requests; no planted value and no request marker of a personal or
#     secret request appears in their byte logs;
#  B. personal may go to T3 (AllowExternal=yes, PersonalTiers=T3), redacted: T3's byte log holds
#     none of the planted values (raw or JSON-escaped), T3 echoes the redacted text back in
#     4-byte SSE chunks (placeholders split across chunks) and every answer the client gets is
#     exactly "ECHO:" + its original text (restored); secret requests stay on T0.
# Every request must be answered (HTTP 200).
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"

# A sanitizer build (the dev preset) is 20-50 times slower: it sends 400 unless told
# otherwise, the release build the full 10,000 (about 2 minutes on 2 cores).
# (ldd's whole output is read first: `ldd | grep -q` under pipefail fails whenever grep's early
# exit kills ldd with SIGPIPE, and a dev build would then send all 10,000.)
libs=$(ldd "$HT_MOLLYD" 2>/dev/null || true)
if [ -z "${ROUTE_POLICY_N:-}" ] && [[ "$libs" == *libasan* ]]; then
	ROUTE_POLICY_N=400
	echo "sanitizer build: $ROUTE_POLICY_N requests (set ROUTE_POLICY_N for more)"
fi
N=${ROUTE_POLICY_N:-10000}
NA=$((N / 2))
NB=$((N - NA))
python3 "$HT_SRC/tools/gen-policy-corpus.py" --requests "$N" 4242 >"$HT_TMP/requests.jsonl" ||
	ht_fail "generating the requests"

# drive FILE FIRST COUNT OUT: sends lines [FIRST, FIRST+COUNT) of the requests, 8 at a time,
# alternating completions and chat; writes one JSON line per request to OUT.
drive() {
	python3 - "$HT_PORT" "$HT_TMP/requests.jsonl" "$1" "$2" "$3" <<'PY'
import concurrent.futures, http.client, json, sys, threading, time
port, path, first, count, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
reqs = [json.loads(l) for l in open(path, encoding="utf-8")][first:first + count]
local = threading.local()

def send(i):
    r = reqs[i]
    conn = getattr(local, "c", None)
    if conn is None:
        conn = local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    chat = (first + i) % 2 == 1
    body = {"max_tokens": 2, "temperature": 0}
    if chat:
        body["messages"] = [{"role": "user", "content": r["text"]}]
        p = "/v1/chat/completions"
    else:
        body["prompt"] = r["text"]
        p = "/v1/completions"
    for attempt in range(2):
        try:
            conn.request("POST", p, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            break
        except (http.client.HTTPException, OSError):
            conn.close()
            conn = local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            if attempt:
                raise
    if resp.status != 200:
        return {"i": first + i, "status": resp.status, "body": data[:300].decode("utf-8", "replace")}
    j = json.loads(data)
    c = j["choices"][0]
    text = c["message"]["content"] if chat else c["text"]
    return {"i": first + i, "status": 200, "text": text,
            "target": (j.get("molly") or {}).get("target")}

t0 = time.time()
with concurrent.futures.ThreadPoolExecutor(8) as ex:
    res = list(ex.map(send, range(len(reqs))))
with open(out, "w", encoding="utf-8") as f:
    for r in res:
        f.write(json.dumps(r) + "\n")
bad = [r for r in res if r["status"] != 200]
print(f"{len(res)} requests in {time.time() - t0:.1f} s, {len(bad)} not answered")
if bad:
    sys.exit(f"not answered: {bad[:3]}")
PY
}

# leaks FILE FIRST COUNT WHAT LOG...: the planted values (and markers, WHAT=markers too) of the
# non-public requests found in the logs.
leaks() {
	python3 - "$@" <<'PY'
import json, sys
path, first, count, what, logs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
blob = b"".join(open(l, "rb").read() for l in logs)
reqs = [json.loads(l) for l in open(path, encoding="utf-8")][first:first + count]
found = []
for k, r in enumerate(reqs):
    if r["public"]:
        continue
    needles = list(r["values"])
    if what == "markers":
        needles.append("PRIV%05d" % (first + k))
    for v in needles:
        forms = {v.encode(), json.dumps(v)[1:-1].encode(), json.dumps(v, ensure_ascii=False)[1:-1].encode()}
        if any(f in blob for f in forms):
            found.append(v)
print(len(found))
for v in found[:5]:
    print("  leaked:", v, file=sys.stderr)
PY
}

# --- A: default policy for personal and secret ---
rt_fake mine --reply "from T2"
rt_fake api --echo --split 4
ht_config "[Policy]
PublicTiers=T0,T2,T3
AllowExternal=yes
[Engine]
MaxSequences=8
QueueLength=256
[Target mine]
Tier=T2
UserControlled=yes
URL=http://127.0.0.1:$mine_PORT
Quality.general=0.95
[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT
Quality.general=0.9"
ht_start
drive 0 "$NA" "$HT_TMP/a.jsonl" || ht_fail "phase A requests"
n=$(leaks "$HT_TMP/requests.jsonl" 0 "$NA" markers "$HT_TMP/mine.log" "$HT_TMP/api.log")
[ "$n" = 0 ] || ht_fail "$n personal or secret values or requests reached T2/T3"
ht_stop
# The audit says what the policy made of each request: T2/T3 got every request it classed
# public and no other. (A generated "public" text the detectors flag, e.g. a card-shaped
# number that fails Luhn read as a phone number, is kept on T0: a conservative error.)
rt_audit
python3 - "$HT_TMP/audit.jsonl" "$NA" "$(rt_count mine)" "$(rt_count api)" \
	"$HT_TMP/requests.jsonl" "$HT_TMP/a.jsonl" <<'PY' || ht_fail "phase A: audit"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
na, mine, api = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
assert len(recs) == na, f"{len(recs)} audit records for {na} requests"
out = 0
for r in recs:
    if r["tier"] in ("T2", "T3"):
        out += 1
        assert r["class"] == "public", f"a {r['class']} request went to {r['target']}: {r}"
    elif r["class"] == "public":
        sys.exit(f"a public request stayed on {r['target']}: {r}")
assert out == mine + api, f"audit says {out} went out, the targets received {mine + api}"
reqs = [json.loads(l) for l in open(sys.argv[5], encoding="utf-8")]
gen_public = sum(1 for q in reqs[:na] if q["public"])
kept = [reqs[json.loads(l)["i"]]["text"] for l in open(sys.argv[6], encoding="utf-8")
        if reqs[json.loads(l)["i"]]["public"] and not json.loads(l)["target"] in ("mine", "api")]
print(f"{out} of {na} went to T2/T3 (all classed public); {len(kept)} of the {gen_public} generated hard negatives were classed personal and kept on T0")
PY
ht_ok "A: $NA requests answered; T2/T3 got exactly the requests classed public, no personal or secret value or request"

# --- B: personal may reach T3, redacted; secret stays on T0 ---
: >"$HT_TMP/api.log"
rm -rf "$HT_TMP/state"
ht_config "[Policy]
PublicTiers=T3
PersonalTiers=T3
AllowExternal=yes
[Engine]
MaxSequences=8
QueueLength=256
[Target api]
Tier=T3
URL=http://127.0.0.1:$api_PORT
Quality.general=0.9"
ht_start
drive "$NA" "$NB" "$HT_TMP/b.jsonl" || ht_fail "phase B requests"
n=$(leaks "$HT_TMP/requests.jsonl" "$NA" "$NB" values "$HT_TMP/api.log")
[ "$n" = 0 ] || ht_fail "$n planted values reached T3 unredacted"
python3 - "$HT_TMP/requests.jsonl" "$NA" "$HT_TMP/b.jsonl" <<'PY' || ht_fail "answers"
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
first = int(sys.argv[2])
t3 = local = 0
for l in open(sys.argv[3], encoding="utf-8"):
    r = json.loads(l)
    q = reqs[r["i"]]
    if r["target"] == "api":
        t3 += 1
        assert r["text"] == "ECHO:" + q["text"], f"request {r['i']}: not restored: {r['text']!r} for {q['text']!r}"
    else:
        local += 1
        assert r["target"] and r["target"].startswith("local:"), r
        assert not q["public"], f"public request {r['i']} did not go to T3: {r}"
print(f"{t3} answered by T3 and restored exactly, {local} kept on T0")
assert t3 > 0 and local > 0
PY
ht_ok "B: $NB requests: no planted value reached T3, every T3 answer restored exactly"
ht_stop
