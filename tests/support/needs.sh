# needs.sh — sourced by the shell tests: what a test does when something it needs is missing
# here. It skips (exit 77, saying why), except where CI asks for that thing (PRIMA_REQUIRE_FIXTURES,
# PRIMA_REQUIRE_GPU; .ci/run sets both): there it fails, so that a broken GPU path or a lost
# fixtures directory cannot read as "skipped". tests/test.h does the same for the C tests.

# missing VARIABLE REASON: skip, or fail when VARIABLE is set (to anything but 0) or when checks
# have already failed ($fails): a skip must not hide them.
missing() {
    local required=${!1:-}
    if [ -n "$required" ] && [ "$required" != 0 ]; then
        echo "FAIL: $2 ($1 is set: it must be here)"
        exit 1
    fi
    echo "SKIPPED: $2"
    [ "${fails:-0}" = 0 ] || { echo "$fails check(s) failed before the skip"; exit 1; }
    exit 77
}

# Sets $fixtures: $PRIMA_FIXTURES, else the build's default, else ../shared/fixtures.
need_fixtures() {
    fixtures=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-../shared/fixtures}}
    [ -f "$fixtures/README.md" ] || missing PRIMA_REQUIRE_FIXTURES "fixtures not found at $fixtures"
}

# need_gpu MODEL: a one-token run of MODEL ($prima) asked for one GPU layer must get it.
need_gpu() {
    local out
    out=$("$prima" run -m "$1" -p x -n 1 -ngl 1 2>&1)
    grep -q "GPU .*: 1 of [0-9]* layers" <<<"$out" ||
        missing PRIMA_REQUIRE_GPU "no usable GPU here: $(grep GPU <<<"$out")"
}
