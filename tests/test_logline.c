/* Log lines are written whole, one write each: through log_line itself, and end to end, where
 * prima's stderr (a head and the workers it starts) is a SOCK_SEQPACKET socket, whose reader
 * gets each write as one record. A line written in pieces shows up as a record that does not
 * end with a newline. */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "util/logline.h"

#define RECORD_MAX 65536

/* Every record from fd until end of file (or 120 s): how many, how many do not end with a
 * newline, and the first one (NUL-terminated, cut at cap). */
static int read_records(int fd, int *bad, char *first, size_t cap)
{
    static char buf[RECORD_MAX + 1];
    int n = 0;
    *bad = 0;
    time_t end = time(NULL) + 120;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) < 0 || time(NULL) > end)
            break;
        if (!p.revents)
            continue;
        ssize_t len = recv(fd, buf, RECORD_MAX, 0);
        if (len <= 0)
            break;
        buf[len] = 0;
        if (n == 0) {
            size_t k = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
            memcpy(first, buf, k);
            first[k] = 0;
        }
        if (buf[len - 1] != '\n') {
            fprintf(stderr, "a write that does not end a line: '%s'\n", buf);
            (*bad)++;
        }
        n++;
    }
    return n;
}

/* Run prima with argv, stdout to /dev/null and stderr to a seqpacket socket. */
static int run_prima(const char *bin, char *const *argv, int *bad, char *first, size_t cap)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0, "socketpair");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(sv[0]);
        FILE *null = fopen("/dev/null", "w");
        if (!null || dup2(fileno(null), 1) < 0 || dup2(sv[1], 2) < 0)
            _exit(127);
        execv(bin, argv);
        _exit(127);
    }
    close(sv[1]);
    int n = read_records(sv[0], bad, first, cap);
    close(sv[0]);
    int status;
    waitpid(pid, &status, 0);
    return n;
}

int main(void)
{
    /* log_line: prefix, message and newline in one write; a long line cut with "..." */
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0, "socketpair");
    FILE *f = fdopen(sv[1], "w");
    REQUIRE(f, "fdopen");
    setvbuf(f, NULL, _IONBF, 0);   /* as stderr is */
    log_line(f, "prima worker :9500: ", "batch %d: %s", 7, "compute 1.0 ms");
    static char big[3 * LOG_LINE_MAX];
    memset(big, 'x', sizeof big - 1);
    log_line(f, "ring: ", "%s", big);
    fclose(f);
    char rec[RECORD_MAX];
    ssize_t len = recv(sv[0], rec, sizeof rec - 1, 0);
    CHECK(len > 0 && !memcmp(rec, "prima worker :9500: batch 7: compute 1.0 ms\n", (size_t)len) &&
              len == (ssize_t)strlen("prima worker :9500: batch 7: compute 1.0 ms\n"),
          "first write: %zd bytes '%.*s'", len, (int)(len > 0 ? len : 0), rec);
    len = recv(sv[0], rec, sizeof rec - 1, 0);
    CHECK(len == LOG_LINE_MAX - 1 && !memcmp(rec + len - 4, "...\n", 4) && !memcmp(rec, "ring: x", 7),
          "a long line: %zd bytes, ending '%.*s'", len, 4, len >= 4 ? rec + len - 4 : "");
    close(sv[0]);

    const char *bin = getenv("PRIMA_BIN");
    REQUIRE(bin && *bin, "PRIMA_BIN not set");

    /* an error: one line, one write */
    int bad;
    char first[512];
    char *err_argv[] = {"prima", "run", "-m", "/nonexistent/model.gguf", "-p", "x", NULL};
    int n = run_prima(bin, err_argv, &bad, first, sizeof first);
    CHECK(n == 1 && bad == 0 && strstr(first, "prima: /nonexistent/model.gguf: cannot open"),
          "an error came in %d write(s), %d not ending a line; first '%s'", n, bad, first);

    /* a head and two workers on one stderr, with every batch's counters */
    const char *fx = getenv("PRIMA_FIXTURES");
    if (!fx || !*fx)
        fx = getenv("PRIMA_FIXTURES_DEFAULT");
    char model[4096];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", fx ? fx : "../shared/fixtures");
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "fixtures not found (%s): the cluster check is left out\n", model);
        return test_done();
    }
    char *cl_argv[] = {"prima", "cluster", "-m", model, "--devices", "3", "--verbose", "-t", "1",
                       "-p", "Once upon a time", "-n", "16", "--temp", "0", NULL};
    n = run_prima(bin, cl_argv, &bad, first, sizeof first);
    CHECK(n > 40 && bad == 0, "cluster --verbose: %d write(s), %d not ending a line", n, bad);
    return test_done();
}
