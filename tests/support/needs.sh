# needs.sh — sourced by the shell tests: what a test does when something it needs is missing
# here. It skips (exit 77, saying why), except where CI asks for that thing (PRIMA_REQUIRE_FIXTURES,
# PRIMA_REQUIRE_GPU; .ci/run sets both): there it fails, so that a broken GPU path or a lost
# fixtures directory cannot read as "skipped". tests/test.h does the same for the C tests.

# required VARIABLE REASON: when VARIABLE is set (to anything but 0), fail saying REASON.
required() {
    local value=${!1:-}
    if [ -n "$value" ] && [ "$value" != 0 ]; then
        echo "FAIL: $2 ($1 is set: it must be here)"
        exit 1
    fi
}

# missing VARIABLE REASON: skip, or fail when VARIABLE requires what is missing or when checks
# have already failed ($fails): a skip must not hide them.
missing() {
    required "$1" "$2"
    echo "SKIPPED: $2"
    [ "${fails:-0}" = 0 ] || { echo "$fails check(s) failed before the skip"; exit 1; }
    exit 77
}

# Sets $fixtures: $PRIMA_FIXTURES, else the build's default, else ../shared/fixtures; true when
# the fixtures are there.
find_fixtures() {
    fixtures=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-../shared/fixtures}}
    [ -f "$fixtures/README.md" ]
}

# need_fixtures: sets $fixtures, or skips (fails under PRIMA_REQUIRE_FIXTURES).
need_fixtures() {
    find_fixtures || missing PRIMA_REQUIRE_FIXTURES "fixtures not found at $fixtures"
}

# have_fixtures WHAT: for a test whose other checks run without the fixtures: sets $fixtures and
# is true when they are here; otherwise says that WHAT is left out and is false, or fails where
# PRIMA_REQUIRE_FIXTURES asks for them.
have_fixtures() {
    find_fixtures && return 0
    required PRIMA_REQUIRE_FIXTURES "fixtures not found at $fixtures"
    echo "fixtures not found at $fixtures; not run: $1"
    return 1
}

# need_gpu MODEL: a one-token run of MODEL ($prima) asked for one GPU layer must get it.
need_gpu() {
    local out
    out=$("$prima" run -m "$1" -p x -n 1 -ngl 1 2>&1)
    grep -q "GPU .*: 1 of [0-9]* layers" <<<"$out" ||
        missing PRIMA_REQUIRE_GPU "no usable GPU here: $(grep GPU <<<"$out")"
}
