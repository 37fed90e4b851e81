/* The three APIs' wire formats for one reply with reasoning, text and a tool call, streamed and
 * whole: OpenAI's chunks (reasoning_content, content, tool_calls deltas with index and id,
 * finish_reason tool_calls, the usage chunk only when asked), Ollama's NDJSON lines
 * (message.thinking, message.tool_calls with the arguments as an object, a last line with
 * done and the timings) and Anthropic's events (message_start, ping, a content block per kind
 * begun and ended in order, input_json_delta, message_delta with stop_reason tool_use,
 * message_stop). Every line and event must parse as JSON. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "test.h"

static void job_init(srv_job *j, enum srv_api api, bool stream)
{
    memset(j, 0, sizeof *j);
    j->req.kind = SRV_CHAT;
    j->req.api = api;
    j->req.stream = stream;
    j->req.include_usage = true;
    j->wire = srv_wire_of(api);
    j->model_id = "m";
    j->serial = 7;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
}

static void job_free(srv_job *j)
{
    cJSON_Delete(j->calls);
    free(j->text.p);
    free(j->reasoning.p);
    free(j->out.p);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
}

/* The reply every API says in its terms. */
static void reply(srv_job *j)
{
    if (j->req.stream)
        srv_job_begin(j, 5);
    srv_job_reasoning(j, "hmm", 3);
    srv_job_text(j, "Hi", 2);
    srv_job_tool_call(j, "weather", "{\"city\":\"Oslo\"}");
    j->res = (srv_result){.finish = SRV_FINISH_STOP, .prompt_tokens = 5, .completion_tokens = 9};
    if (j->req.stream)
        j->wire->end(j);
}

/* The answer, whole, as parsed JSON (NULL, a failure, when it does not print and parse). */
static cJSON *answer(srv_job *j)
{
    cJSON *a = j->wire->answer(j);
    char *text = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    cJSON *back = text ? cJSON_Parse(text) : NULL;
    CHECK(back != NULL, "answer does not parse: %s", text ? text : "(none)");
    free(text);
    return back;
}

static const char *str(const cJSON *o, const char *path)
{
    /* a path of members separated by '.', array items by their index */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && o; tok = strtok(NULL, "."))
        o = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(o, atoi(tok))
                                         : cJSON_GetObjectItemCaseSensitive(o, tok);
    if (cJSON_IsString(o))
        return o->valuestring;
    if (cJSON_IsNull(o))
        return "null";
    if (cJSON_IsNumber(o)) {
        static char num[32];
        snprintf(num, sizeof num, "%g", o->valuedouble);
        return num;
    }
    return o ? "(not a string)" : "(absent)";
}

#define EXPECT(o, path, want) \
    do { \
        const char *got_ = str(o, path); \
        CHECK(!strcmp(got_, want), "%s: %s = '%s', want '%s'", what, path, got_, want); \
    } while (0)

/* The stream's events or lines: each data payload parsed, in order (names: event names,
 * joined by spaces, for SSE with event lines). */
static cJSON *payloads(const srv_job *j, bool ndjson, char *names, size_t cap)
{
    cJSON *all = cJSON_CreateArray();
    names[0] = '\0';
    char *text = strndup(j->out.p ? j->out.p : "", j->out.len);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *data = ndjson ? line : !strncmp(line, "data: ", 6) ? line + 6 : NULL;
        if (!strncmp(line, "event: ", 7)) {
            strncat(names, line + 7, cap - strlen(names) - 2);
            strcat(names, " ");
        }
        if (!data || !strcmp(data, "[DONE]"))
            continue;
        cJSON *o = cJSON_Parse(data);
        CHECK(o != NULL, "not JSON: %s", data);
        if (o)
            cJSON_AddItemToArray(all, o);
    }
    free(text);
    return all;
}

static void test_openai(void)
{
    const char *what = "openai answer";
    srv_job j;
    job_init(&j, SRV_API_OPENAI, false);
    reply(&j);
    cJSON *a = answer(&j);
    EXPECT(a, "choices.0.message.content", "Hi");
    EXPECT(a, "choices.0.message.reasoning_content", "hmm");
    EXPECT(a, "choices.0.message.tool_calls.0.function.name", "weather");
    EXPECT(a, "choices.0.message.tool_calls.0.function.arguments", "{\"city\":\"Oslo\"}");
    EXPECT(a, "choices.0.message.tool_calls.0.type", "function");
    CHECK(!strncmp(str(a, "choices.0.message.tool_calls.0.id"), "call_", 5), "call id");
    EXPECT(a, "choices.0.finish_reason", "tool_calls");
    cJSON_Delete(a);
    job_free(&j);

    what = "openai stream";
    job_init(&j, SRV_API_OPENAI, true);
    reply(&j);
    char names[512];
    cJSON *ev = payloads(&j, false, names, sizeof names);
    int n = cJSON_GetArraySize(ev);
    CHECK(n == 6, "%d chunks: role, reasoning, text, call, finish, usage", n);
    if (n == 6) {
        EXPECT(cJSON_GetArrayItem(ev, 0), "choices.0.delta.role", "assistant");
        EXPECT(cJSON_GetArrayItem(ev, 1), "choices.0.delta.reasoning_content", "hmm");
        EXPECT(cJSON_GetArrayItem(ev, 2), "choices.0.delta.content", "Hi");
        EXPECT(cJSON_GetArrayItem(ev, 3), "choices.0.delta.tool_calls.0.index", "0");
        EXPECT(cJSON_GetArrayItem(ev, 3), "choices.0.delta.tool_calls.0.function.name", "weather");
        EXPECT(cJSON_GetArrayItem(ev, 4), "choices.0.finish_reason", "tool_calls");
        EXPECT(cJSON_GetArrayItem(ev, 5), "usage.completion_tokens", "9");
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 5), "choices")) == 0,
              "the usage chunk has no choices");
        CHECK(!cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 4), "usage"), "usage in its own chunk");
    }
    cJSON_Delete(ev);
    job_free(&j);

    /* without include_usage: no usage anywhere */
    job_init(&j, SRV_API_OPENAI, true);
    j.req.include_usage = false;
    reply(&j);
    CHECK(!memmem(j.out.p, j.out.len, "\"usage\"", 7), "usage without include_usage");
    job_free(&j);
}

static void test_ollama(void)
{
    const char *what = "ollama answer";
    srv_job j;
    job_init(&j, SRV_API_OLLAMA, false);
    reply(&j);
    cJSON *a = answer(&j);
    EXPECT(a, "message.role", "assistant");
    EXPECT(a, "message.content", "Hi");
    EXPECT(a, "message.thinking", "hmm");
    EXPECT(a, "message.tool_calls.0.function.name", "weather");
    EXPECT(a, "message.tool_calls.0.function.arguments.city", "Oslo");
    EXPECT(a, "done_reason", "stop");
    EXPECT(a, "eval_count", "9");
    EXPECT(a, "prompt_eval_count", "5");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(a, "done")), "done");
    cJSON_Delete(a);
    job_free(&j);

    what = "ollama stream";
    job_init(&j, SRV_API_OLLAMA, true);
    reply(&j);
    char names[64];
    cJSON *ev = payloads(&j, true, names, sizeof names);
    int n = cJSON_GetArraySize(ev);
    CHECK(n == 4, "%d lines: thinking, text, call, done", n);
    if (n == 4) {
        EXPECT(cJSON_GetArrayItem(ev, 0), "message.thinking", "hmm");
        EXPECT(cJSON_GetArrayItem(ev, 1), "message.content", "Hi");
        EXPECT(cJSON_GetArrayItem(ev, 2), "message.tool_calls.0.function.arguments.city", "Oslo");
        EXPECT(cJSON_GetArrayItem(ev, 3), "done_reason", "stop");
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 2), "done")) &&
                  cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 3), "done")),
              "done only on the last line");
    }
    cJSON_Delete(ev);
    job_free(&j);

    /* /api/generate: "response" and "thinking" at the top */
    what = "ollama generate";
    job_init(&j, SRV_API_OLLAMA, false);
    j.req.reply_as_text = true;
    reply(&j);
    a = answer(&j);
    EXPECT(a, "response", "Hi");
    EXPECT(a, "thinking", "hmm");
    CHECK(!cJSON_GetObjectItem(a, "message"), "no message");
    cJSON_Delete(a);
    job_free(&j);
}

static void test_anthropic(void)
{
    const char *what = "anthropic answer";
    srv_job j;
    job_init(&j, SRV_API_ANTHROPIC, false);
    reply(&j);
    cJSON *a = answer(&j);
    EXPECT(a, "type", "message");
    EXPECT(a, "content.0.type", "thinking");
    EXPECT(a, "content.0.thinking", "hmm");
    EXPECT(a, "content.1.text", "Hi");
    EXPECT(a, "content.2.type", "tool_use");
    EXPECT(a, "content.2.name", "weather");
    EXPECT(a, "content.2.input.city", "Oslo");
    CHECK(!strncmp(str(a, "content.2.id"), "toolu_", 6), "tool_use id");
    EXPECT(a, "stop_reason", "tool_use");
    EXPECT(a, "usage.output_tokens", "9");
    cJSON_Delete(a);
    job_free(&j);

    what = "anthropic stream";
    job_init(&j, SRV_API_ANTHROPIC, true);
    reply(&j);
    char names[1024];
    cJSON *ev = payloads(&j, false, names, sizeof names);
    CHECK(!strcmp(names, "message_start ping content_block_start content_block_delta "
                         "content_block_stop content_block_start content_block_delta "
                         "content_block_stop content_block_start content_block_delta "
                         "content_block_stop message_delta message_stop "),
          "events: %s", names);
    if (cJSON_GetArraySize(ev) == 13) {
        EXPECT(cJSON_GetArrayItem(ev, 0), "message.usage.input_tokens", "5");
        EXPECT(cJSON_GetArrayItem(ev, 2), "content_block.type", "thinking");
        EXPECT(cJSON_GetArrayItem(ev, 3), "delta.thinking", "hmm");
        EXPECT(cJSON_GetArrayItem(ev, 5), "index", "1");
        EXPECT(cJSON_GetArrayItem(ev, 6), "delta.text", "Hi");
        EXPECT(cJSON_GetArrayItem(ev, 8), "content_block.type", "tool_use");
        EXPECT(cJSON_GetArrayItem(ev, 8), "content_block.name", "weather");
        EXPECT(cJSON_GetArrayItem(ev, 9), "delta.type", "input_json_delta");
        EXPECT(cJSON_GetArrayItem(ev, 9), "delta.partial_json", "{\"city\":\"Oslo\"}");
        EXPECT(cJSON_GetArrayItem(ev, 10), "index", "2");
        EXPECT(cJSON_GetArrayItem(ev, 11), "delta.stop_reason", "tool_use");
        EXPECT(cJSON_GetArrayItem(ev, 11), "usage.output_tokens", "9");
    }
    cJSON_Delete(ev);
    job_free(&j);

    /* a stop sequence is named; an empty reply is one empty text block */
    what = "anthropic stop";
    job_init(&j, SRV_API_ANTHROPIC, true);
    srv_job_begin(&j, 2);
    j.res = (srv_result){.finish = SRV_FINISH_STOP, .stop_sequence = "END"};
    j.wire->end(&j);
    ev = payloads(&j, false, names, sizeof names);
    CHECK(!strcmp(names, "message_start ping content_block_start content_block_stop "
                         "message_delta message_stop "),
          "events: %s", names);
    if (cJSON_GetArraySize(ev) == 6) {
        EXPECT(cJSON_GetArrayItem(ev, 4), "delta.stop_reason", "stop_sequence");
        EXPECT(cJSON_GetArrayItem(ev, 4), "delta.stop_sequence", "END");
    }
    cJSON_Delete(ev);
    job_free(&j);
}

/* Embeddings: OpenAI's list (floats, or base64 of the float32 bytes), Ollama's arrays. */
static void test_embeddings(void)
{
    const char *what = "embeddings";
    const float v0[3] = {0.5f, -0.25f, 1.0f}, v1[3] = {0, 1, -2};
    srv_input in[2] = {{.text = "a"}, {.text = "b"}};
    for (int api = 0; api < 3; api++) {
        srv_job j;
        job_init(&j, api == 2 ? SRV_API_OLLAMA : SRV_API_OPENAI, false);
        j.req.kind = SRV_EMBED;
        j.req.inputs = in;
        j.req.n_inputs = 2;
        j.req.base64 = api == 1;
        srv_job_embedding(&j, 1, v1, 3);
        srv_job_embedding(&j, 0, v0, 3);
        j.res = (srv_result){.finish = SRV_FINISH_STOP, .prompt_tokens = 4};
        cJSON *a = answer(&j);
        if (api == 0) {
            EXPECT(a, "object", "list");
            EXPECT(a, "data.0.embedding.1", "-0.25");
            EXPECT(a, "data.1.embedding.2", "-2");
            EXPECT(a, "data.1.index", "1");
            EXPECT(a, "usage.prompt_tokens", "4");
        } else if (api == 1) {
            /* 0.5, -0.25, 1.0 as little-endian float32: 0000003f 000080be 0000803f */
            EXPECT(a, "data.0.embedding", "AAAAPwAAgL4AAIA/");
        } else {
            EXPECT(a, "embeddings.0.0", "0.5");
            EXPECT(a, "embeddings.1.1", "1");
            EXPECT(a, "prompt_eval_count", "4");
        }
        cJSON_Delete(a);
        free(j.emb);
        job_free(&j);
    }
}

/* Errors in each API's shape. */
static void test_errors(void)
{
    const char *what = "errors";
    cJSON *e = srv_openai_wire.error(404, "model", "model_not_found", "no such model");
    EXPECT(e, "error.code", "model_not_found");
    EXPECT(e, "error.type", "not_found_error");
    EXPECT(e, "error.param", "model");
    cJSON_Delete(e);
    e = srv_openai_wire.error(400, "messages", "context_length_exceeded", "too long");
    EXPECT(e, "error.code", "context_length_exceeded");
    EXPECT(e, "error.type", "invalid_request_error");
    cJSON_Delete(e);
    e = srv_ollama_wire.error(404, NULL, NULL, "model 'x' not found");
    EXPECT(e, "error", "model 'x' not found");
    cJSON_Delete(e);
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
                 {404, "not_found_error"},       {413, "request_too_large"},
                 {429, "rate_limit_error"},      {500, "api_error"},
                 {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        e = srv_anthropic_wire.error(types[i].status, NULL, NULL, "m");
        EXPECT(e, "type", "error");
        EXPECT(e, "error.type", types[i].type);
        EXPECT(e, "error.message", "m");
        cJSON_Delete(e);
    }
}

int main(void)
{
    test_openai();
    test_ollama();
    test_anthropic();
    test_errors();
    test_embeddings();
    return test_done();
}
