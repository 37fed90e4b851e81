#!/bin/sh
# cli-docs.sh [--check] — write docs/cli/COMMAND.md from `prima COMMAND --help` for every
# command the binary has (and every `prima bench NAME --help`). With --check, write nothing and
# fail if a page is missing or differs: the docs are the help text, never a second copy of it.
set -eu
cd "$(dirname "$0")/.."
bin=${PRIMA_BIN:-build/prima}
check=0
[ "${1:-}" = "--check" ] && check=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

commands=$("$bin" --help | awk '/^commands:/{on=1; next} on && !NF {exit} on {print $1}')
for cmd in $commands; do
    {
        echo "# prima $cmd"
        echo
        echo '```'
        "$bin" "$cmd" --help
        if [ "$cmd" = bench ]; then
            for b in $("$bin" bench --help | awk '/^benchmarks:/{on=1; next} on && !NF {exit} on {print $1}'); do
                echo
                "$bin" bench "$b" --help
            done
        fi
        echo '```'
    } >"$tmp/$cmd.md"
done

status=0
if [ $check -eq 1 ]; then
    for f in "$tmp"/*.md; do
        page=docs/cli/$(basename "$f")
        if ! cmp -s "$f" "$page"; then
            echo "cli-docs: $page is not the current help text (run scripts/cli-docs.sh)" >&2
            status=1
        fi
    done
else
    mkdir -p docs/cli
    cp "$tmp"/*.md docs/cli/
fi
exit $status
