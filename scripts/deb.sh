#!/usr/bin/env bash
# deb.sh - make deb: the Debian packages seckilld and libseckill-lock-dev,
# built by the distribution's own tools (dpkg-buildpackage, debhelper;
# debian/rules calls the top-level Makefile), then checked with lintian.
#
#   scripts/deb.sh [OUT]    (OUT: build/deb)
#
# dpkg-buildpackage builds in the source tree and writes its results into
# the folder above it, so the build runs on a copy: the work tree's
# tracked files and its new files that git does not ignore, as they are
# now, in OUT/src/seckilld-VERSION. Nothing is written outside OUT. The
# packages (.deb), the .changes and .buildinfo end up in OUT, with that
# copy as OUT/seckilld-VERSION-src.tar (make test-deb builds it again in
# a clean container), the build's log in OUT/build.log and lintian's in
# OUT/lintian.log. Fails on a build failure or a lintian error; prints
# lintian's warnings.
set -euo pipefail
export LC_ALL=C.UTF-8

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/build/deb}

die() { echo "deb: error: $*" >&2; exit 1; }

for tool in git dpkg-buildpackage dh lintian; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found (scripts/deps.sh deb)"
done
version=$(dpkg-parsechangelog -l "$ROOT/debian/changelog" -S Version)
src=$OUT/src/seckilld-$version

rm -rf "$OUT"
mkdir -p "$src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) |
    while IFS= read -r -d '' f; do
        # A tracked file deleted in the work tree is not part of it.
        [[ -e $ROOT/$f || -L $ROOT/$f ]] && printf '%s\0' "$f"
    done |
    tar -C "$ROOT" --null -T - -cf "$OUT/seckilld-$version-src.tar"
tar -C "$src" -xf "$OUT/seckilld-$version-src.tar"

echo "deb: dpkg-buildpackage -us -uc -b (log: $OUT/build.log)"
(cd "$src" && dpkg-buildpackage -us -uc -b) >"$OUT/build.log" 2>&1 ||
    die "dpkg-buildpackage failed: $(tail -15 "$OUT/build.log")"
mv "$OUT"/src/*.deb "$OUT"/src/*.changes "$OUT"/src/*.buildinfo "$OUT"/
rm -rf "$OUT/src"

changes=$(ls "$OUT"/*.changes)
lintian --fail-on error "$changes" >"$OUT/lintian.log" 2>&1 || {
    cat "$OUT/lintian.log" >&2
    die "lintian found errors"
}
# It is run as root here (as everything on these machines): that remark
# is not about the packages.
remarks=$(grep -v '^running with root privileges' "$OUT/lintian.log" || true)
if [[ -n $remarks ]]; then
    echo "deb: lintian's remarks:"
    sed 's/^/  /' <<<"$remarks"
fi
debs=("$OUT"/*.deb)
echo "deb: ok: ${debs[*]##*/} in $OUT"
