/* A completions request of several prompts over loopback, against a scripted generator with
 * three slots that runs its jobs a token at a time in turn:
 * - one choice per prompt, by index, each the reply to its prompt alone; usage summed;
 * - streamed: each chunk one choice with its index (in any order across choices), one id for
 *   all, each choice's finish once,
 *   the usage once after every choice, then [DONE] once;
 * - a prompt that fails fails the request (400 before the stream starts, an error event in it);
 * - a client that goes away cancels every choice, queued or running;
 * - a request needs room in the queue for its prompts (429), but one larger than the server is
 *   let in when it is idle.
 * The generator's reply to a prompt is its bytes in capitals (ids: a letter each), one a token;
 * "bad" is refused as a prompt over the context is; "wait" begins and waits to be cancelled. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "support/fake_server.h"
#include "test.h"

#define SLOTS 3

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int begun_waits, cancelled;   /* "wait" jobs begun, and jobs that ended cancelled */
} fake = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void fake_count(int *n)
{
    pthread_mutex_lock(&fake.mu);
    (*n)++;
    pthread_cond_broadcast(&fake.cv);
    pthread_mutex_unlock(&fake.mu);
}

/* Wait until *n reaches want; false after 30 s (a bound on a hang, not a measure of speed). */
static bool fake_wait(int *n, int want)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&fake.mu);
    int rc = 0;
    while (*n < want && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&fake.cv, &fake.mu, &ts);
    bool ok = *n >= want;
    pthread_mutex_unlock(&fake.mu);
    return ok;
}

static int prompt_len(const srv_request *q)
{
    return q->prompt_toks ? q->n_prompt_toks : (int)strlen(q->prompt);
}

static char reply_byte(const srv_request *q, int at)
{
    return q->prompt_toks ? (char)('a' + q->prompt_toks[at] % 26)
                          : (char)toupper((unsigned char)q->prompt[at]);
}

static void serve_fake(void *ctx, srv *s)
{
    (void)ctx;
    srv_job *run[SLOTS];
    int pos[SLOTS], n = 0;
    for (;;) {
        while (n < SLOTS) {
            srv_job *j = srv_take(s, n == 0);
            if (!j)
                break;
            const srv_request *q = srv_job_request(j);
            if (!q->prompt_toks && !strcmp(q->prompt, "bad")) {
                srv_result r = {.finish = SRV_FINISH_ERROR, .status = 400,
                                .error_param = "prompt", .error_code = "context_length_exceeded"};
                snprintf(r.error, sizeof r.error, "the prompt is bad");
                srv_job_finish(s, j, &r);
                continue;
            }
            srv_job_begin(j, prompt_len(q));
            if (!q->prompt_toks && !strcmp(q->prompt, "wait"))
                fake_count(&fake.begun_waits);
            run[n] = j;
            pos[n++] = 0;
        }
        if (!n)
            return; /* stopping, nothing left */
        bool moved = false;
        for (int i = 0; i < n; i++) {
            srv_job *j = run[i];
            const srv_request *q = srv_job_request(j);
            srv_result r = {.finish = SRV_FINISH_STOP, .prompt_tokens = prompt_len(q),
                            .completion_tokens = pos[i]};
            bool waits = !q->prompt_toks && !strcmp(q->prompt, "wait");
            if (srv_job_cancelled(j)) {
                r.finish = SRV_FINISH_CANCELLED;
            } else if (!waits && pos[i] < prompt_len(q)) {
                char c = reply_byte(q, pos[i]++);
                srv_job_text(j, &c, 1);
                moved = true;
                continue;
            } else if (waits) {
                continue;
            }
            r.completion_tokens = pos[i];
            srv_job_finish(s, j, &r);
            if (r.finish == SRV_FINISH_CANCELLED)
                fake_count(&fake.cancelled);
            run[i] = run[--n];
            pos[i--] = pos[n];
            moved = true;
        }
        if (!moved)   /* only jobs waiting to be cancelled: let the connections run */
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static srv *start(int queue_max)
{
    srv_engine e = {.serve = serve_fake, .slots = SLOTS, .health = fake_srv_health,
                    .metrics = fake_srv_metrics, .cluster = fake_srv_cluster};
    srv_config c = {.host = "127.0.0.1", .model_id = "m", .queue_max = queue_max,
                    .max_connections = 16, .max_body = 1 << 20, .timeout_s = 30};
    sampler_params_default(&c.defaults);
    char err[256];
    srv *s = srv_start(&c, &e, err, sizeof err);
    REQUIRE(s, "srv_start: %s", err);
    return s;
}

static int dial(int port)
{
    return fake_srv_dial(port, 30);
}

/* POST body to /v1/completions on a new connection (Connection: close); the socket. */
static int post(int port, const char *body)
{
    int fd = dial(port);
    char req[4096];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", port, strlen(body), body);
    REQUIRE(n > 0 && (size_t)n < sizeof req && send(fd, req, (size_t)n, MSG_NOSIGNAL) == n,
            "send: %s", strerror(errno));
    return fd;
}

/* The answer to body: its status, its body (de-chunked) in out. */
static int ask(int port, const char *body, char *out, size_t cap)
{
    int fd = post(port, body);
    static char raw[1 << 16];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof raw - 1 && (k = recv(fd, raw + n, sizeof raw - 1 - n, 0)) > 0)
        n += (size_t)k;
    raw[n] = '\0';
    close(fd);
    int status = !strncmp(raw, "HTTP/1.1 ", 9) ? atoi(raw + 9) : 0;
    const char *p = strstr(raw, "\r\n\r\n");
    out[0] = '\0';
    if (!p)
        return status;
    p += 4;
    size_t o = 0;
    if (strcasestr(raw, "Transfer-Encoding: chunked")) {
        for (;;) {
            char *end;
            unsigned long len = strtoul(p, &end, 16);
            if (end == p || !len || !(end = strstr(end, "\r\n")))
                break;
            p = end + 2;
            if (len > strlen(p) || o + len >= cap)
                break;
            memcpy(out + o, p, len);
            o += len;
            p += len + 2;
        }
        out[o] = '\0';
    } else {
        snprintf(out, cap, "%s", p);
    }
    return status;
}

static cJSON *ask_json(int port, const char *body, int want_status)
{
    static char out[1 << 16];
    int st = ask(port, body, out, sizeof out);
    CHECK(st == want_status, "%s: %d %s", body, st, out);
    cJSON *o = cJSON_Parse(out);
    REQUIRE(o, "%s: not JSON: %s", body, out);
    return o;
}

static int num(const cJSON *o, const char *path1, const char *path2)
{
    const cJSON *v = cJSON_GetObjectItem(o, path1);
    if (path2)
        v = cJSON_GetObjectItem(v, path2);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* Choice i's text ("" when it has none, so that a wrong answer fails a check, not the test). */
static const char *choice_text(const cJSON *a, int i)
{
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), i), "text"));
    return t ? t : "";
}

static void whole(int port)
{
    cJSON *a = ask_json(port, "{\"prompt\":[\"ab\",\"cde\",\"f\"],\"echo\":false}", 200);
    const char *want[] = {"AB", "CDE", "F"};
    const cJSON *ch = cJSON_GetObjectItem(a, "choices");
    CHECK(cJSON_GetArraySize(ch) == 3, "%d choices", cJSON_GetArraySize(ch));
    for (int i = 0; i < cJSON_GetArraySize(ch) && i < 3; i++) {
        const cJSON *c = cJSON_GetArrayItem(ch, i);
        const char *fin = cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason"));
        CHECK(num(c, "index", NULL) == i && !strcmp(choice_text(a, i), want[i]) && fin &&
                  !strcmp(fin, "stop"),
              "choice %d: index %d, text %s", i, num(c, "index", NULL), choice_text(a, i));
    }
    CHECK(num(a, "usage", "prompt_tokens") == 6 && num(a, "usage", "completion_tokens") == 6 &&
              num(a, "usage", "total_tokens") == 12,
          "usage summed: %d %d", num(a, "usage", "prompt_tokens"),
          num(a, "usage", "completion_tokens"));
    cJSON_Delete(a);
    /* prompts of ids */
    a = ask_json(port, "{\"prompt\":[[0,1],[2]]}", 200);
    ch = cJSON_GetObjectItem(a, "choices");
    CHECK(cJSON_GetArraySize(ch) == 2 && !strcmp(choice_text(a, 0), "ab") &&
              !strcmp(choice_text(a, 1), "c"),
          "id prompts: %s %s", choice_text(a, 0), choice_text(a, 1));
    cJSON_Delete(a);
    /* more than 16: refused naming the field */
    a = ask_json(port, "{\"prompt\":[\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\","
                 "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]}", 400);
    const char *param = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "error"),
                                                                 "param"));
    CHECK(param && !strcmp(param, "prompt"), "17 prompts: param %s", param ? param : "(none)");
    cJSON_Delete(a);
}

static void streamed(int port)
{
    static char out[1 << 16];
    int st = ask(port, "{\"prompt\":[\"ab\",\"cdef\",\"g\"],\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}", out, sizeof out);
    CHECK(st == 200, "stream: %d %s", st, out);
    char text[3][8] = {"", "", ""};
    int finished[3] = {0, 0, 0}, events = 0;
    bool usage = false, done = false;
    char id[64] = "";
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(!strncmp(line, "data: ", 6), "not an event: %s", line);
        CHECK(!done, "after [DONE]: %s", line);
        if (!strcmp(line + 6, "[DONE]")) {
            done = true;
            continue;
        }
        CHECK(!usage, "an event after the usage: %s", line);
        cJSON *e = cJSON_Parse(line + 6);
        REQUIRE(e, "not JSON: %s", line);
        const char *eid = cJSON_GetStringValue(cJSON_GetObjectItem(e, "id"));
        if (!events++ && eid)
            snprintf(id, sizeof id, "%s", eid);
        CHECK(eid && !strcmp(eid, id), "chunk ids differ: %s %s", eid ? eid : "-", id);
        const cJSON *ch = cJSON_GetObjectItem(e, "choices");
        if (cJSON_GetObjectItem(e, "usage")) {
            usage = true;
            CHECK(cJSON_GetArraySize(ch) == 0 && num(e, "usage", "prompt_tokens") == 7 &&
                      num(e, "usage", "completion_tokens") == 7,
                  "usage chunk: %s", line + 6);
            CHECK(finished[0] && finished[1] && finished[2], "usage before every choice ended");
        } else {
            REQUIRE(cJSON_GetArraySize(ch) == 1, "%s", line);
            const cJSON *c = cJSON_GetArrayItem(ch, 0);
            int i = num(c, "index", NULL);
            REQUIRE(i >= 0 && i < 3, "index %d", i);
            CHECK(!finished[i], "choice %d after its end: %s", i, line);
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
            strncat(text[i], t ? t : "?", sizeof text[i] - strlen(text[i]) - 1);
            finished[i] = cJSON_IsString(cJSON_GetObjectItem(c, "finish_reason"));
        }
        cJSON_Delete(e);
    }
    CHECK(done && usage, "[DONE] %d, usage %d", done, usage);
    CHECK(!strcmp(text[0], "AB") && !strcmp(text[1], "CDEF") && !strcmp(text[2], "G"),
          "reassembled: %s %s %s", text[0], text[1], text[2]);
}

static void failing(int port)
{
    /* the first prompt fails before any began: the request is a 400 (the next never runs) */
    cJSON *a = ask_json(port, "{\"prompt\":[\"bad\",\"ab\"]}", 400);
    const cJSON *e = cJSON_GetObjectItem(a, "error");
    const char *code = cJSON_GetStringValue(cJSON_GetObjectItem(e, "code"));
    CHECK(code && !strcmp(code, "context_length_exceeded"), "the member's error: %s",
          code ? code : "(none)");
    cJSON_Delete(a);
    a = ask_json(port, "{\"prompt\":[\"ab\",\"bad\"]}", 400);
    cJSON_Delete(a);
    a = ask_json(port, "{\"prompt\":[\"bad\",\"ab\"],\"stream\":true}", 400);
    cJSON_Delete(a);
    /* a stream already started (the first choice began): an error event, then [DONE] */
    static char out[1 << 16];
    int st = ask(port, "{\"prompt\":[\"abcdef\",\"bad\"],\"stream\":true}", out, sizeof out);
    const char *err = strstr(out, "data: {\"error\"");
    const char *done = strstr(out, "data: [DONE]");
    CHECK(st == 200 && err && done && err < done && !strcmp(done, "data: [DONE]\n\n"),
          "an error in a stream: %d %s", st, out);
}

/* A request the generator answers after what came before it: every job queued or running
 * before it has been dealt with (the counters are settled). */
static void settle(int port)
{
    cJSON *a = ask_json(port, "{\"prompt\":\"z\"}", 200);
    CHECK(!strcmp(choice_text(a, 0), "Z"), "settle: %s", choice_text(a, 0));
    cJSON_Delete(a);
}

static void cancelled(int port)
{
    settle(port);
    /* streaming: the client leaves once every choice runs; all three are cancelled */
    int before = fake.cancelled;
    int fd = post(port, "{\"prompt\":[\"wait\",\"wait\",\"wait\"],\"stream\":true}");
    REQUIRE(fake_wait(&fake.begun_waits, 3), "the choices did not begin");
    close(fd);
    CHECK(fake_wait(&fake.cancelled, before + 3), "cancelled %d of 3", fake.cancelled - before);
    settle(port);
    CHECK(fake.cancelled == before + 3, "cancelled %d of 3", fake.cancelled - before);
    /* not streaming, with a fourth choice queued behind the three slots: the three running are
     * cancelled, and the fourth never begins (the queue drops it) */
    before = fake.cancelled;
    fd = post(port, "{\"prompt\":[\"wait\",\"wait\",\"wait\",\"wait\"]}");
    REQUIRE(fake_wait(&fake.begun_waits, 6), "the choices did not begin");
    close(fd);
    CHECK(fake_wait(&fake.cancelled, before + 3), "cancelled %d of 3", fake.cancelled - before);
    settle(port);
    CHECK(fake.begun_waits == 6 && fake.cancelled == before + 3,
          "the queued choice began (%d) or was seen by the generator (%d)", fake.begun_waits,
          fake.cancelled - before);
}

static void admission(void)
{
    srv *s = start(1);   /* room for 3 running and 1 queued */
    int port = srv_port(s);
    /* idle: a request of more prompts than the server holds is let in, and answered */
    cJSON *a = ask_json(port, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]}",
                        200);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(a, "choices")) == 8, "8 choices");
    cJSON_Delete(a);
    /* busy (3 running): no room for two more */
    int before = fake.begun_waits, gone = fake.cancelled;
    int fd = post(port, "{\"prompt\":[\"wait\",\"wait\",\"wait\"],\"stream\":true}");
    REQUIRE(fake_wait(&fake.begun_waits, before + 3), "the choices did not begin");
    a = ask_json(port, "{\"prompt\":[\"a\",\"b\"]}", 429);
    cJSON_Delete(a);
    close(fd);
    CHECK(fake_wait(&fake.cancelled, gone + 3), "cancelled");
    srv_stop(s);
}

int main(void)
{
    srv *s = start(8);
    int port = srv_port(s);
    whole(port);
    streamed(port);
    failing(port);
    cancelled(port);
    srv_stop(s);
    admission();
    return test_done();
}
