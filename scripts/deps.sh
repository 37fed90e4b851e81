#!/bin/sh
# deps.sh — install the Debian 12 packages prima needs to build, test and benchmark, and the npm
# packages of the server's tests (web/test, from its lock file).
# As root it runs apt-get for whatever is missing; otherwise it prints the exact command.
set -eu
cd "$(dirname "$0")/.."
PKGS="build-essential cmake pkg-config libglpk-dev libpcre2-dev libsodium-dev libcjson-dev
      libmicrohttpd-dev clang libclang-rt-14-dev gnuplot-nox iproute2 jq curl"
# Node and npm may come from elsewhere (e.g. a newer Node); Debian's otherwise.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"

npm_packages() {
    lock=web/test/package-lock.json
    [ -f web/test/node_modules/.package-lock.json ] &&
        [ web/test/node_modules/.package-lock.json -nt "$lock" ] && return 0
    echo "installing the npm packages of web/test" >&2
    (cd web/test && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "prima: missing packages; run as root:" >&2
        echo "  apt-get install -y$missing" >&2
        exit 1
    fi
    echo "installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
npm_packages
