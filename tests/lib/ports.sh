# shellcheck shell=bash
# ports.sh - free_port: a TCP port that nothing listens on, on loopback,
# drawn from 20000-31999 (below the kernel's ephemeral range). Prints it;
# returns 1 after 100 draws without one.

free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 12000))
        ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return 0; }
    done
    echo "no free port" >&2
    return 1
}
