#!/bin/sh
# release.sh [OUTDIR] — a tarball per architecture (x86_64, aarch64) in OUTDIR (default dist/):
# prima-VERSION-linux-ARCH.tar.gz holding the static binary (scripts/cross.sh, stripped), the
# README, docs/ and LICENSES/: the copyright file of every Debian package whose archive the link
# map shows in the binary (/usr/share/doc/PACKAGE/copyright; for cJSON and libmicrohttpd, built
# from their source packages, debian/copyright of those), and SHA256SUMS over the tarballs.
# Builds in build-ARCH/ (scripts/cross.sh; the dependencies' sources are kept there).
set -eu
cd "$(dirname "$0")/.."
out=${1:-dist}
version=$(sed -n 's/^project(prima VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "release.sh: no version in CMakeLists.txt" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The Debian package that ships a file, or nothing.
package_of() {
    dpkg -S "$1" 2>/dev/null | sed -n '1s/: .*//p' | sed 's/:.*//'
}

for arch in x86_64 aarch64; do
    dir=build-$arch
    scripts/cross.sh "$arch" "$dir"
    name=prima-$version-linux-$arch
    stage=$dir/release/$name
    rm -rf "$dir/release"
    mkdir -p "$stage/LICENSES"
    "$arch-linux-gnu-strip" -o "$stage/prima" "$dir/prima"
    cp README.md "$stage/"
    cp -r docs "$stage/"
    # "path/libX.a(member.o)" lines of the map: the archives the binary took code from
    sed -n 's/^\(\/[^ (]*\.a\)(.*/\1/p' "$dir/prima.map" | sort -u >"$dir/release/archives"
    [ -s "$dir/release/archives" ] ||
        { echo "release.sh: no archives in $dir/prima.map" >&2; exit 1; }
    built=$(realpath "$dir")
    while read -r a; do
        a=$(realpath "$a")
        case "$a" in
            "$built"/deps/prefix/lib/libcjson.a)
                pkg=cjson src=$dir/deps/cjson/debian/copyright ;;
            "$built"/deps/prefix/lib/libmicrohttpd.a)
                pkg=libmicrohttpd src=$dir/deps/mhd/debian/copyright ;;
            "$built"/*) continue ;;   # prima's own
            *)
                pkg=$(package_of "$a")
                [ -n "$pkg" ] || { echo "release.sh: no package ships $a" >&2; exit 1; }
                src=/usr/share/doc/$pkg/copyright ;;
        esac
        [ -f "$src" ] || { echo "release.sh: $pkg has no $src" >&2; exit 1; }
        cp "$src" "$stage/LICENSES/$pkg.copyright"
    done <"$dir/release/archives"
    # the same bytes from the same inputs: fixed owner, order and times
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/release" \
        -czf "$out/$name.tar.gz" "$name"
    echo "$out/$name.tar.gz: binary $(wc -c <"$stage/prima") bytes," \
        "$(ls "$stage/LICENSES" | wc -l) licences"
done
(cd "$out" && sha256sum prima-"$version"-linux-*.tar.gz >SHA256SUMS && cat SHA256SUMS)
