#!/bin/sh
# deps.sh — install the Debian 12 packages prima needs to build, test and benchmark.
# As root it runs apt-get for whatever is missing; otherwise it prints the exact command.
set -eu
PKGS="build-essential cmake pkg-config libglpk-dev libpcre2-dev libsodium-dev libcjson-dev
      libmicrohttpd-dev clang libclang-rt-14-dev gnuplot-nox iproute2 jq"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
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
