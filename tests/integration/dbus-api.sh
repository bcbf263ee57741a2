#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mollyd on a private system-style bus with the project's policy: Generate, Stream, Cancel,
# properties and Status through busctl, gdbus and dbus-send; wrong signatures and types,
# unknown keys and adapters, prompts over the context; greedy output equals molly-run's.
source "$(dirname "$0")/lib/common.sh"
need gdbus dbus-send python3

bus_start
write_config
mollyd_start

# --- Generate with each client ---
out=$(call Inference1 Generate 'a{sv}' 3 prompt s "Once upon a time" max_tokens u 24 temperature d 0)
grep -q '"finish_reason" s "length"' <<<"$out" || fail "busctl Generate: $out"
grep -q '"completion_tokens" u 24' <<<"$out" || fail "busctl Generate usage: $out"
grep -q '"prompt_tokens" u 5' <<<"$out" || fail "busctl Generate prompt tokens: $out"
grep -q '"model" s "stories260K"' <<<"$out" || fail "busctl Generate model: $out"
busctl_text=$(echo "$out" | sed -E 's/^sa\{sv\} "((\\.|[^"\\])*)".*/\1/')
pass "busctl Generate"

# The same greedy text from the engine directly (molly-run), when it is built.
if [ -x "$MOLLY_BIN_DIR/molly-run" ]; then
	direct=$("$MOLLY_BIN_DIR/molly-run" --model "$MODEL" --prompt "Once upon a time" -n 24 --temp 0 2>/dev/null || true)
	if [ -n "$direct" ]; then
		case "$direct" in
		*"$busctl_text"*) pass "D-Bus greedy text equals molly-run's" ;;
		*) fail "greedy text differs: D-Bus '$busctl_text' vs molly-run '$direct'" ;;
		esac
	fi
fi

out=$(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Inference1.Generate \
	"{'prompt': <'Once upon a time'>, 'max_tokens': <byte 8>, 'temperature': <0>, 'seed': <int64 -3>}")
grep -q "'finish_reason': <'length'>" <<<"$out" || fail "gdbus Generate: $out"
grep -q "'completion_tokens': <uint32 8>" <<<"$out" || fail "gdbus Generate usage: $out"
pass "gdbus Generate (byte max_tokens, int temperature, negative seed)"

out=$(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Inference1.Generate \
	"{'messages': <[{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]>, 'max_tokens': <uint16 6>, 'stop': <['zzzz']>}")
grep -q "'finish_reason'" <<<"$out" || fail "gdbus chat Generate: $out"
pass "gdbus Generate with messages aa{ss}"

# --- issue #21: constrained decoding through Generate (response_format as JSON text, GBNF) ---
out=$(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Inference1.Generate \
	"{'prompt': <'Once upon a time'>, 'max_tokens': <uint32 80>, 'seed': <uint64 4>, 'response_format': <'{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", \"schema\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}}, \"required\": [\"n\"], \"additionalProperties\": false}}}'>}")
grep -q "'finish_reason': <'stop'>" <<<"$out" || fail "Generate with response_format: $out"
text=$(python3 -c 'import ast, sys; print(ast.literal_eval(sys.argv[1].split(", {")[0].lstrip("(")))' "$out")
python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert list(d) == ["n"] and 1 <= d["n"] <= 9, d' "$text" ||
	fail "Generate with response_format: '$text' does not validate"
out=$(call Inference1 Generate 'a{sv}' 3 prompt s "x" max_tokens u 10 grammar s 'root ::= "ok" [0-9]')
grep -qE '^sa\{sv\} "ok[0-9]"' <<<"$out" || fail "Generate with grammar: $out"
expect_fail "unsupported JSON Schema keyword 'pattern'" call Inference1 Generate 'a{sv}' 2 prompt s "x" response_format s '{"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a"}}}'
pass "Generate with response_format (validates) and grammar; a refused schema names the keyword"

# the policy reads a tool result like any other message
out=$(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 \
	--method org.molly.Policy1.Explain \
	"{'messages': <[{'role': 'user', 'content': 'Who wrote?'}, {'role': 'tool', 'content': 'mail from mario.rossi@example.com'}]>}")
grep -q "'class': <'personal'>" <<<"$out" || fail "Explain of a tool result: $out"
grep -q "'kind': <'email'>" <<<"$out" || fail "Explain of a tool result: no email finding: $out"
pass "the policy sees tool results"

# dbus-send cannot build a{sv} (no variants in containers): it reads the state instead.
out=$(dbus-send --bus="$BUS_ADDR" --print-reply --dest=org.molly.Daemon1 /org/molly/Daemon1 \
	org.molly.Daemon1.Status)
grep -q '"requests_total"' <<<"$out" || fail "dbus-send Status: $out"
out=$(dbus-send --bus="$BUS_ADDR" --print-reply=literal --dest=org.molly.Daemon1 /org/molly/Daemon1 \
	org.freedesktop.DBus.Properties.Get string:org.molly.Daemon1 string:Model)
grep -q 'stories260K' <<<"$out" || fail "dbus-send Get Model: $out"
pass "dbus-send Status and Properties.Get"

# --- stop strings: the text ends before the stop string, finish_reason stop ---
full=$(call Inference1 Generate 'a{sv}' 3 prompt s "Once upon a time" max_tokens u 40 temperature d 0)
out=$(call Inference1 Generate 'a{sv}' 4 prompt s "Once upon a time" max_tokens u 40 temperature d 0 stop as 2 "Lily" "zebra")
grep -q "Lily" <<<"$full" || fail "the greedy text should mention Lily: $full"
grep -q '"finish_reason" s "stop"' <<<"$out" || fail "stop string: $out"
grep -q "Lily" <<<"$out" && fail "the stop string must not be in the text: $out"
grep -q '^sa{sv} ", there was a little girl named "' <<<"$out" || fail "text before the stop string: $out"
out=$(call Inference1 Generate 'a{sv}' 4 prompt s "Once upon a time" max_tokens u 40 temperature d 0 stop s "girl named")
grep -q '^sa{sv} ", there was a little " ' <<<"$out" || fail "single stop string: $out"
pass "stop strings"

# --- properties and Status ---
expect_out '^s "0\.1\.0"' busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Version
expect_out '^s "stories260K"' busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Model
expect_out '^u 0' busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 QueueDepth
expect_out '^u 0' busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 RunningSequences
expect_out '"requests_total" t [1-9]' call Daemon1 Status
expect_out 'org.molly.Inference1' busctl --address="$BUS_ADDR" introspect org.molly.Daemon1 /org/molly/Daemon1
pass "properties, Status, introspection"

# --- Stream: JSON lines on the fd ---
# gdbus and busctl cannot keep the fd: a dbus-python client reads the stream.
[ -n "$PYDBUS" ] || skip "python3-dbus is needed for the Stream checks (tools/install-deps.sh)"
"$PYDBUS" - "$BUS_ADDR" <<'PY' || fail "Stream"
import json, os, sys
import dbus
bus = dbus.bus.BusConnection(sys.argv[1])
obj = bus.get_object("org.molly.Daemon1", "/org/molly/Daemon1")
inf = dbus.Interface(obj, "org.molly.Inference1")
fd, handle = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(12),
                         "temperature": 0.0})
f = os.fdopen(fd.take(), "r")
lines = [json.loads(l) for l in f]
assert lines[-1]["type"] == "done", lines[-1]
assert lines[-1]["finish_reason"] == "length", lines[-1]
assert lines[-1]["usage"]["completion_tokens"] == 12, lines[-1]
assert all(l["type"] == "token" for l in lines[:-1]), lines
text = "".join(l["text"] for l in lines[:-1])
assert text.startswith(", there was a little girl"), text
assert str(handle).startswith("/org/molly/Daemon1/request/"), handle

# Cancel(o): a long request is cut short with finish_reason "cancelled".
fd, handle = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(400),
                         "ignore_eos": True})
f = os.fdopen(fd.take(), "r")
first = json.loads(f.readline())
inf.Cancel(handle)
lines = [json.loads(l) for l in f]
assert lines[-1]["type"] == "done" and lines[-1]["finish_reason"] == "cancelled", lines[-1]
assert lines[-1]["usage"]["completion_tokens"] < 400, lines[-1]
# A finished request cannot be cancelled.
try:
    inf.Cancel(handle)
    raise SystemExit("Cancel of a finished request succeeded")
except dbus.DBusException as e:
    assert e.get_dbus_name() == "org.molly.Error.NoSuchRequest", e.get_dbus_name()
print("stream and cancel ok")
PY
pass "Stream and Cancel"

# --- bad input ---
expect_fail 'InvalidArgs|Invalid argument|not match|signature' busctl --address="$BUS_ADDR" call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1 Generate s "hello"
expect_fail 'InvalidArgs|signature' dbus-send --bus="$BUS_ADDR" --print-reply --dest=org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1.Generate string:hello
expect_fail "key 'max_tokens': expected an integer" call Inference1 Generate 'a{sv}' 2 prompt s hi max_tokens s ten
expect_fail "key 'temperature': expected a number" call Inference1 Generate 'a{sv}' 2 prompt s hi temperature s hot
expect_fail "key 'prompt': expected a string" call Inference1 Generate 'a{sv}' 1 prompt u 3
expect_fail "key 'stop': expected a string or an array" call Inference1 Generate 'a{sv}' 2 prompt s hi stop u 1
expect_fail "key 'lora': expected" call Inference1 Generate 'a{sv}' 2 prompt s hi lora as 1 x
expect_fail "unknown key 'promt'" call Inference1 Generate 'a{sv}' 1 promt s hi
expect_fail "key 'budget': expected a number" call Inference1 Generate 'a{sv}' 2 prompt s hi budget s cheap
expect_fail "budget must be a finite number" call Inference1 Generate 'a{sv}' 2 prompt s hi budget d -1
expect_fail "needs 'prompt'" call Inference1 Generate 'a{sv}' 0
expect_fail "key 'max_tokens': out of range" call Inference1 Generate 'a{sv}' 2 prompt s hi max_tokens x -1
expect_fail "temperature must be" call Inference1 Generate 'a{sv}' 2 prompt s hi temperature d -1
expect_fail "ModelNotFound|does not exist" call Inference1 Generate 'a{sv}' 2 prompt s hi adapter s no-such-adapter
expect_fail "ModelNotFound|does not exist" call Inference1 Generate 'a{sv}' 2 prompt s hi lora 'a(sd)' 1 ghost 1.0
expect_fail "ModelNotFound|does not exist" call Inference1 Generate 'a{sv}' 2 prompt s hi adapter s "otherbase:x"
expect_fail "InvalidArgs|signature" dbus-send --bus="$BUS_ADDR" --print-reply --dest=org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1.Generate dict:string:string:prompt,hello
expect_fail "key 'messages': expected an array" call Inference1 Generate 'a{sv}' 1 messages as 1 hi
expect_fail "needs role and content" call Inference1 Generate 'a{sv}' 1 messages aa{ss} 1 1 role user
expect_fail "is not one of system, user, assistant" call Inference1 Generate 'a{sv}' 1 messages aa{ss} 1 2 role robot content hi
long=$(python3 -c 'print("Once upon a time " * 400)')
expect_fail "ContextLengthExceeded|maximum context length" call Inference1 Generate 'a{sv}' 1 prompt s "$long"
expect_fail "ContextLengthExceeded|maximum context length" call Inference1 Generate 'a{sv}' 2 prompt s hi max_tokens u 100000
expect_fail "no request .* in flight" call Inference1 Cancel o /org/molly/Daemon1/request/999999
expect_fail "ModelNotFound|not loaded|no adapter" call Adapters1 Load s no-such-adapter
expect_fail "not a valid adapter name" call Adapters1 Load s "../../etc/passwd"
# The error names, as gdbus shows them.
G=(gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1)
expect_fail "org.molly.Error.ModelNotFound" "${G[@]}" --method org.molly.Inference1.Generate "{'prompt': <'hi'>, 'adapter': <'ghost'>}"
expect_fail "org.molly.Error.ContextLengthExceeded" "${G[@]}" --method org.molly.Inference1.Generate "{'prompt': <'$long'>}"
expect_fail "org.freedesktop.DBus.Error.InvalidArgs" "${G[@]}" --method org.molly.Inference1.Generate "{'prompt': <'hi'>, 'seed': <'x'>}"
expect_fail "org.molly.Error.NoSuchRequest" "${G[@]}" --method org.molly.Inference1.Cancel /org/molly/Daemon1/request/1
expect_fail "org.molly.Error.InvalidRequest" "${G[@]}" --method org.molly.Inference1.Generate "{'prompt': <'hi'>, 'top_p': <2.0>}"
pass "bad input is refused with clear errors"

# The daemon is still healthy after all that.
expect_out '"finish_reason" s "length"' call Inference1 Generate 'a{sv}' 2 prompt s "Once" max_tokens u 3
expect_out '"finish_reason" s "length"' call Inference1 Generate 'a{sv}' 3 prompt s "Once" max_tokens u 3 budget d 0.5
kill -0 "$MOLLYD_PID" || fail "mollyd died"
mollyd_stop
pass "clean shutdown"
