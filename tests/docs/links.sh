#!/usr/bin/env bash
# links.sh - every relative link of the README and of docs/*.md resolves:
# its file exists inside the repository, and its #anchor is a heading of
# that file, spelt as GitHub makes a heading's anchor (lower case; every
# character but letters, digits, spaces, hyphens and underscores dropped;
# spaces made hyphens; a repeated heading gets -1, -2, ...). Links in
# fenced code and in `code` spans are text, not links. That covers the
# settings table config-docs writes into docs/configuration.md, whose
# links are the settings' texts in cmd/config.c.
#
#   tests/docs/links.sh [ROOT]     check ROOT/README.md and ROOT/docs/*.md
#                                  (ROOT: this repository)
#   tests/docs/links.sh --self-test  check a broken example: it must find
#                                  each break, and pass a sound one
#
# Prints "FILE:LINE: ..." for each broken link; exits 1 if there is one.
set -uo pipefail
export LC_ALL=C.UTF-8

# The anchors of the headings of markdown file $1, one a line.
anchors() {
    awk '
        /^ {0,3}(```|~~~)/ { fence = !fence; next }
        fence { next }
        /^#{1,6} / {
            t = $0
            sub(/^#+ +/, "", t); sub(/ +#+ *$/, "", t)
            gsub(/`/, "", t)
            # a link in a heading counts by its text
            while (match(t, /\[[^]]*\]\([^)]*\)/)) {
                inner = substr(t, RSTART + 1, RLENGTH - 1)
                sub(/\]\(.*/, "", inner)
                t = substr(t, 1, RSTART - 1) inner substr(t, RSTART + RLENGTH)
            }
            gsub(/\*/, "", t)
            print t
        }
    ' "$1" |
        sed -E 's/.*/\L&/; s/[^[:alnum:] _-]//g; s/ /-/g' |
        awk '{ n = seen[$0]++; print n ? $0 "-" n : $0 }'
}

# "LINE TARGET" for every link of markdown file $1.
links() {
    awk '
        /^ {0,3}(```|~~~)/ { fence = !fence; next }
        fence { next }
        {
            t = $0
            gsub(/`[^`]*`/, "", t)
            if (match(t, /^ {0,3}\[[^]]+\]: +[^ ]+/)) {
                r = substr(t, RSTART, RLENGTH)
                sub(/^ *\[[^]]+\]: +/, "", r)
                print NR, r
            }
            while (match(t, /\]\([^) ]+/)) {
                print NR, substr(t, RSTART + 2, RLENGTH - 2)
                t = substr(t, RSTART + RLENGTH)
            }
            t = $0
            while (match(t, /(src|href)="[^"]+"/)) {
                r = substr(t, RSTART, RLENGTH)
                sub(/^[a-z]+="/, "", r); sub(/"$/, "", r)
                print NR, r
                t = substr(t, RSTART + RLENGTH)
            }
        }
    ' "$1"
}

# Check the markdown files of repository $1; print what is broken.
declare -A ANCHORS # a file's anchors, once read
check() {
    local root file dir line target path anchor dest bad=0
    root=$(cd "$1" && pwd -P) || return 2
    ANCHORS=()
    local files=("$root/README.md")
    for file in "$root"/docs/*.md; do
        [[ -e $file ]] && files+=("$file")
    done
    for file in "${files[@]}"; do
        [[ -e $file ]] || continue
        dir=$(dirname "$file")
        while read -r line target; do
            case $target in
            [a-zA-Z]*:* | //*) continue ;; # a URL, a mailto:
            esac
            target=${target#<}
            target=${target%>}
            path=${target%%#*}
            anchor=
            [[ $target == *'#'* ]] && anchor=${target#*#}
            if [[ -z $path ]]; then
                dest=$file
            else
                dest=$(realpath -m "$dir/$path")
            fi
            local where=${file#"$root"/}:$line
            if [[ $dest != "$root" && $dest != "$root"/* ]]; then
                echo "$where: $target leads out of the repository"
                bad=1
                continue
            fi
            if [[ ! -e $dest ]]; then
                echo "$where: $target: no such file"
                bad=1
                continue
            fi
            [[ -n $anchor && $dest == *.md ]] || continue
            [[ -v "ANCHORS[$dest]" ]] || ANCHORS[$dest]=$(anchors "$dest")
            if ! grep -qxF -- "$anchor" <<<"${ANCHORS[$dest]}"; then
                echo "$where: $target: no heading makes #$anchor"
                bad=1
            fi
        done < <(links "$file")
    done
    return $bad
}

self_test() {
    local tmp out ok=1
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    mkdir -p "$tmp/repo/docs"
    cat >"$tmp/repo/README.md" <<'EOF'
# Title

## The nemesis: `make soak`

## Twice

## Twice

[a](docs/a.md#a-section) [b](#the-nemesis-make-soak) [c](#twice-1)
[d](https://example.com/x#y) `[e](nowhere.md)`
<img src="docs/a.md" alt="">

```sh
echo "[f](nowhere.md)"
```
EOF
    cat >"$tmp/repo/docs/a.md" <<'EOF'
# A

## A section

[back](../README.md#title) [self](#a)
EOF
    out=$(check "$tmp/repo") || {
        echo "links.sh self-test: a sound example failed:" >&2
        echo "$out" >&2
        return 1
    }
    cat >>"$tmp/repo/docs/a.md" <<'EOF'
[gone](missing.md) [anchor](../README.md#no-such-heading)
[out](../../outside.md) [third](../README.md#twice-2)
EOF
    out=$(check "$tmp/repo") && ok=0
    for want in "missing.md: no such file" \
        "#no-such-heading: no heading" \
        "outside.md leads out of the repository" \
        "#twice-2: no heading"; do
        grep -qF -- "$want" <<<"$out" || ok=0
    done
    if ((!ok)); then
        echo "links.sh self-test: the broken example was not caught:" >&2
        echo "$out" >&2
        return 1
    fi
    echo "links.sh self-test: ok"
}

if [[ ${1:-} == --self-test ]]; then
    self_test
    exit
fi
ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
if check "$ROOT"; then
    echo "links.sh: every relative link of README.md and docs/*.md resolves"
else
    exit 1
fi
