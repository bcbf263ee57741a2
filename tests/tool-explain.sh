#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `molly [--json] explain [--] TEXT` from the build tree, no daemon, no installation: the class,
# the findings with kind, span, class, layer and score (text and --json), and the argument rule
# (docs/policy.md): a prompt that starts with dashes works with and without "--"; what looks
# like an option (--WORD, --WORD=VALUE, -LETTER) and is not one is reported; "-" is stdin.
set -uo pipefail
bin=${MOLLY_BIN_DIR:?}
molly=$bin/molly
[ -x "$molly" ] || { echo "skip: $molly is not built"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
passed=0 failed=0
ok() { echo "$1 ok"; passed=$((passed + 1)); }
bad() { echo "$1 FAILED${2:+: $2}"; failed=$((failed + 1)); }

# No configuration: an empty file stands for "none" when this machine has a daemon's config.
cfg=()
if [ -e /etc/molly/mollyd.conf ]; then
	: >"$t/empty.conf"
	cfg=(--config "$t/empty.conf")
fi

KEY='-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACBz2l5dXk9hQnR8Q0kK3vJ2s1m0Wqz5o7d9cYb8UeQ4ZgAAAJgAAAAAAAAA
-----END OPENSSH PRIVATE KEY-----'

# json ARGS...: the --json answer's class and its findings' kinds, layers and scores
json() {
	"$molly" --json explain "${cfg[@]}" "$@" | "$py" -c '
import json, sys
d = json.load(sys.stdin)
print(d["class"], " ".join("%s/%s/%s/%.2f/%d-%d" % (f["kind"], f["class"], f["layer"], f["score"], f["start"], f["end"]) for f in d["findings"]))'
}

# A prompt that starts with dashes, without "--" (the bug) and with it.
out=$("$molly" explain "${cfg[@]}" "$KEY" 2>&1) && [[ "$out" == *"Class: secret"* ]] &&
	ok dashes_without_separator || bad dashes_without_separator "$out"
out=$("$molly" explain "${cfg[@]}" -- "$KEY" 2>&1) && [[ "$out" == *"Class: secret"* ]] &&
	ok dashes_after_separator || bad dashes_after_separator "$out"
out=$(json "$KEY") && [[ "$out" == "secret private_key/secret/detector/1.00/0-"* ]] &&
	ok dashes_json || bad dashes_json "$out"
# Options after the prompt still count; --json after "--" is the prompt.
out=$("$molly" explain "${cfg[@]}" "$KEY" --json 2>&1) && [[ "$out" == '{"class":"secret"'* ]] &&
	ok option_after_prompt || bad option_after_prompt "$out"
out=$("$molly" explain "${cfg[@]}" -- --json 2>&1) && [[ "$out" == "Class: public"* ]] &&
	ok json_as_text || bad json_as_text "$out"
for p in "---" "- item" "-5 degrees tonight" "--no such option" "-----" "--5"; do
	out=$("$molly" explain "${cfg[@]}" "$p" 2>&1) && [[ "$out" == "Class: public"* ]] &&
		ok "text '$p'" || bad "text '$p'" "$out"
done
# Mistyped options are reported, not explained.
for p in --jsno -j --config=; do
	if [ "$p" = --config= ]; then
		out=$("$molly" explain --confg=x "hello" 2>&1)
	else
		out=$("$molly" explain "$p" "hello" 2>&1)
	fi
	rc=$?
	[ $rc = 2 ] && [[ "$out" == *"unknown option"* && "$out" == *"after '--'"* ]] &&
		ok "typo $p" || bad "typo $p" "rc=$rc $out"
done
out=$("$molly" explain --config 2>&1); [ $? = 2 ] && [[ "$out" == *"needs a FILE"* ]] &&
	ok config_without_file || bad config_without_file "$out"
out=$("$molly" explain "${cfg[@]}" one two 2>&1); [ $? = 2 ] && [[ "$out" == *"one PROMPT only"* ]] &&
	ok two_prompts || bad two_prompts "$out"
out=$("$molly" explain 2>&1); [ $? = 2 ] && [[ "$out" == *"Usage: molly explain"* ]] &&
	ok no_prompt || bad no_prompt "$out"
out=$("$molly" explain --help 2>&1) && [[ "$out" == *"-LETTER"* ]] && ok help || bad help "$out"
# "-" is standard input; after "--" it is the text "-".
out=$(printf 'mail mario.rossi@example.com now' | json -) &&
	[ "$out" = "personal email/personal/detector/1.00/5-28" ] && ok stdin || bad stdin "$out"
out=$(json -- - </dev/null) && [ "$out" = "public " ] && ok dash_after_separator ||
	bad dash_after_separator "$out"

# Findings: kind, span, class, layer, score, in text and JSON; rules are layer "rule".
cat >"$t/rules.conf" <<'EOF'
[Rule project]
Match=keyword:bluebird
Class=personal
EOF
out=$(json --config "$t/rules.conf" "the bluebird plan, token=sk-proj-Q7wErTy9uIoP3aSdFgHjKlZx8cVbNm42") &&
	[[ "$out" == "secret rule/personal/rule/1.00/4-12 api_key/secret/detector/1.00/"* ]] &&
	ok findings_json || bad findings_json "$out"
out=$("$molly" explain --config "$t/rules.conf" "the bluebird plan" 2>&1) &&
	grep -Eq '^  rule +\[4, 12\) +personal +rule +1\.00  \[Rule project\]$' <<<"$out" &&
	ok findings_text || bad findings_text "$out"
out=$("$molly" --json explain "${cfg[@]}" "hello" | "$py" -c '
import json, sys
d = json.load(sys.stdin)
assert d["special_score"] == 0 and d["findings"] == [] and d["permitted_tiers"] == ["T0", "T1"], d
print("fine")') && ok json_fields || bad json_fields "$out"

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
