#!/usr/bin/env bash
# run.sh - the service as an administrator installs it: `make install`
# into scratch DESTDIRs, then the installed tree checked the way Debian
# would run it. Needs no servers, no root and no running systemd.
#
#   tests/install/run.sh
#
# Checks, in order:
#   - make install DESTDIR=... PREFIX=/usr puts the binary in /usr/sbin,
#     the SQL files and the alert rules in /usr/share/seckilld, the man page in section 8, the
#     unit in /usr/lib/systemd/system and the settings example in
#     /etc/seckilld, with their modes, and nothing else; each is the
#     repository's file (the unit: its template with the paths filled in);
#   - the installed page formats without a groff warning, through man -l;
#   - systemd-analyze verify says nothing about the installed unit, with
#     its ExecStart pointed into DESTDIR and MANPATH there (so the binary
#     and the man page of Documentation= are the installed ones), and does
#     complain about a copy with a bad setting;
#   - systemd-analyze security rates the unit's exposure 2.0 or lower;
#   - TimeoutStopSec is above the binary's default SECKILL_DRAIN_S plus
#     time to finish, and LimitNOFILE above its default SECKILL_MAX_CONN;
#   - installing again leaves an existing seckilld.env alone;
#   - with the default PREFIX the unit's paths follow it (/usr/local/sbin,
#     /usr/local/etc), and SYSCONFDIR= moves the settings file.
# Prints one line per check and "install: ok", or the first failure and
# exits 1.
set -euo pipefail
# The file list's order, and tools' messages in English.
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

fail() {
    echo "install: FAIL: $*" >&2
    exit 1
}
ok() { echo "install: ok: $*"; }

for tool in systemd-analyze groff man; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail "$tool not found (scripts/deps.sh installs it)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/seckill-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

# make install into a fresh directory under $work; extra make arguments
# follow the directory's name.
install_into() { # name [VAR=value...]
    local dest=$work/$1
    shift
    make -C "$ROOT" --no-print-directory -s install DESTDIR="$dest" "$@" \
        >"$work/install.log" 2>&1 ||
        fail "make install $*: $(tail -5 "$work/install.log")"
}

# The value of a unit's directive (the last one set).
unit_value() { # file key
    sed -n "s/^$2=//p" "$1" | tail -1
}

# ---- make install PREFIX=/usr ----

dest=$work/usr
install_into usr PREFIX=/usr
expected="644 etc/seckilld/seckilld.env.example
644 usr/lib/systemd/system/seckilld.service
755 usr/sbin/seckilld
644 usr/share/man/man8/seckilld.8
644 usr/share/seckilld/prometheus-alerts.yml
644 usr/share/seckilld/schema.sql
$(cd "$ROOT/sql/migrations" && for f in *.sql; do echo "644 usr/share/seckilld/migrations/$f"; done)"
expected=$(sort -k2 <<<"$expected")
got=$(cd "$dest" && find . -type f -printf '%m %P\n' | sort -k2)
[[ $got == "$expected" ]] ||
    fail "make install put in place:"$'\n'"$got"$'\n'"expected:"$'\n'"$expected"
cmp -s "$ROOT/build/seckilld" "$dest/usr/sbin/seckilld" ||
    fail "the installed binary is not build/seckilld"
for f in schema.sql $(cd "$ROOT/sql" && echo migrations/*.sql); do
    cmp -s "$ROOT/sql/$f" "$dest/usr/share/seckilld/$f" ||
        fail "the installed $f is not sql/$f"
done
cmp -s "$ROOT/deploy/prometheus/alerts.yml" \
    "$dest/usr/share/seckilld/prometheus-alerts.yml" ||
    fail "the installed prometheus-alerts.yml is not deploy/prometheus's"
cmp -s "$ROOT/docs/seckilld.8" "$dest/usr/share/man/man8/seckilld.8" ||
    fail "the installed man page is not docs/seckilld.8"
cmp -s "$ROOT/deploy/seckilld.env.example" \
    "$dest/etc/seckilld/seckilld.env.example" ||
    fail "the installed seckilld.env.example is not deploy's"
unit=$dest/usr/lib/systemd/system/seckilld.service
! grep -n '@[A-Z]*@' "$unit" || fail "placeholders left in the unit"
[[ $(unit_value "$unit" ExecStart) == "/usr/sbin/seckilld serve" ]] ||
    fail "ExecStart is $(unit_value "$unit" ExecStart)"
[[ $(unit_value "$unit" EnvironmentFile) == /etc/seckilld/seckilld.env ]] ||
    fail "EnvironmentFile is $(unit_value "$unit" EnvironmentFile)"
ok "make install DESTDIR PREFIX=/usr: every file, its mode and content"

# ---- the man page ----

msg=$(MANWIDTH=80 man --warnings -l "$dest/usr/share/man/man8/seckilld.8" \
    2>&1 >/dev/null) || fail "man -l failed: $msg"
[[ -z $msg ]] || fail "man -l warns:"$'\n'"$msg"
msg=$(groff -man -ww -z "$dest/usr/share/man/man8/seckilld.8" 2>&1)
[[ -z $msg ]] || fail "groff warns:"$'\n'"$msg"
ok "man -l and groff -ww format seckilld(8) without a warning"

# ---- systemd-analyze ----

# verify and security read a unit file outside the unit path, but run
# ExecStart's binary and Documentation's man page as the host has them:
# point them at the installation.
mkdir -p "$work/units"
vunit=$work/units/seckilld.service
sed "s|^ExecStart=/usr/sbin/|ExecStart=$dest/usr/sbin/|" "$unit" >"$vunit"
verify() { # unit
    MANPATH=$dest/usr/share/man systemd-analyze verify "$1" 2>&1
}
msg=$(verify "$vunit") || fail "systemd-analyze verify failed:"$'\n'"$msg"
[[ -z $msg ]] || fail "systemd-analyze verify complains:"$'\n'"$msg"
# A bad value is only a warning to verify: the check above must see it.
sed 's/^ProtectHome=.*/ProtectHome=sometimes/' "$vunit" \
    >"$work/units/broken.service"
msg=$(verify "$work/units/broken.service") || true
[[ $msg == *sometimes* ]] ||
    fail "systemd-analyze verify said nothing of a bad ProtectHome"
ok "systemd-analyze verify: clean on the installed unit, not on a bad one"

# The exposure score is out of 10; --threshold takes it times ten.
msg=$(systemd-analyze security --offline=yes --threshold=20 "$vunit" 2>&1) ||
    fail "systemd-analyze security: $(grep 'Overall' <<<"$msg")"
ok "systemd-analyze security: $(sed -n 's/.*exposure level for [^:]*: //p' \
    <<<"$msg")"

# ---- the stop timeout and the descriptor limit ----

# From the installed binary's own help: "... SECKILL_DRAIN_S ... [5]".
# Read into a file first: awk stops at the first match, and a binary
# still writing into the closed pipe would die of SIGPIPE.
"$dest/usr/sbin/seckilld" --help >"$work/help.txt" 2>&1 ||
    fail "seckilld --help failed"
help_default() { # VAR
    awk -v var="$1" '$0 ~ var { on = 1 }
            on && match($0, /\[[0-9]+\]/) {
                print substr($0, RSTART + 1, RLENGTH - 2); exit }' \
        "$work/help.txt"
}
drain=$(help_default SECKILL_DRAIN_S)
max_conn=$(help_default SECKILL_MAX_CONN)
[[ $drain =~ ^[0-9]+$ && $max_conn =~ ^[0-9]+$ ]] ||
    fail "no defaults of SECKILL_DRAIN_S/SECKILL_MAX_CONN in seckilld --help"
stop=$(unit_value "$unit" TimeoutStopSec)
nofile=$(unit_value "$unit" LimitNOFILE)
[[ $stop =~ ^[0-9]+$ ]] || fail "TimeoutStopSec is not in seconds: $stop"
((stop >= drain + 10)) ||
    fail "TimeoutStopSec=$stop leaves under 10 s after the $drain s drain"
((nofile > max_conn + 1000)) ||
    fail "LimitNOFILE=$nofile is not above SECKILL_MAX_CONN=$max_conn"
ok "TimeoutStopSec=$stop (drain $drain s), LimitNOFILE=$nofile" \
    "(max_conn $max_conn)"

# ---- an administrator's settings survive a reinstall ----

echo "SECKILL_PORT=9000" >"$dest/etc/seckilld/seckilld.env"
chmod 600 "$dest/etc/seckilld/seckilld.env"
make -C "$ROOT" --no-print-directory -s install DESTDIR="$dest" PREFIX=/usr \
    >"$work/install.log" 2>&1 ||
    fail "make install again: $(tail -5 "$work/install.log")"
[[ $(cat "$dest/etc/seckilld/seckilld.env") == SECKILL_PORT=9000 &&
    $(stat -c %a "$dest/etc/seckilld/seckilld.env") == 600 ]] ||
    fail "a second make install changed seckilld.env"
ok "make install again leaves seckilld.env alone"

# ---- other prefixes ----

install_into local
unit=$work/local/usr/local/lib/systemd/system/seckilld.service
[[ -f $unit && -x $work/local/usr/local/sbin/seckilld &&
    -f $work/local/usr/local/share/man/man8/seckilld.8 &&
    -f $work/local/usr/local/etc/seckilld/seckilld.env.example ]] ||
    fail "make install with the default PREFIX:"$'\n'"$(
        cd "$work/local" && find . -type f)"
[[ $(unit_value "$unit" ExecStart) == "/usr/local/sbin/seckilld serve" &&
    $(unit_value "$unit" EnvironmentFile) == \
    /usr/local/etc/seckilld/seckilld.env ]] ||
    fail "the default PREFIX's unit names other paths"
install_into etc SYSCONFDIR=/etc
unit=$work/etc/usr/local/lib/systemd/system/seckilld.service
[[ $(unit_value "$unit" EnvironmentFile) == /etc/seckilld/seckilld.env &&
    -f $work/etc/etc/seckilld/seckilld.env.example ]] ||
    fail "SYSCONFDIR=/etc did not move the settings file"
ok "PREFIX=/usr/local and SYSCONFDIR=/etc: the unit's paths follow"

echo "install: ok"
