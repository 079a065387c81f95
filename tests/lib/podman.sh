# shellcheck shell=bash
# podman.sh - podman as the container tests run it on these machines
# (tests/compose/run.sh, tests/deb/run.sh): configured through
# CONTAINERS_CONF, nothing in /etc changed, and a Debian 12 base image
# made locally, so no registry is reached for images.
#
# Source it, then:
#   podman_setup DIR     write DIR/containers.conf (default_ulimits = [],
#                        runtime runc, cgroupfs, netavark) and export
#                        CONTAINERS_CONF pointing at it
#   podman_debian12 DIR  make docker.io/library/debian:12 (and :12-slim)
#                        with `mmdebstrap --variant=apt bookworm` and
#                        `podman import`, once; its log in
#                        DIR/mmdebstrap.log. Returns non-zero on failure.

podman_setup() { # dir
    mkdir -p "$1"
    cat >"$1/containers.conf" <<'CONF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"

[network]
network_backend = "netavark"
CONF
    export CONTAINERS_CONF=$1/containers.conf
}

podman_debian12() { # dir
    if ! podman image exists docker.io/library/debian:12; then
        mmdebstrap --variant=apt bookworm "$1/debian12.tar" \
            >"$1/mmdebstrap.log" 2>&1 || return 1
        podman import "$1/debian12.tar" docker.io/library/debian:12 \
            >/dev/null || return 1
        rm -f "$1/debian12.tar"
    fi
    podman image exists docker.io/library/debian:12-slim ||
        podman tag docker.io/library/debian:12 docker.io/library/debian:12-slim
}
