#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Audit and Policy1: every request over D-Bus and HTTP leaves exactly one audit record with
# the right class; no planted sensitive value appears in the LMDB file or in `molly audit`;
# RetentionDays= removes old records (written backdated with MOLLY_TEST_AUDIT_BACKDATE);
# `molly audit` filters; Policy1.Explain answers over busctl and gdbus.
source "$(dirname "$0")/lib/common.sh"
need curl python3 gdbus
MOLLY=$MOLLY_BIN_DIR/molly
[ -x "$MOLLY" ] || skip "$MOLLY is not built"

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HTTP_LISTEN=127.0.0.1:$PORT
EMAIL=mario.rossi@example.com
IBAN=IT60X0542811101000000123456
KEY=sk-proj-Q7wErTy9uIoP3aSdFgHjKlZx8cVbNm42
EMAIL2=lucia.bianchi@example.org
PASSWORD='Tr0ub4dor&3xQ'

bus_start
write_config "[Audit]" "RetentionDays=30"

# --- records 60 days old: kept while the daemon runs, removed at the next start ---
MOLLY_TEST_AUDIT_BACKDATE=60d mollyd_start
call Inference1 Generate 'a{sv}' 2 prompt s "Old request" max_tokens u 2 >/dev/null || fail "old Generate"
call Inference1 Generate 'a{sv}' 2 prompt s "Old one to $EMAIL2" max_tokens u 2 >/dev/null || fail "old Generate 2"
mollyd_stop
n=$("$MOLLY" audit --state-dir "$T/state" --json | wc -l)
[ "$n" -eq 2 ] || fail "expected 2 backdated records, got $n"
n=$("$MOLLY" audit --state-dir "$T/state" --since 30d | wc -l)
[ "$n" -eq 0 ] || fail "--since 30d must not show 60-day-old records ($n)"
pass "backdated records written"

mollyd_start
n=$("$MOLLY" audit --state-dir "$T/state" --json | wc -l)
[ "$n" -eq 0 ] || fail "RetentionDays=30 should have removed the 60-day-old records ($n left)"
pass "retention applied at start"

# --- requests with planted values ---
call Inference1 Generate 'a{sv}' 2 prompt s "Once upon a time" max_tokens u 3 >/dev/null || fail "public"
call Inference1 Generate 'a{sv}' 2 prompt s "Please write to $EMAIL today" max_tokens u 3 >/dev/null || fail "email"
call Inference1 Generate 'a{sv}' 2 prompt s "my key is $KEY ok" max_tokens u 3 >/dev/null || fail "key"
gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Inference1.Generate \
	"{'messages': <[{'role': 'user', 'content': 'Pay to $IBAN please'}]>, 'max_tokens': <uint32 3>}" >/dev/null ||
	fail "gdbus messages with IBAN"
# A declared class stricter than the text: secret.
call Inference1 Generate 'a{sv}' 3 prompt s "Nothing here" max_tokens u 3 class s secret >/dev/null || fail "declared"
# Rejected by the manager (unknown class): still one record, with the error.
call Inference1 Generate 'a{sv}' 3 prompt s "to $EMAIL2" max_tokens u 3 class s bogus >/dev/null 2>&1 &&
	fail "class bogus must be refused"
out=$(curl -sS "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
	-d "{\"model\": \"stories260K\", \"prompt\": \"Contact $EMAIL2 or $EMAIL\", \"max_tokens\": 3}")
grep -q '"choices"' <<<"$out" || fail "HTTP completion: $out"
# A credential that is only a value after a key word: the record counts it, never holds it.
call Inference1 Generate 'a{sv}' 2 prompt s "the wifi password is $PASSWORD, and mail $EMAIL" max_tokens u 3 >/dev/null ||
	fail "password"
pass "8 requests sent (D-Bus, gdbus, HTTP)"

# --- Policy1.Explain: the decision without generating, and no record ---
out=$(call Policy1 Explain 'a{sv}' 1 prompt s "write to $EMAIL")
grep -q '"class" s "personal"' <<<"$out" || fail "Explain class: $out"
grep -q '"kind" s "email"' <<<"$out" || fail "Explain findings: $out"
grep -q '"layer" s "detector"' <<<"$out" || fail "Explain findings without their layer: $out"
grep -q '"score" d 1' <<<"$out" || fail "Explain findings without their score: $out"
grep -q '"special_score" d 0' <<<"$out" || fail "Explain without special_score: $out"
grep -q '"permitted_tiers" as 2 "T0" "T1"' <<<"$out" || fail "Explain tiers: $out"
grep -q "$EMAIL" <<<"$out" && fail "Explain must not echo the value: $out"
out=$("$MOLLY" --bus-address="$BUS_ADDR" explain --daemon "write to $EMAIL") || fail "molly explain --daemon: $out"
grep -Eq '^  email +\[9, 32\) +personal +detector +1\.00$' <<<"$out" || fail "molly explain --daemon findings: $out"
out=$(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Policy1.Explain "{'prompt': <'key $KEY'>, 'max_tokens': <uint32 5>}")
grep -q "'class': <'secret'>" <<<"$out" || fail "gdbus Explain secret: $out"
grep -q "'permitted_tiers': <\['T0'\]>" <<<"$out" || fail "gdbus Explain tiers: $out"
out=$(call Policy1 Explain 'a{sv}' 2 prompt s "hello" class s public)
grep -q '"class" s "public"' <<<"$out" || fail "Explain public: $out"
call Policy1 Explain 'a{sv}' 1 max_tokens u 3 >/dev/null 2>&1 && fail "Explain without a prompt must fail"
pass "Policy1.Explain over busctl and gdbus"
mollyd_stop

# --- the records ---
"$MOLLY" audit --state-dir "$T/state" --json > "$T/audit.jsonl" || fail "molly audit --json"
"$MOLLY" audit --state-dir "$T/state" > "$T/audit.txt" || fail "molly audit"
python3 - "$T/audit.jsonl" <<'PY' || fail "audit records: $(cat "$T/audit.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 8, len(recs)
classes = [r["class"] for r in recs]
assert classes == ["public", "personal", "secret", "personal", "secret", "personal", "personal",
                   "secret"], classes
fronts = [r["front"] for r in recs]
assert fronts == ["dbus"] * 6 + ["http", "dbus"], fronts
for r in recs:
    for k in ("time", "seq", "uid", "member", "class", "findings", "permitted_tiers", "target",
              "tier", "redactions", "escalations", "fallbacks", "finish", "error",
              "egress_enforced"):
        assert k in r, (k, r)
    assert r["egress_enforced"] is False
    assert r["redactions"] == 0 and r["escalations"] == 0 and r["fallbacks"] == 0
assert recs[1]["findings"].get("email") == 1, recs[1]
assert recs[3]["findings"].get("iban") == 1, recs[3]
assert recs[2]["permitted_tiers"] == ["T0"], recs[2]
assert recs[4]["declared"] == "secret" and recs[4]["findings"] == {}, recs[4]
assert recs[5]["error"] == "invalid_request_error" and recs[5]["tier"] is None, recs[5]
assert recs[6]["findings"].get("email") == 2 and recs[6]["uid"] is None, recs[6]
# kinds and counts per kind, nothing else
assert recs[7]["findings"] == {"secret": 1, "email": 1}, recs[7]
for r in recs:
    for k, n in r["findings"].items():
        assert isinstance(n, int) and n > 0 and k.replace("_", "").isalpha(), (k, n, r)
for r in recs[:5] + recs[6:]:
    assert r["tier"] == "T0" and r["target"] == "local:stories260K", r
    assert r["finish"] == "length" and r["error"] is None, r
assert recs[0]["uid"] == recs[1]["uid"] and isinstance(recs[0]["uid"], int)
times = [r["time"] for r in recs]
assert times == sorted(times)
PY
[ "$(wc -l < "$T/audit.txt")" -eq 8 ] || fail "human output: one line per record: $(cat "$T/audit.txt")"
pass "one record per request, classes, fields"

# --- no planted value anywhere: the LMDB file, the JSON, the human lines ---
for v in "$EMAIL" "$EMAIL2" "$IBAN" "$KEY" "$PASSWORD" "mario.rossi" "0542811101" "Q7wErTy9uIoP" "Tr0ub4dor"; do
	for f in "$T/state/audit/data.mdb" "$T/audit.jsonl" "$T/audit.txt"; do
		grep -aqF -- "$v" "$f" && fail "'$v' found in $f"
	done
done
grep -aqF "Once upon" "$T/state/audit/data.mdb" && fail "a prompt's text is in the store"
grep -aqF "wifi" "$T/state/audit/data.mdb" && fail "a prompt's text is in the store"
pass "no planted value in the store or the output"

# --- filters ---
out=$("$MOLLY" audit --state-dir "$T/state" --since 30d --class personal --tier T3) || fail "filter rc"
[ -z "$out" ] || fail "no personal request reached T3: $out"
n=$("$MOLLY" audit --state-dir "$T/state" --since 1h --class secret --tier T0 | wc -l)
[ "$n" -eq 3 ] || fail "--class secret --tier T0: $n"
n=$("$MOLLY" audit --state-dir "$T/state" --json --class personal | wc -l)
[ "$n" -eq 4 ] || fail "--class personal: $n"
n=$("$MOLLY" audit --state-dir "$T/state" --since 0s | wc -l)
[ "$n" -eq 0 ] || fail "--since 0s: $n"
pass "molly audit --since/--class/--tier"

# --- errors say what to do ---
out=$("$MOLLY" audit --state-dir "$T/state" --since 30 2>&1) && fail "bad duration accepted"
grep -q "30d, 12h, 15m, 3600s" <<<"$out" || fail "bad duration message: $out"
out=$("$MOLLY" audit --state-dir "$T/state" --tier T9 2>&1) && fail "bad tier accepted"
grep -q "T0, T1, T2, T3" <<<"$out" || fail "bad tier message: $out"
out=$("$MOLLY" audit --state-dir "$T/nowhere" 2>&1) && fail "missing store accepted"
grep -q -- "--state-dir" <<<"$out" || fail "missing store message: $out"
pass "errors"
