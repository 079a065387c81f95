#!/usr/bin/env bash
# check-dockerfile.sh - the Dockerfile installs every library the binary
# needs, in both stages, checked against the binary itself so that the two
# cannot drift apart:
#
#   runtime stage  every shared library `ldd` lists for the binary belongs
#                  to a Debian package that the stage installs, or that one
#                  of its packages depends on, or that every Debian image
#                  has (priority "required");
#   build stage    every library the binary links directly (its ELF NEEDED
#                  entries) has its development package (the one owning
#                  the unversioned libX.so the linker used) installed there,
#                  directly or as a dependency.
#
#   scripts/check-dockerfile.sh [BINARY] [DOCKERFILE]
#
# Defaults: build/seckilld and Dockerfile. Needs dpkg, apt-cache, ldd and
# readelf, and the packages of both stages installed on this machine (they
# are the ones scripts/deps.sh installs). Prints what is missing and exits
# 1; exits 0 with one line when both stages are complete.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-$ROOT/build/seckilld}
DOCKERFILE=${2:-$ROOT/Dockerfile}

die() { echo "check-dockerfile: error: $*" >&2; exit 2; }
[[ -x $BIN ]] || die "$BIN not found (make build)"
[[ -r $DOCKERFILE ]] || die "$DOCKERFILE not found"

# stage_packages N: the packages the apt-get install lines of stage N
# (0 = the first FROM) name. Continuation lines are joined first.
stage_packages() {
    awk -v want="$1" '
        { line = $0 }
        /\\$/ { sub(/\\$/, "", line); buf = buf line " "; next }
        { buf = buf line; print buf; buf = "" }
    ' "$DOCKERFILE" | awk -v want="$1" '
        /^FROM / { stage++ ; next }
        stage - 1 == want && /apt-get install/ {
            n = split($0, w, /[ \t]+/)
            on = 0
            for (i = 1; i <= n; i++) {
                if (w[i] == "install") { on = 1; continue }
                if (!on) continue
                if (w[i] == "&&" || w[i] == ";") { on = 0; continue }
                if (w[i] ~ /^-/ || w[i] == "") continue
                print w[i]
            }
        }'
}

# closure PKG...: the packages and everything they depend on (installed).
closure() {
    apt-cache depends --recurse --installed --no-recommends --no-suggests \
        --no-conflicts --no-breaks --no-replaces --no-enhances "$@" \
        2>/dev/null | grep -v '^ ' | sed 's/:.*//' | sort -u
}

# owner FILE: the package that installed FILE (merged /usr aware).
owner() {
    local f=$1 real alt p
    real=$(realpath -e "$f" 2>/dev/null || echo "$f")
    for p in "$f" "$real" "/usr$real" "${real#/usr}" "/usr$f" "${f#/usr}"; do
        alt=$(dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1) || true
        if [[ -n $alt ]]; then
            echo "$alt"
            return 0
        fi
    done
    return 1
}

mapfile -t run_pkgs < <(stage_packages 1)
mapfile -t build_pkgs < <(stage_packages 0)
((${#run_pkgs[@]})) || die "no apt-get install in the Dockerfile's runtime stage"
((${#build_pkgs[@]})) || die "no apt-get install in the Dockerfile's build stage"

declare -A have_run=() have_build=()
for p in $(closure "${run_pkgs[@]}") \
    $(dpkg-query -W -f='${Package} ${Priority}\n' | awk '$2 == "required" {print $1}'); do
    have_run[$p]=1
done
for p in $(closure "${build_pkgs[@]}"); do
    have_build[$p]=1
done

missing=0

# Runtime: every library the loader maps.
while read -r lib path; do
    pkg=$(owner "$path") || {
        echo "check-dockerfile: $lib ($path) belongs to no Debian package" >&2
        missing=1
        continue
    }
    if [[ -z ${have_run[$pkg]:-} ]]; then
        echo "check-dockerfile: the runtime stage lacks $pkg (for $lib)" >&2
        missing=1
    fi
done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')

# Build: the development package of every library linked directly.
while read -r soname; do
    path=$(ldd "$BIN" | awk -v s="$soname" '$1 == s {print $3}')
    [[ -n $path ]] || continue
    dev=$(dirname "$(realpath -e "$path")")/${soname%%.so*}.so
    case $soname in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.*)
        dev_pkg=libc6-dev
        ;;
    *)
        dev_pkg=$(owner "$dev") || {
            echo "check-dockerfile: no development package owns $dev (for $soname)" >&2
            missing=1
            continue
        }
        ;;
    esac
    if [[ -z ${have_build[$dev_pkg]:-} ]]; then
        echo "check-dockerfile: the build stage lacks $dev_pkg (for $soname)" >&2
        missing=1
    fi
done < <(readelf -d "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')

if ((missing)); then
    echo "check-dockerfile: $DOCKERFILE is missing packages (above)" >&2
    exit 1
fi
echo "check-dockerfile: ok (runtime: ${run_pkgs[*]}; build: ${build_pkgs[*]})"
