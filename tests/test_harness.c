/* The harness itself (test.h) can fail: each rule runs in a child process and its exit status
 * is checked — a failed CHECK fails the test even when the test skips afterwards (it used to
 * exit 77, so ctest reported failed checks as "skipped" on a machine without fixtures), a
 * REQUIRE stops with 1, a plain skip is 77, and a clean run is 0. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

enum scenario { PASS, CHECK_FAILS, CHECK_THEN_SKIP, SKIP_ONLY, REQUIRE_FAILS, FIXTURES_MISSING };

static int child(enum scenario s)
{
    switch (s) {
    case PASS:
        CHECK(1 + 1 == 2, "arithmetic");
        return test_done();
    case CHECK_FAILS:
        CHECK(1 + 1 == 3, "an expected failure (this child must exit 1)");
        return test_done();
    case CHECK_THEN_SKIP:
        CHECK(0, "an expected failure before a skip (this child must exit 1)");
        SKIP("a skip after a failed check");
    case SKIP_ONLY:
        SKIP("a skip with nothing failed");
    case REQUIRE_FAILS:
        REQUIRE(0, "an expected stop (this child must exit 1)");
        return 0;
    case FIXTURES_MISSING:
        CHECK(0, "an expected failure before looking for the fixtures");
        setenv("PRIMA_FIXTURES", "/nonexistent/prima-fixtures", 1);
        test_fixtures();
        return 0;
    }
    return 2;
}

/* The exit status of scenario s in a child, or -1 when it did not exit normally. */
static int run(enum scenario s)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child(s));
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

int main(void)
{
    static const struct {
        enum scenario s;
        int want;
        const char *what;
    } cases[] = {
        {PASS, 0, "a passing test"},
        {CHECK_FAILS, 1, "a failed check"},
        {CHECK_THEN_SKIP, 1, "a failed check, then a skip"},
        {SKIP_ONLY, 77, "a skip"},
        {REQUIRE_FAILS, 1, "a failed requirement"},
        {FIXTURES_MISSING, 1, "a failed check, then missing fixtures"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = run(cases[i].s);
        CHECK(got == cases[i].want, "%s: exit status %d, expected %d", cases[i].what, got,
              cases[i].want);
    }
    return test_done();
}
