/* The harness itself (test.h) can fail: each rule runs in a child process and its exit status
 * is checked — a failed CHECK fails the test even when the test skips afterwards (it used to
 * exit 77, so ctest reported failed checks as "skipped" on a machine without fixtures), a
 * REQUIRE stops with 1 and says why (its condition evaluated once: a measurement that failed
 * and would pass when run again for the message left a silent exit 1), a plain skip is 77, and
 * a clean run is 0. A missing GPU or missing fixtures skip, unless PRIMA_REQUIRE_GPU or
 * PRIMA_REQUIRE_FIXTURES asks for them (as CI does): then they fail. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

enum scenario { PASS, CHECK_FAILS, CHECK_THEN_SKIP, SKIP_ONLY, REQUIRE_FAILS, REQUIRE_ONCE,
                FIXTURES_MISSING, NO_GPU, NO_GPU_REQUIRED, NO_GPU_NOT_REQUIRED, NO_FIXTURES,
                NO_FIXTURES_REQUIRED };

/* Fails the first time it is called, passes after. */
static int flaky(void)
{
    static int calls;
    return calls++ > 0;
}

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
    case REQUIRE_ONCE:
        REQUIRE(flaky(), "an expected stop after one evaluation");
        return 0;
    case FIXTURES_MISSING:
        CHECK(0, "an expected failure before looking for the fixtures");
        setenv("PRIMA_FIXTURES", "/nonexistent/prima-fixtures", 1);
        test_fixtures();
        return 0;
    case NO_GPU:
        unsetenv("PRIMA_REQUIRE_GPU");
        SKIP_NO_GPU("no GPU (a skip here)");
    case NO_GPU_REQUIRED:
        setenv("PRIMA_REQUIRE_GPU", "1", 1);
        SKIP_NO_GPU("no GPU (a failure here: one is required)");
    case NO_GPU_NOT_REQUIRED:
        setenv("PRIMA_REQUIRE_GPU", "0", 1);
        SKIP_NO_GPU("no GPU (a skip here: 0 requires none)");
    case NO_FIXTURES:
    case NO_FIXTURES_REQUIRED:
        if (s == NO_FIXTURES)
            unsetenv("PRIMA_REQUIRE_FIXTURES");
        else
            setenv("PRIMA_REQUIRE_FIXTURES", "1", 1);
        setenv("PRIMA_FIXTURES", "/nonexistent/prima-fixtures", 1);
        test_fixtures();
        return 0;
    }
    return 2;
}

/* The exit status of scenario s in a child, or -1 when it did not exit normally; what it wrote
 * to stderr in err (at most cap - 1 bytes). */
static int run(enum scenario s, char *err, size_t cap)
{
    int fd[2];
    fflush(stderr);
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        _exit(child(s));
    }
    close(fd[1]);
    size_t got = 0;
    for (ssize_t n; got + 1 < cap && (n = read(fd[0], err + got, cap - 1 - got)) > 0;)
        got += (size_t)n;
    err[got] = '\0';
    close(fd[0]);
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
        {REQUIRE_ONCE, 1, "a requirement that fails once"},
        {FIXTURES_MISSING, 1, "a failed check, then missing fixtures"},
        {NO_GPU, 77, "no GPU"},
        {NO_GPU_REQUIRED, 1, "no GPU under PRIMA_REQUIRE_GPU=1"},
        {NO_GPU_NOT_REQUIRED, 77, "no GPU under PRIMA_REQUIRE_GPU=0"},
        {NO_FIXTURES, 77, "no fixtures"},
        {NO_FIXTURES_REQUIRED, 1, "no fixtures under PRIMA_REQUIRE_FIXTURES=1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024];
        int got = run(cases[i].s, err, sizeof err);
        CHECK(got == cases[i].want, "%s: exit status %d, expected %d", cases[i].what, got,
              cases[i].want);
        CHECK(got == 0 || strstr(err, got == 77 ? "SKIPPED: " : " failed: "),
              "%s: exit status %d with no reason on stderr: '%s'", cases[i].what, got, err);
    }
    return test_done();
}
