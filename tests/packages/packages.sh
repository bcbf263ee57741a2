#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The distribution packages end to end, as root on this machine (ctest label "packages"):
#   1. tools/build-packages.sh from a clean export: the .debs as version V (the tree's) and the
#      same build packaged again as V+1 (--upgrade-to), and the RPMs; lintian; the RPMs' file
#      list against the .debs'.
#   2. apt-get install ./*.deb (V): the user and group, directories, conffile, unit enabled
#      (no systemd as init here: the symlinks), molly_shim built by DKMS for every kernel in
#      /lib/modules that has headers (not `uname -r`, the host's, which has none).
#   3. The installed mollyd with the packaged /etc/molly/mollyd.conf on a private system bus
#      that reads the installed D-Bus policy: it answers over D-Bus and HTTP; `molly status`
#      works for a member of group molly and not for a stranger; `man mollyd` renders;
#      systemd-analyze verify and security on the installed unit; the completions load.
#      The model: the packaged config leaves [Model] Path= unset, so mollyd serves the one
#      mollyd's package ships, /usr/share/molly/models/molly-mini.gguf (issue 20).
#   4. A changed conffile and the state directory survive the upgrade to V+1.
#   5. apt-get remove keeps conffile and state, purge removes them; afterwards nothing named
#      molly is left but the user and group (file lists before and after compared).
# It writes into the real /, so it refuses to run where Molly is installed already or its
# paths exist, and purges everything it installed on any exit.
set -uo pipefail
: "${MOLLY_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

[ "$(id -u)" -eq 0 ] || skip "installs packages into /: needs root"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || skip "not a Debian system (no apt-get)"
for p in mollyd molly-tools libmolly1 libmolly-dev molly-dkms; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qE "ok (installed|config-files)" &&
		skip "package $p is on this machine already: this test installs and purges its own"
done
for d in /etc/molly /var/lib/molly /run/molly /usr/lib/sysusers.d/molly.conf; do
	[ -e "$d" ] && skip "$d exists: this test would remove it on purge"
done

T=$(mktemp -d /tmp/molly-packages.XXXXXX)
chmod 755 "$T"
BUS_PID= DAEMON_PID=
man_cache=()
user_before=0 group_before=0
getent passwd molly >/dev/null && user_before=1
getent group molly >/dev/null && group_before=1
APT=(apt-get -o DPkg::Lock::Timeout=600 -y -q)
export DEBIAN_FRONTEND=noninteractive
cleanup() {
	local rc=$?
	[ -n "$DAEMON_PID" ] && kill -KILL "$DAEMON_PID" 2>/dev/null
	[ -n "$BUS_PID" ] && kill "$BUS_PID" 2>/dev/null
	# whatever got installed goes, state and conffiles included
	local pkgs=()
	for p in mollyd molly-tools libmolly-dev libmolly1 molly-dkms; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qE "ok (installed|config-files)|half" && pkgs+=("$p")
	done
	if ((${#pkgs[@]})); then
		# (dpkg has no lock timeout: wait for another apt run's lock ourselves)
		for _ in $(seq 120); do
			dpkg --purge "${pkgs[@]}" >"$T/cleanup.log" 2>&1 && break
			grep -q "lock" "$T/cleanup.log" || { cat "$T/cleanup.log" >&2; break; }
			sleep 5
		done
	fi
	rm -f "${man_cache[@]}"
	# The package keeps the user and group, as Debian does (checked below); a test machine
	# gets back the accounts it had.
	((user_before)) || userdel molly 2>/dev/null
	((group_before)) || groupdel molly 2>/dev/null
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/mollyd.log" ] && tail -30 "$T/mollyd.log" >&2
	rm -rf "$T"
	exit $rc
}
trap cleanup EXIT

# Everything named *molly* outside the places that are not the system's (sources, tests'
# temporary folders, this machine's workspaces).
molly_paths() {
	find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /var/tmp \
		-o -path /work -o -path /home -o -path /root -o -path /srv \) -prune \
		-o -iname '*molly*' -print 2>/dev/null | sort
}

### 1. build
start=$(date +%s)
version=$(sed -n 's/^project(molly VERSION \([0-9.]*\).*/\1/p' "$MOLLY_SOURCE_DIR/CMakeLists.txt")
next=$version+1
if [ -n "${MOLLY_PACKAGES_DIR:-}" ]; then
	# (development: packages built earlier with tools/build-packages.sh --upgrade-to V+1)
	cp -r "$MOLLY_PACKAGES_DIR" "$T/out"
	echo "# packages from $MOLLY_PACKAGES_DIR (not built by this run)"
else
	"$MOLLY_SOURCE_DIR/tools/build-packages.sh" --out "$T/out" --upgrade-to "$next" >"$T/build.log" 2>&1 ||
		{ tail -40 "$T/build.log"; fail "tools/build-packages.sh"; }
	echo "# packages built in $(($(date +%s) - start)) s"
fi
V=() V1=()
for p in mollyd molly-tools libmolly1 libmolly-dev molly-dkms; do
	f=$(ls "$T/out/${p}_${version}_"*.deb 2>/dev/null) || fail "no $p $version .deb"
	V+=("$f")
	f=$(ls "$T/out/${p}_${next}_"*.deb 2>/dev/null) || fail "no $p $next .deb"
	V1+=("$f")
done
ls "$T/out"/*.rpm >/dev/null 2>&1 || fail "no RPMs"
pass "the .debs (V=$version, V+1=$next) and the RPMs are built"

# lintian: no error or warning tag
if command -v lintian >/dev/null; then
	lintian --fail-on error,warning "${V[@]}" >"$T/lintian.log" 2>&1 ||
		{ cat "$T/lintian.log"; fail "lintian"; }
	pass "lintian: no errors or warnings"
fi

# The RPMs hold the files the .debs hold (files and links; directories are implied). What
# differs is each distribution's layout, normalized here: /lib vs /usr/lib (bookworm keeps units
# and udev rules in /lib), the multiarch libdir vs lib64, zsh's vendor directory, compressed man
# pages; and each one's documentation directory, which is left out.
normalize() {
	sed -e 's|^\./|/|' -e 's|^/lib/|/usr/lib/|' -e 's|^/usr/lib/x86_64-linux-gnu/|/usr/lib64/|' \
		-e 's|/zsh/vendor-completions/|/zsh/site-functions/|' -e 's|\.gz$||' |
		grep -v -e '^/usr/share/doc/' -e '^/usr/share/licenses/' | sort -u
}
for d in "${V[@]}"; do
	dpkg-deb --fsys-tarfile "$d" | tar -tv | awk '$1 !~ /^d/ { print $6 }'
done | normalize >"$T/deb.files"
for r in "$T/out"/*.rpm; do
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$r" 2>/dev/null | awk '$1 !~ /^d/ { print $2 }'
done | normalize >"$T/rpm.files"
[ "$(wc -l <"$T/deb.files")" -gt 40 ] || fail "only $(wc -l <"$T/deb.files") files in the .debs"
if ! diff "$T/deb.files" "$T/rpm.files" >"$T/files.diff"; then
	sed 's/^</.deb only:/; s/^>/RPM only:/' "$T/files.diff" | grep only
	fail "the RPMs and the .debs hold different files"
fi
pass "the RPMs hold the .debs' $(wc -l <"$T/deb.files") files and links (layouts normalized)"

### 2. install V
molly_paths >"$T/paths.before"
kvers=()
for k in /lib/modules/*; do [ -e "$k/build/Makefile" ] && kvers+=("${k##*/}"); done
"${APT[@]}" install --no-install-recommends "${V[@]}" >"$T/install.log" 2>&1 ||
	{ tail -40 "$T/install.log"; fail "apt-get install V"; }
getent passwd molly >/dev/null || fail "no user molly after install"
getent group molly >/dev/null || fail "no group molly after install"
[ "$(stat -c %U:%G /var/lib/molly)" = molly:molly ] || fail "/var/lib/molly is $(stat -c %U:%G /var/lib/molly)"
[ -d /var/lib/molly/adapters ] || fail "tmpfiles.d did not make /var/lib/molly/adapters"
dpkg-query -W -f='${Conffiles}\n' mollyd | grep -q '/etc/molly/mollyd.conf ' ||
	fail "/etc/molly/mollyd.conf is not a conffile"
[ -L /etc/systemd/system/multi-user.target.wants/mollyd.service ] || fail "the unit is not enabled"
[ -L /etc/systemd/system/dbus-org.molly.Daemon1.service ] || fail "the unit's D-Bus alias is not made"
molly_paths >"$T/paths.installed"
grep -qx /usr/sbin/mollyd "$T/paths.installed" || fail "the path list does not see the installed files"
pass "installed: user and group molly, /var/lib/molly, conffile, unit enabled"

for k in "${kvers[@]}"; do
	modinfo -F version "/lib/modules/$k/updates/dkms/molly_shim.ko" >/dev/null 2>&1 ||
		{ dkms status; fail "DKMS did not install molly_shim for $k"; }
done
if ((${#kvers[@]})); then
	pass "DKMS built molly_shim for ${kvers[*]} (the host's $(uname -r) has no headers: postinst succeeded)"
else
	echo "# no kernel headers in /lib/modules: DKMS built nothing (postinst succeeded)"
fi

### 3. the installed daemon with the packaged configuration
[ -r /usr/share/molly/models/molly-mini.gguf ] || fail "mollyd's package has no molly-mini.gguf"
molly config check /etc/molly/mollyd.conf >/dev/null || fail "molly config check of the packaged config"
sed -e "s|@SOCKET@|$T/system.sock|" -e "s|@POLICYDIR@|/usr/share/dbus-1/system.d|" \
	"$MOLLY_SOURCE_DIR/tests/integration/lib/private-system.conf.in" >"$T/system.conf"
out=$(dbus-daemon --config-file="$T/system.conf" --fork --nopidfile --print-address=1 --print-pid=1) ||
	fail "dbus-daemon"
BUS=$(sed -n 1p <<<"$out") BUS_PID=$(sed -n 2p <<<"$out")
chmod 666 "$T/system.sock"
port=$(sed -n 's/^Listen=127.0.0.1:\([0-9]*\)$/\1/p' /etc/molly/mollyd.conf)
if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
	# another program has the packaged port on this machine: a drop-in moves HTTP (this test
	# removes it with the state on purge)
	echo "# port $port is taken here: HTTP on 127.0.0.1:0 via a drop-in"
	printf '[HTTP]\nListen=unix:/run/molly/http-test.sock\n' >/etc/molly/mollyd.conf.d/90-test.conf
	http=(--unix-socket /run/molly/http-test.sock http://localhost)
else
	http=("http://127.0.0.1:$port")
fi
# As the unit runs it (ExecStart=/usr/sbin/mollyd, as root; it drops to molly itself),
# without systemd: the state and run-time directories come from tmpfiles.d.
DBUS_SYSTEM_BUS_ADDRESS=$BUS MOLLY_DEV_CUSE=0 /usr/sbin/mollyd --log-target=stderr >"$T/mollyd.log" 2>&1 &
DAEMON_PID=$!
deadline=$(($(date +%s) + ${MOLLY_TEST_WAIT_S:-120})) # a hang bound, as the other tests' (tests/integration/lib)
until busctl --address="$BUS" status org.molly.Daemon1 >/dev/null 2>&1 && curl -sf "${http[@]}/health" >/dev/null 2>&1; do
	kill -0 "$DAEMON_PID" 2>/dev/null || fail "the installed mollyd exited"
	[ "$(date +%s)" -lt "$deadline" ] || fail "the installed mollyd did not answer within ${MOLLY_TEST_WAIT_S:-120} s"
	sleep 0.2
done
[ "$(ps -o user= -p "$DAEMON_PID")" = molly ] || fail "mollyd runs as $(ps -o user= -p "$DAEMON_PID"), not molly"
pass "the installed mollyd starts with /etc/molly/mollyd.conf and runs as molly"

member=(setpriv --reuid=nobody --regid=nogroup --groups="$(getent group molly | cut -d: -f3)")
out=$("${member[@]}" env DBUS_SYSTEM_BUS_ADDRESS="$BUS" molly status 2>&1) || fail "molly status as a member of group molly: $out"
grep -q molly-mini <<<"$out" || fail "molly status does not name the default model molly-mini: $out"
out=$("${member[@]}" env DBUS_SYSTEM_BUS_ADDRESS="$BUS" molly ask "Once upon" --transport dbus --max-tokens 4 --seed 1 2>&1) ||
	fail "molly ask over D-Bus as a member of group molly: $out"
if setpriv --reuid=bin --regid=bin --clear-groups env DBUS_SYSTEM_BUS_ADDRESS="$BUS" molly status >/dev/null 2>&1; then
	fail "molly status worked for uid bin, not in group molly"
fi
pass "over D-Bus: molly status and ask for a member of group molly, refused to a stranger"
out=$(curl -sf "${http[@]}/v1/models") || fail "GET /v1/models"
grep -q '"object": *"list"' <<<"$out" && grep -q '"molly-mini"' <<<"$out" || fail "/v1/models: $out"
out=$(curl -sf "${http[@]}/v1/completions" -H 'Content-Type: application/json' \
	-d '{"model": "molly-mini", "prompt": "Once upon", "max_tokens": 4, "seed": 1}') || fail "POST /v1/completions"
grep -q '"text_completion"' <<<"$out" || fail "/v1/completions: $out"
pass "over HTTP: /v1/models and /v1/completions"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "mollyd did not stop cleanly on SIGTERM (exit $?)"
DAEMON_PID=

# man-db caches the pages it formats (/var/cache/man/catN): the test's own traces, removed
# at the end (a page that was cached before stays)
for page in mollyd.8 mollyd.conf.5 molly.1 molly.4 molly-run.1 molly-bench.1 molly-tokenize.1; do
	f=/var/cache/man/cat${page##*.}/$page.gz
	grep -qx "$f" "$T/paths.before" || man_cache+=("$f")
done
MANWIDTH=80 man mollyd 2>"$T/man.err" | grep -q "the Molly inference service" || fail "man mollyd does not render"
for page in mollyd.8 mollyd.conf.5 molly.1 molly.4 molly-run.1 molly-bench.1 molly-tokenize.1; do
	w=$(MANWIDTH=80 man --warnings -E UTF-8 "${page##*.}" "${page%.*}" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man --warnings ${page}: $w"
done
pass "man mollyd renders; man --warnings is silent on the installed pages"

command -v systemd-analyze >/dev/null || fail "systemd-analyze missing (a dependency of mollyd)"
out=$(systemd-analyze verify /lib/systemd/system/mollyd.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"
score=$(systemd-analyze security --offline=true /lib/systemd/system/mollyd.service 2>/dev/null |
	sed -n 's/.*Overall exposure level for mollyd.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "systemd-analyze security gave no score"
pass "systemd-analyze verify of the installed unit; security exposure $score"

out=$(bash -c 'source /usr/share/bash-completion/bash_completion
	source /usr/share/bash-completion/completions/molly
	COMP_WORDS=(molly adapters p); COMP_CWORD=2; COMP_LINE="molly adapters p"; COMP_POINT=${#COMP_LINE}
	_molly; echo "${COMPREPLY[*]}"' 2>&1)
[ "$out" = "pin prefetch" ] || fail "bash completion of 'molly adapters p': '$out'"
if command -v zsh >/dev/null; then
	zsh -n /usr/share/zsh/vendor-completions/_molly || fail "zsh completion does not parse"
	zsh -fc 'fpath=(/usr/share/zsh/vendor-completions $fpath); autoload -Uz compinit; compinit -u -D
		[[ ${_comps[molly]} = _molly ]]' || fail "zsh does not bind _molly to molly"
fi
pass "bash and zsh completion for molly"

### 4. upgrade V -> V+1
echo "# a local change" >>/etc/molly/mollyd.conf
sed -i 's/^LogLevel=info$/LogLevel=notice/' /etc/molly/mollyd.conf
conf_sum=$(md5sum </etc/molly/mollyd.conf)
echo keep >/var/lib/molly/upgrade-marker
state_before=$(cd /var/lib/molly && find . | sort | md5sum)
"${APT[@]}" install --no-install-recommends -o Dpkg::Options::=--force-confdef \
	-o Dpkg::Options::=--force-confold "${V1[@]}" >"$T/upgrade.log" 2>&1 ||
	{ tail -40 "$T/upgrade.log"; fail "apt-get install V+1"; }
[ "$(dpkg-query -W -f='${Version}' mollyd)" = "$next" ] || fail "mollyd is $(dpkg-query -W -f='${Version}' mollyd) after the upgrade"
[ "$(md5sum </etc/molly/mollyd.conf)" = "$conf_sum" ] || fail "the upgrade changed the edited conffile"
[ ! -e /etc/molly/mollyd.conf.dpkg-dist ] || fail "dpkg asked about the conffile (a .dpkg-dist appeared)"
[ "$(cd /var/lib/molly && find . | sort | md5sum)" = "$state_before" ] || fail "the upgrade changed /var/lib/molly"
pass "upgrade $version -> $next keeps the changed conffile and the state directory"

### 5. remove, purge
"${APT[@]}" remove mollyd molly-tools libmolly-dev libmolly1 molly-dkms >"$T/remove.log" 2>&1 ||
	{ tail -40 "$T/remove.log"; fail "apt-get remove"; }
[ ! -e /usr/sbin/mollyd ] || fail "mollyd is still there after remove"
[ -f /etc/molly/mollyd.conf ] || fail "remove took the conffile"
[ -f /var/lib/molly/upgrade-marker ] || fail "remove took the state"
for k in "${kvers[@]}"; do
	[ ! -e "/lib/modules/$k/updates/dkms/molly_shim.ko" ] || fail "molly_shim.ko of $k is still there after remove"
done
pass "remove: programs and module gone, conffile and state kept"
# what remove left: the packages with conffiles (libraries and tools are gone entirely)
left=()
for p in mollyd molly-tools libmolly-dev libmolly1 molly-dkms; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q config-files && left+=("$p")
done
[ "${left[*]}" = mollyd ] || fail "after remove, these keep configuration: '${left[*]}' (expected mollyd)"
"${APT[@]}" purge "${left[@]}" >"$T/purge.log" 2>&1 || { tail -40 "$T/purge.log"; fail "apt-get purge"; }
for p in mollyd molly-tools libmolly-dev libmolly1 molly-dkms; do
	! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qE "ok (installed|config-files|half)" ||
		fail "$p is still known to dpkg after purge"
done
rm -f "${man_cache[@]}"
molly_paths >"$T/paths.after"
diff "$T/paths.before" "$T/paths.after" >"$T/paths.diff" || { cat "$T/paths.diff"; fail "purge left files behind"; }
for d in /etc/molly /var/lib/molly /run/molly /etc/systemd/system/mollyd.service.d; do
	[ ! -e "$d" ] || fail "$d is still there after purge"
done
getent passwd molly >/dev/null || fail "purge removed the user molly (Debian keeps system users)"
getent group molly >/dev/null || fail "purge removed the group molly"
pass "purge: nothing named molly left ($(wc -l <"$T/paths.before") such paths before and after), user and group kept"
echo "# total $(($(date +%s) - start)) s"
