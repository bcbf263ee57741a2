#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs every test: the unit and integration tests under ASan+UBSan (preset dev),
# again optimised (preset release), then the libFuzzer targets (preset fuzz: each seed corpus
# once, then $MOLLY_FUZZ_SECONDS of fuzzing per target, default 60).
#
# Skips are not passes: a test that exits 77 is counted apart, listed with its reason, and the
# run says which skips this machine explains (no ../shared, not root) and which it does not.
# The last line is "N passed, N skipped, N failed".
#
# MOLLY_TEST_LABELS=REGEX runs only the ctest tests with a matching label (unit, integration,
# root, fuzz, guest: the qemu guest of tests/guest/run.sh, in the release preset), e.g. MOLLY_TEST_LABELS=unit for a quick run; MOLLY_TEST_PRESETS="dev" picks
# the presets (default "dev release fuzz").
# --peers runs only the tests against the pinned llama.cpp (label peers, tests/peers/*.sh; the
# first run builds llama.cpp with ../shared/peers/llama-cpp.sh), in the release preset unless
# MOLLY_TEST_PRESETS says otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

passed=0
skipped=0
failed=0
jobs=$(nproc)
fuzz_seconds=${MOLLY_FUZZ_SECONDS:-60}
presets=${MOLLY_TEST_PRESETS:-dev release fuzz}
label_args=()
[ -n "${MOLLY_TEST_LABELS:-}" ] && label_args=(-L "$MOLLY_TEST_LABELS")
if [ "${1:-}" = --peers ]; then
	# the presets exclude gpu|peers; a command-line -LE replaces that
	label_args=(-L peers -LE gpu)
	presets=${MOLLY_TEST_PRESETS:-release}
fi
report=$(mktemp -d)
# Debian's python3 when there (a pyenv shim on PATH costs seconds a start on a busy machine)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
trap 'rm -rf "$report"' EXIT

# tally PRESET JUNIT-FILE: adds ctest's counts; notes each skip (with the reason the test
# printed) and each failure in $report.
tally() {
	local counts
	if ! counts=$("$py" - "$1" "$2" "$report" <<'PY'
import sys, xml.etree.ElementTree as ET
preset, path, report = sys.argv[1:4]
suite = ET.parse(path).getroot()
p = s = f = 0
with open(report + "/skips", "a") as skips, open(report + "/fails", "a") as fails:
    for case in suite.iter("testcase"):
        name, status = case.get("name"), case.get("status")
        out = (case.findtext("system-out") or "").splitlines()
        if status == "skipped" or case.find("skipped") is not None:
            s += 1
            # the test's own "SKIP: reason" line (shell tests, test.h), else its last words
            reason = next((l.split("SKIP", 1)[1].lstrip(":- ") for l in reversed(out)
                           if "SKIP" in l),
                          next((l for l in reversed(out) if l.strip()), "no reason printed"))
            skips.write("%s: %s: %s\n" % (preset, name, reason.strip()[:200]))
        elif status == "fail" or case.find("failure") is not None:
            f += 1
            fails.write("%s: %s\n" % (preset, name))
        elif status == "run":
            p += 1
print(p, s, f)
PY
	); then
		echo "=== $1: no readable test report"
		failed=$((failed + 1))
		return
	fi
	read -r p s f <<<"$counts"
	echo "=== $1: $p passed, $s skipped, $f failed"
	passed=$((passed + p))
	skipped=$((skipped + s))
	failed=$((failed + f))
}

for preset in $presets; do
	echo "=== $preset: configure and build"
	extra=()
	[ "$preset" = fuzz ] && extra=(-DMOLLY_FUZZ_SECONDS="$fuzz_seconds")
	if ! { cmake --preset "$preset" "${extra[@]}" >/dev/null &&
		cmake --build --preset "$preset" -j "$jobs"; }; then
		echo "=== $preset: BUILD FAILED"
		echo "$preset: the build" >>"$report/fails"
		failed=$((failed + 1))
		continue
	fi
	echo "=== $preset: tests"
	junit=$report/$preset.xml
	ctest --preset "$preset" -j "$jobs" "${label_args[@]}" --output-junit "$junit"
	tally "$preset" "$junit"
done

if [ -s "$report/skips" ]; then
	echo "=== skipped ($skipped):"
	sed 's/^/  /' "$report/skips"
	# What this machine explains; any other skip is a finding, shown as such.
	explained=()
	[ -d ../shared/models ] || explained+=("../shared is missing: tests that read its models skip")
	[ "$(id -u)" -eq 0 ] || explained+=("not root: the eBPF egress tests skip")
	if ((${#explained[@]})); then
		printf '  explained by this machine: %s\n' "${explained[@]}"
	else
		echo "  NOT EXPLAINED by this machine (../shared present, root): $skipped skipped tests"
	fi
fi
if [ -s "$report/fails" ]; then
	echo "=== failed ($failed):"
	sed 's/^/  /' "$report/fails"
fi
echo "$passed passed, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
