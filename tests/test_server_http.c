/* The HTTP server (src/server) against what browsers and bad clients send, byte by byte over
 * loopback, with a generator that answers "hello" at once:
 * - other websites: a text/plain POST (what a page may send anywhere without asking), a Host
 *   that is not the server's (DNS rebinding) and a foreign Origin are refused; an allowed
 *   origin gets its CORS headers and preflight; with an API key, any Host is served;
 * - HTTP details: Content-Length with Transfer-Encoding is 400 and the connection closes, an
 *   absolute-form target is served, GET answers keep the connection open, a body of invalid
 *   UTF-8 or with a NUL is 400;
 * - connections: past the limit a client is answered 503 or reset at once (never left waiting),
 *   a client that trickles header lines is cut off at the request deadline, and of clients
 *   that come at once only those past the limit as they came are refused. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "support/fake_server.h"
#include "test.h"

static void serve_hello(void *ctx, srv *s)
{
    (void)ctx;
    srv_job *j;
    while ((j = srv_take(s, true))) {
        srv_job_begin(j, 1);
        srv_job_text(j, "hello", 5);
        srv_result r = {.finish = SRV_FINISH_STOP, .prompt_tokens = 1, .completion_tokens = 1};
        srv_job_finish(s, j, &r);
    }
}

static srv *start(const char *api_key, const char *cors, int max_connections, unsigned request_s)
{
    srv_engine e = {.serve = serve_hello, .slots = 1, .health = fake_srv_health,
                    .metrics = fake_srv_metrics, .cluster = fake_srv_cluster};
    srv_config c = {.host = "127.0.0.1", .api_key = api_key, .model_id = "m", .queue_max = 4,
                    .max_connections = max_connections, .max_body = 1 << 20, .timeout_s = 30,
                    .request_s = request_s, .cors_origins = cors};
    char err[256];
    srv *s = srv_start(&c, &e, err, sizeof err);
    REQUIRE(s, "srv_start: %s", err);
    return s;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dial(int port)
{
    return fake_srv_dial(port, 5);
}

static void send_all(int fd, const char *p, size_t n)
{
    REQUIRE(send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n, "send: %s", strerror(errno));
}

/* Read until the peer closes (or 5 s pass): the bytes in out, NUL-terminated; their count, or
 * -1 when the read failed (a reset, or the 5 s). */
static ssize_t read_all(int fd, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, out + n, cap - 1 - n, 0);
        if (k <= 0) {
            out[n] = '\0';
            return k == 0 ? (ssize_t)n : -1;
        }
        n += (size_t)k;
        if (n == cap - 1) {
            out[n] = '\0';
            return (ssize_t)n;
        }
    }
}

static int status_of(const char *resp)
{
    return !strncmp(resp, "HTTP/1.1 ", 9) ? atoi(resp + 9) : 0;
}

/* One request on a fresh connection (it should say Connection: close); the answer's status,
 * its text in resp. */
static int ask(int port, const char *req, size_t len, char *resp, size_t cap)
{
    int fd = dial(port);
    resp[0] = '\0';
    if (send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len)   /* (a reset: no status) */
        read_all(fd, resp, cap);
    close(fd);
    return status_of(resp);
}

static int askf(int port, char *resp, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int askf(int port, char *resp, size_t cap, const char *fmt, ...)
{
    char req[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(req, sizeof req, fmt, ap);
    va_end(ap);
    return ask(port, req, (size_t)n, resp, cap);
}

static const char completion[] = "{\"prompt\":\"hi\",\"max_tokens\":1}";

static void other_websites(void)
{
    srv *s = start(NULL, NULL, 16, 0);
    int port = srv_port(s);
    char r[8192];
    /* fetch(url, {mode: "no-cors", method: "POST", body: "..."}) from any page */
    int st = askf(port, r, sizeof r,
                  "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: "
                  "http://evil.example\r\nContent-Type: text/plain;charset=UTF-8\r\n"
                  "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                  port, strlen(completion), completion);
    CHECK(st == 403 || st == 415, "a text/plain POST from another website: %d %s", st, r);
    st = askf(port, r, sizeof r,
              "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/plain\r\n"
              "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
              port, strlen(completion), completion);
    CHECK(st == 415 && strstr(r, "application/json"), "a text/plain POST: %d %s", st, r);
    /* DNS rebinding: the browser names the website, whose name now resolves here */
    const char *paths[] = {"/", "/v1/models", "/cluster", "/health"};
    for (int i = 0; i < 4; i++) {
        st = askf(port, r, sizeof r, "GET %s HTTP/1.1\r\nHost: evil.example\r\n"
                  "Connection: close\r\n\r\n", paths[i]);
        CHECK(st == 403 && strstr(r, "evil.example"), "GET %s with Host evil.example: %d %s",
              paths[i], st, r);
    }
    const char *hosts[] = {"127.0.0.1", "localhost", "[::1]", "LOCALHOST"};
    for (int i = 0; i < 4; i++) {
        st = askf(port, r, sizeof r, "GET /v1/models HTTP/1.1\r\nHost: %s:%d\r\n"
                  "Connection: close\r\n\r\n", hosts[i], port);
        CHECK(st == 200, "Host %s: %d %s", hosts[i], st, r);
    }
    /* the server's own page may POST; a page elsewhere (through the server's name) may not */
    const char *post = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\n"
                       "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                       "Connection: close\r\n\r\n%s";
    char own[64];
    snprintf(own, sizeof own, "http://127.0.0.1:%d", port);
    st = askf(port, r, sizeof r, post, port, own, strlen(completion), completion);
    CHECK(st == 200 && strstr(r, "hello"), "the server's own origin: %d %s", st, r);
    st = askf(port, r, sizeof r, post, port, "http://evil.example", strlen(completion),
              completion);
    CHECK(st == 403 && !strstr(r, "Access-Control-Allow-Origin"), "a foreign origin: %d %s", st,
          r);
    st = askf(port, r, sizeof r, "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
              "Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n"
              "Connection: close\r\n\r\n", port);
    CHECK(st == 403 && !strstr(r, "Access-Control-Allow-Origin"),
          "a foreign origin's preflight: %d %s", st, r);
    srv_stop(s);

    /* with an API key, any name (the key is what keeps a website out) */
    s = start("k", NULL, 16, 0);
    port = srv_port(s);
    st = askf(port, r, sizeof r, "GET /v1/models HTTP/1.1\r\nHost: prima.example\r\n"
              "Authorization: Bearer k\r\nConnection: close\r\n\r\n");
    CHECK(st == 200, "with an API key, Host prima.example: %d %s", st, r);
    srv_stop(s);

    /* allowed origins: a preflight and the request after it */
    const char *origins[] = {"http://app.example:3000,http://other.example", "*"};
    for (int i = 0; i < 2; i++) {
        s = start(NULL, origins[i], 16, 0);
        port = srv_port(s);
        st = askf(port, r, sizeof r, "OPTIONS /v1/chat/completions HTTP/1.1\r\n"
                  "Host: 127.0.0.1:%d\r\nOrigin: http://app.example:3000\r\n"
                  "Access-Control-Request-Method: POST\r\n"
                  "Access-Control-Request-Headers: authorization, content-type\r\n"
                  "Connection: close\r\n\r\n", port);
        CHECK(st == 204 && strstr(r, "Access-Control-Allow-Origin: http://app.example:3000\r\n") &&
              strstr(r, "Access-Control-Allow-Methods: ") && strstr(r, "POST") &&
              strstr(r, "Access-Control-Allow-Headers: Authorization, Content-Type") &&
              strstr(r, "Vary: Origin"), "preflight with %s: %d %s", origins[i], st, r);
        st = askf(port, r, sizeof r, post, port, "http://app.example:3000", strlen(completion),
                  completion);
        CHECK(st == 200 && strstr(r, "Access-Control-Allow-Origin: http://app.example:3000\r\n"),
              "allowed origin with %s: %d %s", origins[i], st, r);
        st = askf(port, r, sizeof r, post, port, "http://app.example:3001", strlen(completion),
                  completion);
        CHECK(i == 1 ? st == 200 : st == 403, "origin on another port with %s: %d %s",
              origins[i], st, r);
        srv_stop(s);
    }
}

static void http_details(void)
{
    srv *s = start(NULL, NULL, 16, 0);
    int port = srv_port(s);
    char r[8192];
    /* both lengths: refused, and nothing after it is read as a request (smuggling) */
    int fd = dial(port);
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "%zx\r\n%s\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                     strlen(completion), strlen(completion), completion);
    send_all(fd, req, (size_t)n);
    ssize_t got = read_all(fd, r, sizeof r);
    CHECK(status_of(r) == 400 && got >= 0 && !strstr(r + 12, "HTTP/1.1 200"),
          "Content-Length with Transfer-Encoding: %zd bytes, %s", got, r);
    close(fd);
    /* absolute form (RFC 9112 3.2.2): its authority is the host checked */
    int st = askf(port, r, sizeof r, "GET http://127.0.0.1:%d/v1/models HTTP/1.1\r\n"
                  "Host: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", port, port);
    CHECK(st == 200 && strstr(r, "\"m\""), "absolute-form target: %d %s", st, r);
    st = askf(port, r, sizeof r, "GET http://evil.example/cluster HTTP/1.1\r\n"
              "Host: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", port);
    CHECK(st == 403, "absolute-form target naming another host: %d %s", st, r);
    /* GET answers keep the connection: three on one */
    fd = dial(port);
    n = snprintf(req, sizeof req, "GET /cluster HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", port);
    int answered = 0;
    for (int i = 0; i < 3; i++) {
        if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
            break;
        ssize_t k = recv(fd, r, sizeof r - 1, 0);
        if (k <= 0)
            break;
        r[k] = '\0';
        answered += status_of(r) == 200 && !strstr(r, "Connection: close");
    }
    CHECK(answered == 3, "GET /cluster three times on one connection: %d answered", answered);
    close(fd);
    /* a body that is not UTF-8, or holds a NUL: 400 naming it */
    static const struct {
        const char *body;
        size_t len;
        const char *want;
    } bodies[] = {
        {"{\"prompt\":\"a\xff\"}", 15, "not valid UTF-8"},
        {"{\"prompt\":\"\xc0\xaf\"}", 15, "not valid UTF-8"},        /* overlong "/" */
        {"{\"prompt\":\"\xed\xa0\x80\"}", 16, "not valid UTF-8"},    /* a surrogate */
        {"{\"prompt\":\"a\0b\"}", 15, "NUL byte"},
        {"{\"prompt\":\"a\\u0000b\"}", 20, "\\\\u0000"},
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", bodies[i].len);
        memcpy(req + n, bodies[i].body, bodies[i].len);
        st = ask(port, req, (size_t)n + bodies[i].len, r, sizeof r);
        CHECK(st == 400 && strstr(r, bodies[i].want), "body %zu: %d %s", i, st, r);
    }
    /* and an escaped backslash before "u0000" is only text */
    static const char fine[] = "{\"prompt\":\"a\\\\u0000b\",\"max_tokens\":1}";
    st = askf(port, r, sizeof r, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
              strlen(fine), fine);
    CHECK(st == 200, "an escaped backslash before u0000: %d %s", st, r);
    srv_stop(s);
}

enum { LIMIT = 8, SPARE = 32, IDLE = 60 };

static void connections(void)
{
    srv *s = start(NULL, NULL, LIMIT, 1);
    int port = srv_port(s);
    char r[8192];
    const char *get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    /* LIMIT + 4 at once: the 4 that came past the limit are refused, not all that are open
     * when their requests are read */
    int fds[LIMIT + 4];
    for (int i = 0; i < LIMIT + 4; i++)
        fds[i] = dial(port);
    struct timespec settle = {0, 100 * 1000000};
    nanosleep(&settle, NULL);
    int refused = 0;
    for (int i = 0; i < LIMIT + 4; i++)
        send_all(fds[i], get, strlen(get));
    for (int i = 0; i < LIMIT + 4; i++) {
        read_all(fds[i], r, sizeof r);
        refused += status_of(r) == 503;
        CHECK(status_of(r) == (i < LIMIT ? 200 : 503), "client %d of %d at once: %s", i + 1,
              LIMIT + 4, r);
        close(fds[i]);
    }
    fprintf(stderr, "server_http: %d clients at once against a limit of %d: %d refused\n",
            LIMIT + 4, LIMIT, refused);

    /* many idle connections: a request past them is answered or reset at once */
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        idle[i] = dial(port);
    int64_t t0 = now_ms();
    int fd = dial(port);
    ssize_t sent = send(fd, get, strlen(get), MSG_NOSIGNAL);
    ssize_t got = sent > 0 ? read_all(fd, r, sizeof r) : -1;
    int64_t took = now_ms() - t0;
    close(fd);
    bool reset = got < 0 && errno == ECONNRESET;
    fprintf(stderr, "server_http: past %d idle connections (limit %d): %s in %lld ms\n", IDLE,
            LIMIT, reset ? "reset" : r[0] ? r : "nothing", (long long)took);
    CHECK((status_of(r) == 503 || reset || sent < 0) && took < 3000,
          "past %d idle connections: %s after %lld ms", IDLE, r, (long long)took);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    /* the server sees them go within moments */
    int st = 0;
    for (int i = 0; i < 40 && st != 200; i++) {
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
        st = ask(port, get, strlen(get), r, sizeof r);
    }
    CHECK(st == 200, "after the idle connections closed: %d %s", st, r);

    /* a client that keeps sending header lines is cut off at the request deadline (1 s) */
    fd = dial(port);
    send_all(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", 39);
    int lines = 0;
    bool cut = false;
    t0 = now_ms();
    for (; lines < 40 && !cut; lines++) {
        struct timespec ts = {0, 150 * 1000000};
        nanosleep(&ts, NULL);
        char line[32];
        int k = snprintf(line, sizeof line, "X-Slow-%d: 1\r\n", lines);
        cut = send(fd, line, (size_t)k, MSG_NOSIGNAL) != k;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (!cut && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
            cut = recv(fd, line, sizeof line, MSG_DONTWAIT) <= 0;
    }
    took = now_ms() - t0;
    CHECK(cut, "a client sending a header line every 150 ms for %lld ms was never cut off",
          (long long)took);
    fprintf(stderr, "server_http: a header line every 150 ms: cut off after %lld ms\n",
            (long long)took);
    close(fd);
    /* and the server still answers */
    st = ask(port, get, strlen(get), r, sizeof r);
    CHECK(st == 200, "after the slow client: %d %s", st, r);
    srv_stop(s);
}

int main(void)
{
    other_websites();
    http_details();
    connections();
    return test_done();
}
