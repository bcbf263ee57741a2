#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Who may do what: mollyd started as root switches to its user without capabilities; the bus
# policy lets the asking group call Inference1 and refuses strangers; administrative methods
# are refused to another uid (setpriv) unless it is in AdminGroup= or an Admin= member; a
# member's Models= limits what it may ask for. No polkit runs here, so it is never asked
# successfully.
source "$(dirname "$0")/lib/common.sh"
need setpriv gdbus
[ "$(id -u)" -eq 0 ] || skip "needs root (setpriv to other users, privilege drop)"
getent passwd "$TEST_DAEMON_USER" >/dev/null || skip "no user $TEST_DAEMON_USER"
getent group staff >/dev/null || skip "no group staff"
STAFF_GID=$(getent group staff | cut -d: -f3)

bus_start
write_config "User=$TEST_DAEMON_USER" "AdminGroup=staff"
mollyd_start

# --- the daemon runs as its user with nothing left of root ---
st=/proc/$MOLLYD_PID/status
DUID=$(id -u "$TEST_DAEMON_USER")
grep -Eq "^Uid:[[:space:]]+$DUID[[:space:]]+$DUID[[:space:]]+$DUID[[:space:]]+$DUID" "$st" || fail "uids: $(grep ^Uid "$st")"
grep -Eq "^CapEff:[[:space:]]+0+$" "$st" || fail "effective capabilities: $(grep ^CapEff "$st")"
grep -Eq "^CapPrm:[[:space:]]+0+$" "$st" || fail "permitted capabilities: $(grep ^CapPrm "$st")"
grep -Eq "^CapBnd:[[:space:]]+0+$" "$st" || fail "bounding set: $(grep ^CapBnd "$st")"
grep -Eq "^NoNewPrivs:[[:space:]]+1" "$st" || fail "no_new_privs: $(grep ^NoNewPrivs "$st")"
[ "$(stat -c %U "$T/state/adapters")" = "$TEST_DAEMON_USER" ] || fail "adapter directory not owned by $TEST_DAEMON_USER"
pass "dropped to $TEST_DAEMON_USER without capabilities"

ASK=(as_uid "$ASK_UID" "$ASK_UID" "")
ADMIN_BY_GROUP=(as_uid "$ASK_UID" "$ASK_UID" "$STAFF_GID")
STRANGER=(as_uid "$STRANGER_UID" "$STRANGER_UID" "")

# --- asking: the group may, a stranger may not (bus policy) ---
expect_out '"finish_reason"' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1 Generate 'a{sv}' 2 prompt s "Once" max_tokens u 3
expect_out 'stories260K' "${ASK[@]}" busctl --address="$BUS_ADDR" get-property org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Model
expect_out 'requests_total' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1 Status
expect_fail 'Access denied|AccessDenied|rejected' "${STRANGER[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1 Generate 'a{sv}' 1 prompt s "Once"
expect_fail 'AccessDenied|Rejected' "${STRANGER[@]}" dbus-send --bus="$BUS_ADDR" --print-reply --dest=org.molly.Daemon1 /org/molly/Daemon1 org.molly.Daemon1.Status
# The daemon's user may own the name; nobody else may.
expect_fail 'Permission denied|Access denied|AccessDenied|not allowed' "${ASK[@]}" gdbus call --address "$BUS_ADDR" --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus --method org.freedesktop.DBus.RequestName org.molly.Daemon1 4
pass "bus policy: group may ask, strangers may not, nobody else may own the name"

# --- administration: root may ---
expect_out '^s "lora"' call Adapters1 Import 'sa{sv}' "$LORA" 1 name s lora
expect_out '' call Adapters1 Load s lora
expect_out '' call Adapters1 Pin s lora
expect_out '' call Adapters1 Unpin s lora
expect_out '' call Adapters1 Unload s lora
expect_out '' call Daemon1 Reload
pass "root administers"

# --- another uid is refused every administrative method ---
for m in "Adapters1 Load s lora" "Adapters1 Unload s lora" "Adapters1 Pin s lora" "Adapters1 Unpin s lora" "Daemon1 Reload"; do
	set -- $m
	# (busctl prints AccessDenied as "Access denied"; gdbus below shows the daemon's reason)
	expect_fail 'Access denied' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 "org.molly.$1" "${@:2}"
done
expect_fail 'Access denied' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Adapters1 Import 'sa{sv}' "$LORA" 1 name s lora2
# The refusal comes from the daemon (the bus let it through), and says what would allow it.
expect_fail 'org.freedesktop.DBus.Error.AccessDenied: Load needs an administrator.*AdminGroup=.*polkit' "${ASK[@]}" dbus-send --bus="$BUS_ADDR" --print-reply --dest=org.molly.Daemon1 /org/molly/Daemon1 org.molly.Adapters1.Load string:lora
expect_fail 'AccessDenied.*Reload needs an administrator' "${ASK[@]}" gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 --method org.molly.Daemon1.Reload
expect_fail 'try with sudo' "${ASK[@]}" "$MOLLY" --bus-address="$BUS_ADDR" adapters load lora
# ... while reading the list is fine.
expect_out 'lora' "${ASK[@]}" "$MOLLY" --bus-address="$BUS_ADDR" adapters list
pass "another uid is refused administrative methods"

# --- AdminGroup=staff: the same uid with staff among its groups may ---
expect_out '' "${ADMIN_BY_GROUP[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Adapters1 Load s lora
expect_out '' "${ADMIN_BY_GROUP[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Adapters1 Unload s lora
pass "AdminGroup= members administer"

# --- members: Admin=yes by uid, and Models= scopes (applied by Reload) ---
cat >> "$T/mollyd.conf" <<CONF
[Member nobody]
UIDs=$ASK_UID
Models=stories260K
Admin=yes
CONF
call Daemon1 Reload >/dev/null || fail "Reload"
expect_out '' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Adapters1 Load s lora
expect_out '"finish_reason"' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1 Generate 'a{sv}' 2 prompt s "Once" max_tokens u 2
expect_fail 'Access denied' "${ASK[@]}" busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 org.molly.Inference1 Generate 'a{sv}' 2 prompt s "Once" adapter s lora
expect_fail "AccessDenied.*member .nobody. may not use model .lora." "${ASK[@]}" gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 --method org.molly.Inference1.Generate "{'prompt': <'Once'>, 'adapter': <'lora'>}"
# root is not a member: no scopes apply to it.
expect_out '"model" s "lora"' call Inference1 Generate 'a{sv}' 3 prompt s "Once" adapter s lora max_tokens u 2
pass "member Admin= and Models= scopes"

# --- Cancel: only the caller (or root) may cancel a stream ---
mollyd_stop
pass "clean shutdown as $TEST_DAEMON_USER"
