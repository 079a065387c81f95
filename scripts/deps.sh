#!/usr/bin/env bash
# deps.sh - install the Debian packages seckilld needs to build, test and run.
#
# Does nothing (and prints nothing) when every package is already installed.
# Otherwise runs `apt-get update` once and installs only the missing ones,
# through sudo when not root. While installing, a temporary policy-rc.d keeps
# the system-wide MariaDB/Redis/ZooKeeper services from starting (we run
# private ones).
#
# ZooKeeper comes from Debian's zookeeper package (the server's jars; we run
# java on them directly), libslf4j-java gives it a logger (slf4j-simple) and
# redis-tools brings redis-cli and redis-benchmark. clang and
# libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) build the fuzz
# harnesses of make fuzz. faketime (libfaketime) jumps a service's clock in
# make test-faults. haproxy balances make cluster and the drain test.
# redis-server also runs the sentinels of the failover test
# (redis-server --sentinel). make test checks make install's tree with
# systemd-analyze (systemd), groff and man (groff-base, man-db), and the
# alert rules with promtool (prometheus ships it).
#
#   scripts/deps.sh [bench] [jmeter] [web] [containers] [deb] [spider]
set -euo pipefail

PACKAGES=(
    build-essential pkg-config
    libmicrohttpd-dev libjansson-dev libhiredis-dev libmariadb-dev
    libmariadb-dev-compat libsodium-dev libcmocka-dev libcurl4-openssl-dev
    mariadb-server mariadb-client redis-server redis-tools
    zookeeper libzookeeper-mt-dev default-jre-headless libslf4j-java
    curl jq ca-certificates faketime
    clang libclang-rt-14-dev
    haproxy
    systemd groff-base man-db prometheus
)

die() { echo "deps.sh: error: $*" >&2; exit 1; }

# Optional groups, named as arguments: `scripts/deps.sh bench` (make bench)
# adds the load generators, the raw-limit tools and the chart (wrk,
# sysbench, nginx-light, gnuplot-nox); `jmeter` adds JMeter with its HTTP
# sampler and a JDK (bench/jmeter/JMeterLauncher.java runs as a source
# file), which are large: only make bench-jmeter asks for them. `web`
# (make test) adds what the browser and OpenAPI tests run on: Debian's
# chromium, driven by playwright-core, and Node.js with npm for the npm
# packages of tests/package-lock.json (scripts/npm.sh). A Node.js that is
# already installed from elsewhere (NodeSource's nodejs carries its own npm
# and conflicts with Debian's) is kept.
# `containers` (make test-compose) adds podman and podman-compose with the
# OCI runtime runc, netavark and aardvark-dns (container networks with name
# resolution, which compose's service names need) and mmdebstrap (the
# base image: no registry is reached for images).
# `spider` (make bench-spider) adds MariaDB's Spider storage engine, the
# one sharding engine Debian packages (bench/spider.sh).
# `deb` (make deb) adds debhelper (dpkg-buildpackage comes with
# build-essential) and lintian, which checks the packages.
for group in "$@"; do
    case $group in
    bench) PACKAGES+=(wrk sysbench nginx-light gnuplot-nox) ;;
    jmeter) PACKAGES+=(jmeter jmeter-http default-jdk-headless) ;;
    web)
        PACKAGES+=(chromium fonts-dejavu-core)
        if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
            PACKAGES+=(nodejs npm)
        fi
        ;;
    containers)
        PACKAGES+=(podman podman-compose runc netavark aardvark-dns iptables
            uidmap mmdebstrap)
        ;;
    deb) PACKAGES+=(debhelper lintian) ;;
    spider) PACKAGES+=(mariadb-plugin-spider) ;;
    *) die "unknown package group '$group' (known: bench, jmeter, web, containers, deb, spider)" ;;
    esac
done

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
((${#missing[@]} == 0)) && exit 0

command -v apt-get >/dev/null 2>&1 ||
    die "apt-get not found; install these packages by hand: ${missing[*]}"

SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 ||
        die "not root and sudo not found; as root run: apt-get install ${missing[*]}"
    SUDO=(sudo)
fi

echo "deps.sh: installing ${missing[*]}"

# Keep apt from starting the system-wide services on 3306/6379, but only if
# no policy-rc.d is in place already (never touch someone else's).
POLICY=/usr/sbin/policy-rc.d
own_policy=0
cleanup() {
    if ((own_policy)); then
        "${SUDO[@]}" rm -f "$POLICY" || true
    fi
}
trap cleanup EXIT
if [[ ! -e $POLICY ]]; then
    printf '#!/bin/sh\n# temporary, from seckilld scripts/deps.sh\nexit 101\n' |
        "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    own_policy=1
fi

"${SUDO[@]}" apt-get update -q || die "apt-get update failed"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    die "apt-get install failed for: ${missing[*]}"
