#!/usr/bin/env bash
# check.sh - the layering test: the service's files and folders call down,
# never back up.
#
#   tests/layering/check.sh [BUILD_DIR]     (default: build)
#
# Reads two graphs of the service's own code (cmd/ common/ store/ lock/
# idgen/ engine/ async/ sale/ handlers/, not tests/ or bench/):
#
#   - the include graph: file a includes "b" (from the sources);
#   - the call graph: object a references a symbol that object b defines
#     (nm on BUILD_DIR/obj, so what the compiler kept, static functions
#     and macros aside; the build must be up to date).
#
# and fails, printing each offence, when
#
#   1. two or more files call each other in a circle (a cycle of the call
#      graph between objects, however long);
#   2. headers include each other in a circle;
#   3. two or more folders depend on each other in a circle (a file of one
#      includes or calls a file of the other, both ways round);
#   4. a file of handlers/ includes a header of store/, async/ or engine/,
#      or its object references a symbol named store_*, async_* or
#      engine_*: the handlers speak HTTP and reach everything below
#      through the sale layer (sale/sale.h). The server's assembly is in
#      cmd/server.c, outside handlers/, so nothing here is exempt;
#   5. the folders' arrows differ from the table of docs/architecture.md
#      ("| from | to |": every arrow between folders but those to
#      common/), so that the document keeps matching the code.
#
# lock/ is a library of its own (docs/locks.md): its files are one node of
# the call graph here (LIBRARIES below), so that its internal arrows, which
# are its own affair, do not hide the service's.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-build}
DIRS="cmd common store lock idgen engine async sale handlers"
LIBRARIES="lock"
cd "$ROOT" || exit 2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The node of a file: its path without the extension (a .c and its .h are
# one node), or its folder for a library.
node_of() {
    local f=${1%.*} d=${1%%/*}
    for l in $LIBRARIES; do
        [[ $d == "$l" ]] && { echo "$l/"; return; }
    done
    echo "$f"
}

# ---- the call graph, from the objects ----
objs=()
for d in $DIRS; do
    [[ -d $BUILD/obj/$d ]] || continue
    while IFS= read -r o; do objs+=("$o"); done \
        < <(find "$BUILD/obj/$d" -name '*.o' | sort)
done
if ((${#objs[@]} == 0)); then
    echo "layering: no objects under $BUILD/obj: build first" >&2
    exit 2
fi
for o in "${objs[@]}"; do
    rel=${o#"$BUILD"/obj/}
    rel=${rel%.o}
    [[ -f $rel.c ]] || continue # left over from a file since removed
    n=$(node_of "$rel.c")
    nm --defined-only "$o" |
        awk -v n="$n" -v f="$rel" '$2 ~ /^[A-Z]$/ { print "D", n, $3, f }'
    nm -u "$o" | awk -v n="$n" -v f="$rel" '{ print "U", n, $2, f }'
done > "$work/syms"
# "a b sym file": node a (file) references sym, which node b defines.
awk '$1 == "D" { def[$3] = $2 }
     $1 == "U" { u[++k] = $2 " " $3 " " $4 }
     END {
         for (i = 1; i <= k; i++) {
             split(u[i], a, " ")
             if ((a[2] in def) && def[a[2]] != a[1])
                 print a[1], def[a[2]], a[2], a[3]
         }
     }' "$work/syms" | sort -u > "$work/calls"

# ---- the include graph, from the sources ----
for d in $DIRS; do
    [[ -d $d ]] || continue
    find "$d" -name '*.[ch]' | sort
done > "$work/files"
while IFS= read -r f; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
        "$f" | while IFS= read -r inc; do
        [[ -f $inc ]] && echo "$f $inc"
    done
done < "$work/files" > "$work/includes"

# ---- cycles: the strongly connected components of a graph ----
# stdin: "a b" edges; stdout: one line per circle, its members.
circles() {
    awk '
    { if ($1 != $2) { adj[$1] = adj[$1] " " $2 }; nodes[$1]; nodes[$2] }
    END {
        # Who reaches whom, by a search from each node (the graphs are
        # small: a few hundred nodes).
        for (s in nodes) {
            delete seen; n = 0; stack[++n] = s
            while (n > 0) {
                v = stack[n--]
                m = split(adj[v], next_, " ")
                for (i = 1; i <= m; i++) {
                    w = next_[i]
                    if (!(w in seen)) { seen[w]; stack[++n] = w }
                }
            }
            for (w in seen) reach[s, w]
        }
        for (s in nodes) {
            if ((s in done) || !((s, s) in reach)) continue
            line = ""
            for (w in nodes)
                if (((s, w) in reach) && ((w, s) in reach)) {
                    done[w]; line = line " " w
                }
            print substr(line, 2)
        }
    }' | while IFS= read -r c; do tr ' ' '\n' <<< "$c" | sort | tr '\n' ' '
        echo; done | sed 's/ $//' | sort
}

fail=0

# 1. files calling each other
awk '{ print $1, $2 }' "$work/calls" | circles > "$work/c1"
while IFS= read -r c; do
    [[ -z $c ]] && continue
    fail=1
    echo "layering: these files call each other in a circle: $c"
    for a in $c; do
        for b in $c; do
            awk -v a="$a" -v b="$b" '$1 == a && $2 == b {
                printf "    %s -> %s (%s)\n", a, b, $3; exit }' "$work/calls"
        done
    done
done < "$work/c1"

# 2. headers including each other
circles < "$work/includes" > "$work/c2"
while IFS= read -r c; do
    [[ -z $c ]] && continue
    fail=1
    echo "layering: these files include each other in a circle: $c"
done < "$work/c2"

# 3. folders depending on each other
{
    awk '{ split($1, a, "/"); split($2, b, "/"); print a[1], b[1] }' \
        "$work/calls"
    awk '{ split($1, a, "/"); split($2, b, "/"); print a[1], b[1] }' \
        "$work/includes"
} | sort -u > "$work/folders"
circles < "$work/folders" > "$work/c3"
while IFS= read -r c; do
    [[ -z $c ]] && continue
    fail=1
    echo "layering: these folders depend on each other in a circle: $c"
    for a in $c; do
        for b in $c; do
            [[ $a == "$b" ]] && continue
            awk -v a="$a" -v b="$b" 'index($1, a "/") == 1 &&
                index($2, b "/") == 1 {
                printf "    %s -> %s (%s)\n", $1, $2, $3; exit }' \
                "$work/calls"
            awk -v a="$a" -v b="$b" 'index($1, a "/") == 1 &&
                index($2, b "/") == 1 {
                printf "    %s includes %s\n", $1, $2; exit }' \
                "$work/includes"
        done
    done
done < "$work/c3"

# 4. the handlers reach below only through the sale layer
while read -r f inc; do
    case $f in handlers/*) ;; *) continue ;; esac
    case $inc in
    store/* | async/* | engine/*)
        fail=1
        echo "layering: $f includes $inc (handlers reach it through sale/)"
        ;;
    esac
done < "$work/includes"
awk '$1 == "U" && $2 ~ /^handlers\// && $3 ~ /^(store|async|engine)_/ {
         printf "layering: %s.o references %s (handlers reach it through sale/)\n", $4, $3
     }' "$work/syms" | sort -u > "$work/c4"
if [[ -s $work/c4 ]]; then
    fail=1
    cat "$work/c4"
fi

# 5. the arrows docs/architecture.md draws
doc=docs/architecture.md
awk '/^\| from \| to \|/ { t = 1; next } t && !/^\|/ { exit }
     t && /^\|[^-]/ {
         split($0, col, "|")
         nf = split(col[2], f, "`"); nt = split(col[3], g, "`")
         for (i = 2; i <= nf; i += 2)
             for (j = 2; j <= nt; j += 2) {
                 a = f[i]; b = g[j]; sub("/$", "", a); sub("/$", "", b)
                 if (b != "common") print a, b
             }
     }' "$doc" | sort -u > "$work/doc_arrows"
awk '$1 != $2 && $2 != "common"' "$work/folders" | sort -u > "$work/code_arrows"
if [[ ! -s $work/doc_arrows ]]; then
    fail=1
    echo "layering: $doc has no table of arrows (| from | to |)"
elif ! cmp -s "$work/doc_arrows" "$work/code_arrows"; then
    fail=1
    comm -13 "$work/doc_arrows" "$work/code_arrows" |
        sed "s|^|layering: an arrow of the code that $doc lacks: |"
    comm -23 "$work/doc_arrows" "$work/code_arrows" |
        sed "s|^|layering: an arrow of $doc that the code lacks: |"
fi

if ((fail)); then
    echo "layering: FAILED"
    exit 1
fi
echo "layering: ok ($(wc -l < "$work/files") files, ${#objs[@]} objects)"
