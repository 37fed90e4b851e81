/* The answer JSON keeps every byte of the generated text: a NUL byte (a byte token the model may
 * emit) goes out as \u0000 instead of cutting the string there (cJSON's strings are C strings),
 * invalid UTF-8 as U+FFFD, and the result is valid JSON that reads back to the same bytes. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "test.h"

/* The job's answer as JSON text, checked to read back as JSON (NULL, counted as a failure,
 * when there is none). */
static char *answer_text(srv_job *j)
{
    cJSON *a = j->wire->answer(j);
    char *json = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    CHECK(json != NULL, "no answer JSON");
    if (json) {
        cJSON *back = cJSON_Parse(json);
        CHECK(back != NULL, "not valid JSON: %s", json);
        cJSON_Delete(back);
    }
    return json;
}

static void job_init(srv_job *j, enum srv_endpoint kind, const char *text, size_t len)
{
    memset(j, 0, sizeof *j);
    j->req.kind = kind;
    j->model_id = "m";
    j->wire = &srv_openai_wire;
    CHECK(strbuf_add(&j->text, text, len) == 0, "strbuf_add");
}

static void check_text(enum srv_endpoint kind, const char *text, size_t len, const char *want)
{
    srv_job j;
    job_init(&j, kind, text, len);
    char *json = answer_text(&j);
    if (json)
        CHECK(strstr(json, want) != NULL, "answer %s lacks %s", json, want);
    free(json);
    free(j.text.p);
}

/* Completions' logprobs: the token keeps its NUL (\u0000); an alternative's name is an object
 * key, a C string, so it ends at the NUL — and never holds the string's JSON literal. */
static void check_logprobs(void)
{
    srv_job j;
    job_init(&j, SRV_COMPLETION, "a\0b", 3);
    srv_token_prob tok = {"a\0b", 3, -0.5f}, top[2] = {{"a\0b", 3, -0.5f}, {"c", 1, -1.5f}};
    srv_logprob_add(&j, &tok, top, 2);
    char *json = answer_text(&j);
    if (json) {
        CHECK(strstr(json, "\"tokens\":[\"a\\u0000b\"]") != NULL, "tokens: %s", json);
        CHECK(strstr(json, "\"top_logprobs\":[{\"a\":-0.5,\"c\":-1.5}]") != NULL,
              "top_logprobs: %s", json);
    }
    free(json);
    free(j.text.p);
}

int main(void)
{
    check_logprobs();
    check_text(SRV_COMPLETION, "a\0b\"c", 5, "\"text\":\"a\\u0000b\\\"c\"");
    check_text(SRV_COMPLETION, "\0x\0", 3, "\"text\":\"\\u0000x\\u0000\"");
    check_text(SRV_COMPLETION, "caf\xc3\xa9\xff", 6, "\"text\":\"caf\xc3\xa9\xef\xbf\xbd\"");
    check_text(SRV_CHAT, "hi\0", 3, "\"content\":\"hi\\u0000\"");
    check_text(SRV_CHAT, "plain", 5, "\"content\":\"plain\"");
    return test_done();
}
