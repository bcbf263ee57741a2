#!/bin/bash
# SPDX-License-Identifier: MIT
# API keys of the HTTP front: with [Member] sections, /v1/ needs a valid key (401), a key's
# Models= limits what it may use (403, and /v1/models shows only those), Admin= guards the
# adapter endpoints (403); a member's UIDs= authenticates a unix-socket peer without a key.
# /metrics and /health stay open.
. "$(dirname "$0")/lib/http.sh"

newkey() {
	python3 -c 'import base64, os; print("molly-" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))'
}
keyhash() {
	python3 -c 'import hashlib, sys; print("sha256:" + hashlib.sha256(sys.argv[1].encode()).hexdigest())' "$1"
}

ALICE=$(newkey)   # the base only
BOB=$(newkey)     # an adapter only (no such adapter loaded: the base is outside his scope)
ROOT=$(newkey)    # everything, admin
MEMBERS="[Member alice]
KeyHash=$(keyhash "$ALICE")
Models=$HT_NAME

[Member bob]
KeyHash=$(keyhash "$BOB")
Models=some-adapter

[Member root]
KeyHash=$(keyhash "$ROOT")
Models=*
Admin=yes

[Member local]
UIDs=$(id -u)
Models=*"

ht_config "$MEMBERS"
ht_start
C='{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}'

# ---- 401 ----
ht_req POST /v1/completions "$C"
ht_expect_error 401 invalid_api_key "no key"
grep -qi '^www-authenticate: bearer' <(curl -s -D - -o /dev/null "$HT_URL/v1/models") ||
	ht_fail "401 without WWW-Authenticate: Bearer"
ht_req POST /v1/completions "$C" -H "Authorization: Bearer $(newkey)"
ht_expect_error 401 invalid_api_key "unknown key"
ht_req POST /v1/completions "$C" -H "Authorization: Bearer ${ALICE}x"
ht_expect_error 401 invalid_api_key "key with an extra character"
ht_req POST /v1/completions "$C" -H "Authorization: Basic $ALICE"
ht_expect_error 401 invalid_api_key "not a Bearer credential"
ht_req GET /v1/models
ht_expect_error 401 invalid_api_key "models without a key"
ht_ok "401 without a key, with a wrong key, with a non-Bearer header"

# ---- keys that work, and their scopes ----
ht_req POST /v1/completions "$C" -H "Authorization: Bearer $ALICE"
ht_expect_status 200 "alice on the base"
ht_req POST /v1/completions "$C" -H "authorization:   bearer   $ALICE  "
ht_expect_status 200 "scheme and blanks are lenient"
ht_req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}' \
	-H "Authorization: Bearer $ROOT"
ht_expect_status 200 "root chat"
ht_req POST /v1/completions "$C" -H "Authorization: Bearer $BOB"
ht_expect_error 403 "" "bob on the base (outside Models=)"
ht_req GET /v1/models - -H "Authorization: Bearer $ALICE"
ht_expect_status 200 "alice's models"
ht_expect_json '[m["id"] for m in j["data"]]' "[\"$HT_NAME\"]" "alice sees the base"
ht_req GET /v1/models - -H "Authorization: Bearer $BOB"
ht_expect_status 200 "bob's models"
ht_expect_json 'len(j["data"])' 0 "bob sees no model he may not use"
ht_req GET "/v1/models/$HT_NAME" - -H "Authorization: Bearer $BOB"
ht_expect_error 403 "" "bob retrieving the base"
ht_ok "keys work; Models= scopes give 403 and filter /v1/models"

# ---- Admin= ----
L='{"lora_name": "x", "lora_path": "/nonexistent/adapter.gguf"}'
ht_req POST /v1/load_lora_adapter "$L"
ht_expect_error 401 "" "load without a key"
ht_req POST /v1/load_lora_adapter "$L" -H "Authorization: Bearer $ALICE"
ht_expect_error 403 admin_required "load by a non-admin"
ht_req POST /v1/unload_lora_adapter '{"lora_name": "x"}' -H "Authorization: Bearer $ALICE"
ht_expect_error 403 admin_required "unload by a non-admin"
ht_req POST /v1/load_lora_adapter "$L" -H "Authorization: Bearer $ROOT"
[ "$HT_STATUS" != 401 ] && [ "$HT_STATUS" != 403 ] && [ "$HT_STATUS" != 200 ] ||
	ht_fail "admin load of a missing file: HTTP $HT_STATUS"
ht_expect_json '"error" in j' true "admin load of a missing file: error body"
ht_req POST /v1/load_lora_adapter '{"lora_path": "/x"}' -H "Authorization: Bearer $ROOT"
ht_expect_error 400 "" "load without lora_name"
ht_expect_json 'j["error"]["param"]' lora_name
ht_ok "Admin= guards the adapter endpoints"

# ---- open endpoints ----
ht_req GET /metrics
ht_expect_status 200 "/metrics without a key"
grep -q '^molly_http_requests_total{endpoint="/v1/completions",status="401"} 4$' "$HT_TMP/body" ||
	ht_fail "/metrics does not count the 401s"
ht_req GET /health
ht_expect_status 200 "/health without a key"
ht_ok "/metrics and /health need no key"
ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"

# ---- a unix socket: the peer's uid is a member (UIDs=) ----
SOCK=$HT_TMP/run/http.sock
LISTEN=unix:$SOCK ht_config "$MEMBERS"
LISTEN=unix:$SOCK ht_start
[ -S "$SOCK" ] || ht_fail "no socket at $SOCK"
HT_STATUS=$(curl -s -o "$HT_TMP/body" -w '%{http_code}' --unix-socket "$SOCK" \
	-H 'Content-Type: application/json' -d "$C" http://localhost/v1/completions)
ht_expect_status 200 "unix socket, uid in UIDs="
ht_expect_json 'j["object"]' text_completion
HT_STATUS=$(curl -s -o "$HT_TMP/body" -w '%{http_code}' --unix-socket "$SOCK" \
	-H "Authorization: Bearer $(newkey)" -d "$C" http://localhost/v1/completions)
ht_expect_error 401 invalid_api_key "unix socket with a wrong key"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
	chmod 0755 "$HT_TMP" "$HT_TMP/run" # let the other uid reach the socket
	HT_STATUS=$(setpriv --reuid=65534 --regid=65534 --clear-groups curl -s -o /dev/null \
		-w '%{http_code}' --unix-socket "$SOCK" -d "$C" http://localhost/v1/completions)
	ht_expect_status 401 "unix socket, another uid without a key"
fi
ht_ok "unix socket: UIDs= members need no key, others do"
LISTEN=unix:$SOCK ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
[ ! -e "$SOCK" ] || ht_fail "the socket was not removed at exit"
