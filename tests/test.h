/* test.h — a minimal harness for plain ctest executables.
 * CHECK records a failure and continues; REQUIRE stops the test. Exit 0 = pass, 1 = fail,
 * 77 = skipped (ctest SKIP_RETURN_CODE; only when no check has failed), always with a reason on
 * stderr. A skip for want of what CI provides (a GPU, the fixtures) is a failure where CI asks
 * for it (PRIMA_REQUIRE_GPU, PRIMA_REQUIRE_FIXTURES; .ci/run sets both), so a broken path cannot
 * read as skipped there. tests/test_harness.c checks these rules. */
#ifndef PRIMA_TEST_H
#define PRIMA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures;

/* One failure's line on stderr (the condition is not evaluated again). */
#define TEST_FAILED_(what, ...)                                               \
    do {                                                                      \
        fprintf(stderr, "%s:%d: %s failed: ", __FILE__, __LINE__, what);      \
        fprintf(stderr, __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                  \
        test_failures++;                                                      \
    } while (0)

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond))                                                          \
            TEST_FAILED_("CHECK(" #cond ")", __VA_ARGS__);                    \
    } while (0)

/* The condition is evaluated once: one with side effects (a measurement) that failed must not
 * pass when evaluated again for the message, leaving a silent exit 1. */
#define REQUIRE(cond, ...)                                                    \
    do {                                                                      \
        if (!(cond)) {                                                        \
            TEST_FAILED_("REQUIRE(" #cond ")", __VA_ARGS__);                  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* A test that has already failed a check fails, whatever it skips afterwards: a skip must not
 * hide failures (test_quant and test_mkmodel look for the fixtures last). */
#define SKIP(...)                                                             \
    do {                                                                      \
        fprintf(stderr, "SKIPPED: ");                                         \
        fprintf(stderr, __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                  \
        if (test_failures) {                                                  \
            fprintf(stderr, "%d check(s) failed before the skip\n", test_failures); \
            exit(1);                                                          \
        }                                                                     \
        exit(77);                                                             \
    } while (0)

/* Whether the environment variable `var` asks for what a test needs: set, not empty, not "0". */
static inline int test_required(const char *var)
{
    const char *v = getenv(var);
    return v && *v && !(v[0] == '0' && !v[1]);
}

/* Skip for want of something, or fail when the variable `var` (a string literal) requires it. */
#define SKIP_UNLESS_REQUIRED(var, ...)                                        \
    do {                                                                      \
        if (test_required(var)) {                                             \
            TEST_FAILED_("skip under " var, __VA_ARGS__);                     \
            exit(1);                                                          \
        }                                                                     \
        SKIP(__VA_ARGS__);                                                    \
    } while (0)

/* No GPU to test on (gpu_open failed): a skip, or under PRIMA_REQUIRE_GPU a failure. */
#define SKIP_NO_GPU(...) SKIP_UNLESS_REQUIRED("PRIMA_REQUIRE_GPU", __VA_ARGS__)

static inline int test_done(void)
{
    if (test_failures)
        fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}

/* The fixtures directory: $PRIMA_FIXTURES, else the build's default, else ../shared/fixtures.
 * Skips the test (loudly) when it does not exist, or fails it under PRIMA_REQUIRE_FIXTURES. */
static inline const char *test_fixtures(void)
{
    const char *dir = getenv("PRIMA_FIXTURES");
    if (!dir || !*dir)
        dir = getenv("PRIMA_FIXTURES_DEFAULT");
    if (!dir || !*dir)
        dir = "../shared/fixtures";
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/README.md", dir);
    FILE *f = fopen(probe, "r");
    if (!f)
        SKIP_UNLESS_REQUIRED("PRIMA_REQUIRE_FIXTURES",
                             "fixtures not found at %s (set PRIMA_FIXTURES)", dir);
    fclose(f);
    return dir;
}

#endif
