#!/bin/sh
# deps.sh [--test] — install the Debian 12 packages prima needs to build and benchmark, and the
# npm packages of the server's web page (web/page, from its lock file); with --test also what
# the tests need beyond that: Debian's chromium, the test clients (web/test) and Python's
# jsonschema (python3-jsonschema: tests/serve_tools.sh validates tool-call arguments and
# schema-constrained answers with it, a validator independent of the server's grammar).
# As root it runs apt-get for whatever is missing; otherwise it prints the exact command.
# libvulkan-dev and glslc build the (optional) Vulkan GPU backend; with --test, mesa-vulkan-drivers
# brings lavapipe, the CPU Vulkan driver the GPU tests run on. With --test also the aarch64
# cross compiler and qemu-user, for the static ARM build and the mixed-architecture ring test
# (scripts/cross.sh installs the arm64 libraries it links).
set -eu
cd "$(dirname "$0")/.."
PKGS="build-essential cmake pkg-config libglpk-dev libpcre2-dev libsodium-dev libcjson-dev
      libmicrohttpd-dev libedit-dev clang libclang-rt-14-dev gnuplot-nox iproute2 jq curl
      libvulkan-dev glslc"
npm_dirs=web/page
if [ "${1:-}" = --test ]; then
    PKGS="$PKGS chromium mesa-vulkan-drivers gcc-aarch64-linux-gnu qemu-user python3-jsonschema"
    npm_dirs="web/page web/test"
fi
# Node and npm may come from elsewhere (e.g. a newer Node); Debian's otherwise.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"

# web/page: what the build inlines into serve's page; web/test: the server's test clients.
npm_packages() {
    for dir in $npm_dirs; do
        [ -f $dir/node_modules/.package-lock.json ] &&
            [ $dir/node_modules/.package-lock.json -nt $dir/package-lock.json ] && continue
        echo "installing the npm packages of $dir" >&2
        (cd $dir && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    done
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
