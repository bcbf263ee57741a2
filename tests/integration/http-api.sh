#!/bin/bash
# SPDX-License-Identifier: MIT
# The OpenAI-compatible HTTP API of a real mollyd, with curl over loopback: every endpoint,
# streaming (curl -N), the sampling fields, and every error code a client can cause without
# keys (keys: http-keys.sh). A greedy completion must equal `molly-run --temp 0`.
. "$(dirname "$0")/lib/http.sh"

ht_config "[Engine]
MaxSequences=4
QueueLength=16"
ht_start

# ---- GET /v1/models ----
ht_req GET /v1/models
ht_expect_status 200 "GET /v1/models"
ht_expect_json 'j["object"]' list
ht_expect_json 'j["data"][0]["id"]' "$HT_NAME" "base model id"
ht_expect_json 'j["data"][0]["object"]' model
ht_expect_json 'j["data"][0]["owned_by"]' molly
ht_expect_json 'j["data"][0]["parent"]' null "base parent"
ht_req GET "/v1/models/$HT_NAME"
ht_expect_status 200 "GET /v1/models/{id}"
ht_expect_json 'j["id"]' "$HT_NAME"
ht_req GET /v1/models/no-such-model
ht_expect_error 404 model_not_found "GET /v1/models/{unknown}"
ht_ok "models"

# ---- a greedy completion equals molly-run --temp 0 ----
PROMPT="Once upon a time, there was a"
N=24
if [ -x "$HT_BIN/molly-run" ]; then
	want=$("$HT_BIN/molly-run" --model "$HT_MODEL" --prompt "$PROMPT" -n $N --temp 0 \
		--threads 1 2>/dev/null) || ht_fail "molly-run failed"
else
	want=
	echo "note: molly-run not built; greedy comparison skipped" >&2
fi
body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "prompt": sys.argv[2],
	"max_tokens": int(sys.argv[3]), "temperature": 0}))' "$HT_NAME" "$PROMPT" $N)
ht_req POST /v1/completions "$body"
ht_expect_status 200 "greedy completion"
ht_expect_json 'j["object"]' text_completion
ht_expect_json 'j["id"].startswith("cmpl-")' true "completion id"
ht_expect_json 'j["model"]' "$HT_NAME"
ht_expect_json 'isinstance(j["created"], int)' true "created"
ht_expect_json 'j["choices"][0]["index"]' 0
ht_expect_json 'j["choices"][0]["finish_reason"] in ("length", "stop")' true "finish_reason"
ht_expect_json 'j["usage"]["total_tokens"] == j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"]' true "usage sums"
ht_expect_json 'j["usage"]["completion_tokens"] <= '$N true "max_tokens honoured"
ht_expect_json 'j["usage"]["prompt_tokens"] > 0' true "prompt_tokens"
text=$(ht_json 'j["choices"][0]["text"]')
[ -n "$text" ] || ht_fail "empty completion"
if [ -n "$want" ]; then
	[ "$PROMPT$text" = "$want" ] ||
		ht_fail "greedy HTTP text differs from molly-run:
  http:      '$PROMPT$text'
  molly-run: '$want'"
	ht_ok "greedy completion equals molly-run --temp 0"
fi
cp "$HT_TMP/body" "$HT_TMP/greedy.json"

# the model field may be left out (the base)
ht_req POST /v1/completions "{\"prompt\": \"$PROMPT\", \"max_tokens\": $N, \"temperature\": 0}"
ht_expect_status 200 "completion without model"
ht_expect_json 'j["choices"][0]["text"]' "$text" "same text without model"
ht_expect_json 'j["model"]' "$HT_NAME"

# ---- streaming with curl -N: the same text, OpenAI's chunks, [DONE] at the end ----
curl -sN --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/completions" -H 'Content-Type: application/json' \
	-d "{\"prompt\": \"$PROMPT\", \"max_tokens\": $N, \"temperature\": 0, \"stream\": true}" \
	-D "$HT_TMP/headers" >"$HT_TMP/stream" || ht_fail "curl -N failed"
grep -qi '^content-type: text/event-stream' "$HT_TMP/headers" || ht_fail "stream content type"
python3 - "$HT_TMP/stream" "$text" <<'EOF' || ht_fail "completion stream"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), "the stream must end with data: [DONE]"
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert len(chunks) >= 2, chunks
ids = {c["id"] for c in chunks}
assert len(ids) == 1 and ids.pop().startswith("cmpl-"), "one id for the whole stream"
assert all(c["object"] == "text_completion" for c in chunks)
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == sys.argv[2], (text, sys.argv[2])
assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")
assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
EOF
ht_ok "completion stream (curl -N) matches the non-streamed text"

# ---- chat ----
CHAT='{"model": "'$HT_NAME'", "messages": [{"role": "system", "content": "You tell stories."},
	{"role": "user", "content": "Tell me about a cat."}], "max_tokens": 16, "temperature": 0'
ht_req POST /v1/chat/completions "$CHAT}"
ht_expect_status 200 "chat completion"
ht_expect_json 'j["object"]' chat.completion
ht_expect_json 'j["id"].startswith("chatcmpl-")' true "chat id"
ht_expect_json 'j["choices"][0]["message"]["role"]' assistant
ht_expect_json 'j["usage"]["completion_tokens"] <= 16' true "chat max_tokens"
chat_text=$(ht_json 'j["choices"][0]["message"]["content"]')
# max_completion_tokens is the newer name
ht_req POST /v1/chat/completions "${CHAT/\"max_tokens\": 16/\"max_completion_tokens\": 3}}"
ht_expect_status 200 "max_completion_tokens"
ht_expect_json 'j["usage"]["completion_tokens"] <= 3' true "max_completion_tokens honoured"
# content as an array of text parts
ht_req POST /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "text",
	"text": "Tell me "}, {"type": "text", "text": "a story."}]}], "max_tokens": 4}'
ht_expect_status 200 "content parts"

curl -sN --max-time "$MOLLY_TEST_WAIT_S" "$HT_URL/v1/chat/completions" -H 'Content-Type: application/json' \
	-d "$CHAT, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
	>"$HT_TMP/stream" || ht_fail "chat stream"
python3 - "$HT_TMP/stream" "$chat_text" <<'EOF' || ht_fail "chat stream"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"].get("role") == "assistant", chunks[0]
usage = chunks[-1]
assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0, usage
fin = chunks[-2]["choices"][0]
assert fin["finish_reason"] in ("length", "stop"), fin
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
assert text == sys.argv[2], (text, sys.argv[2])
EOF
ht_ok "chat, chat stream with include_usage"

# ---- stop ----
stop_word=$(python3 -c 'import sys; w = sys.argv[1].split(); print(w[len(w) // 2])' "$text")
ht_req POST /v1/completions "{\"prompt\": \"$PROMPT\", \"max_tokens\": $N, \"temperature\": 0, \"stop\": \"$stop_word\"}"
ht_expect_status 200 "stop string"
ht_expect_json 'j["choices"][0]["finish_reason"]' stop "finish_reason with stop"
got=$(ht_json 'j["choices"][0]["text"]')
[ "$got" = "${text%%"$stop_word"*}" ] || ht_fail "stop: '$got' is not the text up to '$stop_word'"
ht_req POST /v1/completions "{\"prompt\": \"$PROMPT\", \"max_tokens\": $N, \"temperature\": 0, \"stop\": [\"zzzz\", \"$stop_word\"]}"
ht_expect_status 200 "stop array"
ht_expect_json 'j["choices"][0]["text"]' "$got" "stop array"
ht_ok "stop (string and array)"

# ---- sampling: seed makes temperature > 0 reproducible; top_p accepted ----
S='{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": 1234}'
ht_req POST /v1/completions "$S"
ht_expect_status 200 "seeded sampling"
a=$(ht_json 'j["choices"][0]["text"]')
ht_req POST /v1/completions "$S"
b=$(ht_json 'j["choices"][0]["text"]')
[ "$a" = "$b" ] || ht_fail "same seed, different text: '$a' vs '$b'"
ht_ok "seed, temperature, top_p"

# ---- logprobs ----
ht_req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 1}'
ht_expect_status 200 "completion logprobs"
ht_expect_json 'len(j["choices"][0]["logprobs"]["tokens"]) == j["usage"]["completion_tokens"]' true "one logprob per token"
ht_expect_json 'all(x <= 0 for x in j["choices"][0]["logprobs"]["token_logprobs"])' true "logprobs <= 0"
ht_expect_json '"".join(j["choices"][0]["logprobs"]["tokens"]) == j["choices"][0]["text"]' true "tokens spell the text"
ht_req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 0}'
ht_expect_status 200 "chat logprobs"
ht_expect_json 'all(c["logprob"] <= 0 and isinstance(c["bytes"], list) for c in j["choices"][0]["logprobs"]["content"])' true "chat logprobs"
ht_ok "logprobs"

# ---- invalid requests: 400 naming the field ----
ht_req POST /v1/completions '{"prompt": "x", "max_tokens": 5'
ht_expect_error 400 invalid_json "truncated JSON"
ht_req POST /v1/completions '{"prompt": "x"} trailing'
ht_expect_error 400 invalid_json "trailing garbage"
ht_req POST /v1/completions ''
ht_expect_error 400 "" "empty body"
printf '{"prompt": "\xc3\x28 bad"}' >"$HT_TMP/bad-utf8"
ht_req POST /v1/completions "@$HT_TMP/bad-utf8"
ht_expect_error 400 invalid_utf8 "invalid UTF-8"
printf '{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}' >"$HT_TMP/bad-utf8"
ht_req POST /v1/chat/completions "@$HT_TMP/bad-utf8"
ht_expect_error 400 invalid_utf8 "UTF-8 surrogate"
ht_req POST /v1/completions '[1, 2]'
ht_expect_error 400 "" "not an object"
for case in 'max_tokens|{"prompt": "x", "max_tokens": "5"}' \
	'max_tokens|{"prompt": "x", "max_tokens": -1}' \
	'temperature|{"prompt": "x", "temperature": "hot"}' \
	'top_p|{"prompt": "x", "top_p": 2}' \
	'stream|{"prompt": "x", "stream": "yes"}' \
	'stop|{"prompt": "x", "stop": 5}' \
	'seed|{"prompt": "x", "seed": 1.5}' \
	'prompt|{"prompt": 42}' \
	'prompt|{"max_tokens": 3}' \
	'n|{"prompt": "x", "n": 2}' \
	'lora|{"prompt": "x", "lora": {"name": "a"}}' \
	'logprobs|{"prompt": "x", "logprobs": 99}'; do
	ht_req POST /v1/completions "${case#*|}"
	ht_expect_error 400 "" "bad ${case%%|*}"
	ht_expect_json 'j["error"]["param"]' "${case%%|*}" "param of bad ${case%%|*}"
done
for case in 'messages|{"messages": "hi"}' \
	'messages|{"messages": []}' \
	'messages.role|{"messages": [{"role": "wizard", "content": "x"}]}' \
	'messages.content|{"messages": [{"role": "user", "content": 7}]}' \
	'tools|{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}'; do
	ht_req POST /v1/chat/completions "${case#*|}"
	ht_expect_error 400 "" "bad ${case%%|*}"
	ht_expect_json 'j["error"]["param"]' "${case%%|*}" "param of bad ${case%%|*}"
done
ht_ok "400 for malformed JSON, invalid UTF-8, wrong types (naming the field)"

# ---- 404, 400 context, 405, 413 ----
ht_req POST /v1/completions '{"model": "no-such-model", "prompt": "x"}'
ht_expect_error 404 model_not_found "unknown model"
ht_req POST /v1/completions '{"model": "'$HT_NAME':no-such-adapter", "prompt": "x"}'
ht_expect_error 404 model_not_found "unknown base:adapter"
ht_req POST /v1/completions '{"prompt": "x", "lora": [{"name": "no-such-adapter", "scale": 1}]}'
ht_expect_error 404 model_not_found "unknown lora"
python3 -c 'import json; print(json.dumps({"prompt": "Once upon a time " * 400}))' >"$HT_TMP/long.json"
ht_req POST /v1/completions "@$HT_TMP/long.json"
ht_expect_error 400 context_length_exceeded "prompt over the context"
ht_req POST /v1/completions '{"prompt": "x", "max_tokens": 100000}'
ht_expect_error 400 "" "max_tokens over the context"
ht_req GET /v1/nothing-here
ht_expect_error 404 "" "unknown path"
ht_req GET /v1/completions
ht_expect_error 405 "" "GET on a POST endpoint"
python3 -c 'import json; print(json.dumps({"prompt": "a" * 70000}))' >"$HT_TMP/big.json"
ht_req POST /v1/completions "@$HT_TMP/big.json"
ht_expect_error 413 request_too_large "body over MaxBodyBytes (Content-Length)"
ht_req POST /v1/completions "@$HT_TMP/big.json" -H 'Transfer-Encoding: chunked'
ht_expect_error 413 request_too_large "body over MaxBodyBytes (chunked)"
ht_req POST /v1/completions '{"prompt": "still serving", "max_tokens": 2}'
ht_expect_status 200 "a request after the errors"
ht_ok "404 model_not_found, 400 context_length_exceeded, 404/405 paths, 413 both ways"

# ---- metrics and health ----
ht_req GET /health
ht_expect_status 200 "/health"
curl -s --max-time 10 "$HT_URL/metrics" >"$HT_TMP/metrics" || ht_fail "/metrics"
for pat in '^molly_http_requests_total{endpoint="/v1/completions",status="200"} [1-9]' \
	'^molly_http_requests_total{endpoint="/v1/completions",status="413"} 2$' \
	'^molly_http_request_duration_seconds_bucket{endpoint="/v1/chat/completions",le="+Inf"} [1-9]' \
	'^molly_http_time_to_first_token_seconds_count [1-9]' \
	'^molly_http_generation_tokens_total [1-9]' \
	'^molly_queue_depth 0$' \
	'^vllm:num_requests_waiting{model_name="'$HT_NAME'"} 0$' \
	'^vllm:num_requests_running{model_name="'$HT_NAME'"} 0$' \
	'^# TYPE vllm:lora_requests_info gauge$' \
	'^vllm:lora_requests_info{max_lora="4",waiting_lora_adapters="",running_lora_adapters=""} [0-9.e+]*$'; do
	grep -q "$pat" "$HT_TMP/metrics" || ht_fail "/metrics lacks $pat"
done
ts=$(awk '/^vllm:lora_requests_info/ {print $NF}' "$HT_TMP/metrics")
python3 -c 'import sys, time; assert abs(float(sys.argv[1]) - time.time()) < 600' "$ts" ||
	ht_fail "vllm:lora_requests_info is not the current time ($ts)"
ht_ok "/metrics (molly_* and vLLM series), /health"

ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT after SIGTERM"
ht_ok "SIGTERM: exit 0"
