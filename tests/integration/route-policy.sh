#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Policy end to end through the daemon: generated requests with planted values (emails, IBANs,
# phone numbers, API keys) against a daemon whose public requests may go to T2 and T3 (fake
# targets on 127.0.0.1 that record every byte), with the default tiers for personal (T0,T1)
# and secret (T0). Checks that no personal or secret request — and none of its values —
# reaches T2/T3, that every public one does, and that every request is answered.
# The issue asks for 10,000 requests; this runs ROUTE_POLICY_N (default 400, about 50 s under
# ASan on 2 cores) to stay within the test budget.
source "$(dirname "$0")/lib/http.sh"
source "$(dirname "$0")/lib/route.sh"

N=${ROUTE_POLICY_N:-400}
rt_fake mine --reply "from T2"
rt_fake api --echo --split 4
ht_config "[Policy]
PublicTiers=T0,T2,T3
AllowExternal=yes
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

python3 - "$HT_URL" "$N" "$HT_TMP/planted.txt" <<'PY' || ht_fail "requests"
import json, random, sys, time, urllib.request, urllib.error
url, n, planted_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
planted, public = [], 0
t0 = time.time()
for i in range(n):
    kind = i % 3
    if kind == 0:
        text, values = f"Tell a story number PUB{i:05d} about a cat.", []
        public += 1
    elif kind == 1:
        email = f"user{i}.{rng.randrange(10**6)}@example.com"
        bban = "X0542811101" + f"{rng.randrange(10**12):012d}"
        num = int("".join(str(int(c, 36)) for c in bban + "IT00"))
        iban = f"IT{98 - num % 97:02d}{bban}"  # valid check digits: the detector's checksum
        text, values = rng.choice([
            (f"Mail {email} today", [email]),
            (f"Send it to IBAN {iban} please", [iban]),
            (f"Mail {email} and pay {iban}", [email, iban]),
        ])
    else:
        key = "sk-proj-" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(40))
        text, values = f"my key is {key} keep it", [key]
    planted += values
    if kind != 0:
        planted.append(f"PRIV{i:05d}")
        text += f" PRIV{i:05d}"
    body = {"max_tokens": 2}
    if rng.random() < 0.5:
        body["prompt"] = text
        path = "/v1/completions"
    else:
        body["messages"] = [{"role": "user", "content": text}]
        path = "/v1/chat/completions"
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            j = json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"request {i} ({text!r}): HTTP {e.code}: {e.read()[:300]!r}")
    assert j["choices"], j
open(planted_path, "w").write("\n".join(planted) + "\n")
print(f"{n} requests ({public} public) in {time.time() - t0:.1f} s")
with open(planted_path + ".public", "w") as f:
    f.write(str(public))
PY

public=$(cat "$HT_TMP/planted.txt.public")
got=$(( $(rt_count mine) + $(rt_count api) ))
if [ "$got" != "$public" ]; then
	grep -ohE '"(prompt|content)": *"[^"]*"' "$HT_TMP/mine.log" "$HT_TMP/api.log" | grep -v PUB | head -5 >&2
	ht_fail "T2/T3 received $got requests; expected exactly the $public public ones"
fi
if grep -qF -f "$HT_TMP/planted.txt" "$HT_TMP/mine.log" "$HT_TMP/api.log"; then
	ht_fail "a personal or secret value reached T2/T3: $(grep -oF -f "$HT_TMP/planted.txt" "$HT_TMP/mine.log" "$HT_TMP/api.log" | head -3)"
fi
ht_ok "$N requests: the $public public ones went to T2/T3, no personal or secret one did"
ht_stop
