#!/bin/bash
# layers.sh — every include of src/ follows the layers of docs/architecture.md ("Layers"): a file
# under src/DIR includes headers of DIR or of a layer below it, in the order that section gives
# (read from its "Order:" line, so the document and the check cannot differ), and the wire
# headers of cluster/ only from where the rules below allow. A break names the file, the line and
# the rule; an exception is a line of the allow-list, with its reason.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

order=$(sed -n 's/^ *Order: //p' "$root/docs/architecture.md")
[ -n "$order" ] || { echo "FAIL: no 'Order:' line in docs/architecture.md"; exit 1; }
# the layer of each directory: its place in the order ("a < b c < d": b and c share one)
declare -A rank
r=0
for word in $order; do
    if [ "$word" = "<" ]; then r=$((r + 1)); else rank[$word]=$r; fi
done
for dir in "$root"/src/*/; do
    d=$(basename "$dir")
    [ -n "${rank[$d]:-}" ] || fail "src/$d is in no layer of docs/architecture.md"
done

# Headers only some directories may include: "HEADER DIRS...", and why.
private=(
    # the wire: frames, the handshake and hop payloads are the ring's own business
    "cluster/proto.h cluster"
    "cluster/link.h cluster"
    "cluster/wire.h cluster"
    # sockets: the command line parses --workers addresses; the application binds the ports of
    # the workers it forks
    "cluster/net.h cluster app cli"
)
# Layers one may reach only through some files: "FROM TO FILE-OR-HEADER...".
gates=(
    # the runtime reaches the model through ring_engine (the engine as a device's layers) and
    # the sampler state that a DECODE carries
    "cluster model src/cluster/ring_engine.h src/cluster/ring_engine.c model/sample.h"
)
# Includes allowed against the rules, one line each: "FILE HEADER   reason". None today: a move
# too large to make at once goes here with its reason, not unsaid.
allow=()

declare -A used
allowed() { # FILE HEADER
    local a
    for a in "${allow[@]}"; do
        [ "${a%%   *}" = "$1 $2" ] && used[$a]=1 && return 0
    done
    return 1
}

while IFS=: read -r file line text; do
    rel=${file#"$root"/}
    from=$(cut -d/ -f2 <<<"$rel")
    header=$(sed -n 's/^#include "\([a-z_0-9]*\/[a-z_0-9]*\.h\)".*/\1/p' <<<"$text")
    [ -n "$header" ] || continue
    to=${header%%/*}
    allowed "$rel" "$header" && continue
    [ -n "${rank[$to]:-}" ] || { fail "$rel:$line includes $header, of no layer"; continue; }
    if [ "${rank[$to]}" -gt "${rank[$from]}" ] ||
        { [ "${rank[$to]}" = "${rank[$from]}" ] && [ "$to" != "$from" ]; }; then
        fail "$rel:$line: $from includes $header, from a layer above it or beside it"
    fi
    for g in "${gates[@]}"; do
        read -r -a words <<<"$g"
        [ "${words[0]}" = "$from" ] && [ "${words[1]}" = "$to" ] || continue
        [[ " ${words[*]:2} " == *" $rel "* || " ${words[*]:2} " == *" $header "* ]] ||
            fail "$rel:$line: $from reaches $to only through ${words[*]:2}, not $header"
    done
    for p in "${private[@]}"; do
        read -r -a words <<<"$p"
        [ "${words[0]}" = "$header" ] || continue
        [[ " ${words[*]:1} " == *" $from "* ]] ||
            fail "$rel:$line: $header is for ${words[*]:1} only, not $from"
    done
done < <(grep -rn '^#include "' "$root/src" --include='*.c' --include='*.h')
# an exception whose include has gone must go too, or it would excuse the next one unseen
for a in "${allow[@]}"; do
    [ -n "${used[$a]:-}" ] || fail "the allow-list excuses an include that is not there: ${a%%   *}"
done

[ $fails -eq 0 ] || { echo "$fails break(s) of the layers"; exit 1; }
echo "layers: every include of src/ follows docs/architecture.md"
