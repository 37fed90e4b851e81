# prima keygen and --key end to end: a key file of mode 0600 that is never overwritten unless
# told to; a key file that is a directory (or missing) is refused by name, by head and worker.
prima=${PRIMA_BIN:?PRIMA_BIN not set}
. "$(dirname "$0")/support/needs.sh"
tmp=$(mktemp -d /tmp/prima-keygen.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$prima" keygen -o "$tmp/cluster.key" 2>"$tmp/err" || fail "keygen: $(cat "$tmp/err")"
[ "$(stat -c %a "$tmp/cluster.key")" = 600 ] || fail "mode $(stat -c %a "$tmp/cluster.key")"
grep -Eqx '[0-9a-f]{64}' "$tmp/cluster.key" || fail "not 64 hex digits: $(cat "$tmp/cluster.key")"
cp "$tmp/cluster.key" "$tmp/first"
"$prima" keygen -o "$tmp/cluster.key" 2>"$tmp/err"
[ $? = 1 ] && grep -q "already exists" "$tmp/err" || fail "overwrite: $(cat "$tmp/err")"
cmp -s "$tmp/cluster.key" "$tmp/first" || fail "the refused keygen changed the key"
"$prima" keygen -o "$tmp/cluster.key" --force 2>"$tmp/err" || fail "--force: $(cat "$tmp/err")"
cmp -s "$tmp/cluster.key" "$tmp/first" && fail "--force wrote the same key"
"$prima" keygen 2>"$tmp/err"
[ $? = 2 ] || fail "keygen without -o: $(cat "$tmp/err")"

if have_fixtures "the --key checks of head and worker"; then
    model=$fixtures/models/stories260K.gguf
    # the old option name and the new one, on worker and head alike
    for opt in --secret-file --key; do
        "$prima" worker -m "$model" --port 0 "$opt" "$tmp" 2>"$tmp/err"
        [ $? = 1 ] && grep -q "key file $tmp: is a directory" "$tmp/err" ||
            fail "worker $opt DIR: $(cat "$tmp/err")"
        "$prima" run -m "$model" --workers 127.0.0.1:9 "$opt" "$tmp" -p hi -n 1 2>"$tmp/err"
        [ $? != 0 ] && grep -q "key file $tmp: is a directory" "$tmp/err" ||
            fail "run $opt DIR: $(cat "$tmp/err")"
    done
    "$prima" worker -m "$model" --port 0 --key "$tmp/missing" 2>"$tmp/err"
    [ $? = 1 ] && grep -q "key file $tmp/missing: No such file" "$tmp/err" ||
        fail "worker --key MISSING: $(cat "$tmp/err")"
fi
[ $fails = 0 ] && echo "keygen_cli: all passed"
exit $((fails > 0))
