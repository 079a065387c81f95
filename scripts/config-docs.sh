#!/usr/bin/env bash
# config-docs.sh - write the documents of the settings table (cmd/config.c)
# into the tree: the configuration table of docs/configuration.md, between
# its "<!-- settings:begin -->" and "<!-- settings:end -->" lines, from
# `seckilld --help-markdown`, and the man page docs/seckilld.8 from
# `seckilld --help-man`. test_config fails while either differs.
#
#   scripts/config-docs.sh BUILD/seckilld
set -euo pipefail

BIN=${1:?usage: scripts/config-docs.sh BUILD/seckilld}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DOC=$ROOT/docs/configuration.md
MAN=$ROOT/docs/seckilld.8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BIN" --help-markdown >"$tmp/table.md"
"$BIN" --help-man >"$tmp/seckilld.8"

# Between the markers: a blank line, the table, a blank line.
awk -v table="$tmp/table.md" '
    /^<!-- settings:begin -->$/ {
        print; print ""
        while ((getline line < table) > 0) print line
        print ""
        skip = 1; seen++; next
    }
    /^<!-- settings:end -->$/ { skip = 0; seen++ }
    !skip { print }
    END { if (seen != 2) exit 1 }
' "$DOC" >"$tmp/configuration.md" || {
    echo "config-docs.sh: docs/configuration.md lacks the settings markers" >&2
    exit 1
}
cp "$tmp/configuration.md" "$DOC"
cp "$tmp/seckilld.8" "$MAN"
echo "config-docs.sh: wrote docs/configuration.md's settings table and docs/seckilld.8"
