#!/bin/sh
# cross.sh ARCH [DIR [cmake options...]] — a statically linked `prima` for 64-bit Linux and
# Android on ARCH (aarch64 or x86_64) in DIR/prima (default build-ARCH/), built with Debian's
# compiler for ARCH (the cross compiler, or this machine's own) and the multiarch development
# packages of ARCH; then the kernel tests (test_quant, test_quant_neon, test_ops) run, under
# qemu-user where ARCH is not this machine's (skipped, saying so, without it).
#
# One file with no dynamic dependencies: on aarch64 it runs on Raspberry Pi OS, in Termux and
# from `adb shell` in /data/local/tmp. No Vulkan (a static binary cannot load the GPU driver).
# Debian ships no static archive of cJSON, nor of p11-kit (which libmicrohttpd's static archive
# needs through GnuTLS, for HTTPS prima does not use), so those two are compiled here from
# Debian's own source packages (the installed versions, fetched by apt into DIR/deps with a
# private source list: the system's apt configuration is left alone): cJSON.c as it is, and
# libmicrohttpd configured without HTTPS. DIR/prima.map (the link map) says which archives went
# into the binary: scripts/release.sh ships their licences.
#
# As root it installs what is missing (adding ARCH to dpkg's architectures) and refuses if apt
# would remove any package to do so; otherwise it prints the commands to run.
set -eu
cd "$(dirname "$0")/.."
host=$(uname -m)
case "${1:-}" in
    aarch64) debarch=arm64 ;;
    x86_64) debarch=amd64 ;;
    *) echo "usage: scripts/cross.sh aarch64|x86_64 [DIR [cmake options...]]" >&2; exit 2 ;;
esac
arch=$1
dir=${2:-build-$arch}
shift $(($# < 2 ? $# : 2))   # what is left goes to cmake (scripts/test.sh: -DPRIMA_WERROR=ON)
triple=$arch-linux-gnu
if [ "$arch" = "$host" ]; then
    PKGS="gcc"
else
    PKGS="gcc-$(echo "$triple" | tr _ -) qemu-user"
fi
# the native cJSON and libmicrohttpd say which versions of their sources to build
PKGS="$PKGS dpkg-dev file libcjson-dev libmicrohttpd-dev"
for p in libglpk-dev libsuitesparse-dev libgmp-dev zlib1g-dev libltdl-dev libpcre2-dev \
         libsodium-dev libedit-dev libbsd-dev libncurses-dev; do
    PKGS="$PKGS $p:$debarch"
done

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "cross.sh: missing packages; run as root:" >&2
        echo "  dpkg --add-architecture $debarch && apt-get update && apt-get install -y$missing" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$debarch" != "$(dpkg --print-architecture)" ] &&
        ! dpkg --print-foreign-architectures | grep -qx "$debarch"; then
        dpkg --add-architecture "$debarch"
    fi
    apt-get update -qq
    # Multiarch packages must match the native ones' versions: apt may upgrade a native package
    # to match, but must never remove one the native build needs.
    # shellcheck disable=SC2086
    if apt-get install -s --no-install-recommends $missing | grep -q '^Remv'; then
        echo "cross.sh: installing$missing would remove packages; not doing it:" >&2
        apt-get install -s --no-install-recommends $missing | grep '^Remv' >&2
        exit 1
    fi
    echo "installing:$missing" >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# cJSON and libmicrohttpd from Debian's source packages, at the versions installed natively.
deps=$(mkdir -p "$dir/deps" && cd "$dir/deps" && pwd)
prefix=$deps/prefix
if [ ! -f "$prefix/lib/libcjson.a" ] || [ ! -f "$prefix/lib/libmicrohttpd.a" ]; then
    ver() { dpkg-query -W -f='${Version}' "$1:$(dpkg --print-architecture)"; }
    keys=/usr/share/keyrings/debian-archive-keyring.gpg
    cat >"$deps/sources.list" <<EOF
deb-src [signed-by=$keys] http://deb.debian.org/debian bookworm main
deb-src [signed-by=$keys] http://deb.debian.org/debian-security bookworm-security main
EOF
    mkdir -p "$deps/lists/partial" "$deps/cache/archives/partial"
    # apt's own state under DIR/deps: the Sources indices it fetches (and checks against
    # Debian's keyring) touch nothing of the system's
    apt_private() {
        apt-get -o Dir::Etc::SourceList="$deps/sources.list" \
            -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists="$deps/lists" \
            -o Dir::Cache="$deps/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root "$@"
    }
    apt_private update -qq
    (cd "$deps" && apt_private source -qq --download-only \
        "cjson=$(ver libcjson-dev)" "libmicrohttpd=$(ver libmicrohttpd-dev)")
    rm -rf "$deps/cjson" "$deps/mhd" "$prefix"
    mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/cjson"
    # apt checked the files against the archive's signed index; the maintainers' own
    # signatures, which dpkg-source cannot check without their keys, are not needed
    (cd "$deps" && dpkg-source -q -x cjson_*.dsc cjson >dpkg-source.log 2>&1 &&
        dpkg-source -q -x libmicrohttpd_*.dsc mhd >>dpkg-source.log 2>&1) ||
        { cat "$deps/dpkg-source.log" >&2; exit 1; }

    "$triple-gcc" -O2 -c "$deps/cjson/cJSON.c" -o "$deps/cJSON.o"
    "$triple-ar" rcs "$prefix/lib/libcjson.a" "$deps/cJSON.o"
    cp "$deps/cjson/cJSON.h" "$prefix/include/cjson/"
    cat >"$prefix/lib/pkgconfig/libcjson.pc" <<EOF
Name: libcjson
Description: cJSON from Debian's source package, static (scripts/cross.sh)
Version: $(ver libcjson-dev | sed 's/-.*//')
Libs: -L$prefix/lib -lcjson
Libs.private: -lm
Cflags: -I$prefix/include
EOF
    (cd "$deps/mhd" && ./configure -q --host=$triple --prefix="$prefix" --disable-https \
        --enable-static --disable-shared --disable-doc --disable-examples --disable-curl \
        --disable-nls >"$deps/mhd-configure.log" 2>&1 &&
        make -s -j"$(nproc)" -C src/microhttpd install >"$deps/mhd-make.log" 2>&1 &&
        make -s -C src/include install >>"$deps/mhd-make.log" 2>&1 &&
        make -s install-pkgconfigDATA >>"$deps/mhd-make.log" 2>&1) ||
        { echo "cross.sh: building libmicrohttpd failed (see $deps/mhd-*.log)" >&2; exit 1; }
fi

PKG_CONFIG_PATH=$prefix/lib/pkgconfig cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$(pwd)/cmake/linux-gnu.cmake" -DPRIMA_TARGET_ARCH="$arch" \
    -DPRIMA_STATIC=ON -DPRIMA_VULKAN=OFF "-DCMAKE_PREFIX_PATH=$prefix" "$@" >/dev/null
PKG_CONFIG_PATH=$prefix/lib/pkgconfig cmake --build "$dir" -j"$(nproc)" \
    --target prima-cli test_quant test_quant_neon test_ops
# glibc warns at link time that getaddrinfo and dlopen (GLPK's database drivers, never used)
# need its shared objects at run time: util/nss.h keeps lookups to its built-in modules.
file "$dir/prima"
ls -l "$dir/prima"

if [ "$arch" != "$host" ] && ! command -v "qemu-$arch" >/dev/null; then
    echo "cross.sh: qemu-$arch not found: the $arch kernel tests were built, not run" >&2
    exit 0
fi
(cd "$dir" && ctest --output-on-failure -R '^test_(quant|quant_neon|ops)$') ||
    { echo "cross.sh: the $arch kernel tests failed" >&2; exit 1; }
