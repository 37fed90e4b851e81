/* The server's request parser: what OpenAI clients send is read into the fields, and anything
 * malformed, of the wrong type or out of range is refused naming the field. */
#include <string.h>

#include "server/request.h"
#include "test.h"

static sampler_params defaults;

static int parse(enum srv_endpoint kind, const char *body, srv_request *r, srv_refusal *why)
{
    return srv_request_parse(r, kind, body, strlen(body), &defaults, why);
}

/* The body is refused, naming param (NULL: the body as a whole) with a message containing
 * `words`. */
static void refused(enum srv_endpoint kind, const char *body, const char *param,
                    const char *words)
{
    srv_request r;
    srv_refusal why;
    int rc = parse(kind, body, &r, &why);
    CHECK(rc == -1, "accepted: %s", body);
    if (rc) {
        CHECK(param ? why.param && !strcmp(why.param, param) : !why.param,
              "%s: param %s, want %s", body, why.param ? why.param : "(none)",
              param ? param : "(none)");
        CHECK(strstr(why.message, words), "%s: message '%s' lacks '%s'", body, why.message,
              words);
    } else {
        srv_request_free(&r);
    }
}

static void test_chat(void)
{
    srv_request r;
    srv_refusal why;
    const char *body =
        "{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hel\"},"
        "{\"type\":\"text\",\"text\":\"lo\"}]}],\"max_completion_tokens\":7,\"temperature\":0,"
        "\"top_k\":3,\"top_p\":0.5,\"min_p\":0.1,\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.5,\"repeat_penalty\":1.1,\"seed\":42,\"stop\":[\"a\",\"\",\"bc\"],"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
        "\"top_logprobs\":3,\"n\":1,\"user\":\"ignored\"}";
    REQUIRE(parse(SRV_CHAT, body, &r, &why) == 0, "refused: %s", why.message);
    CHECK(r.n_msgs == 2, "%d messages", r.n_msgs);
    CHECK(!strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[0].content, "Be brief."),
          "developer -> system: %s %s", r.msgs[0].role, r.msgs[0].content);
    CHECK(!strcmp(r.msgs[1].role, "user") && !strcmp(r.msgs[1].content, "Hello"),
          "parts joined: %s", r.msgs[1].content);
    CHECK(r.max_tokens == 7 && r.sp.temp == 0.0f && r.sp.top_k == 3 && r.sp.top_p == 0.5f &&
              fabsf(r.sp.min_p - 0.1f) < 1e-7f && r.sp.presence_penalty == 0.5f &&
              r.sp.frequency_penalty == -0.5f && fabsf(r.sp.repeat_penalty - 1.1f) < 1e-6f,
          "numbers");
    CHECK(r.seed_given && r.sp.seed == 42, "seed");
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "a") && !strcmp(r.stop[1], "bc"),
          "stop strings (the empty one dropped): %d", r.n_stop);
    CHECK(r.stream && r.logprobs && r.top_logprobs == 3, "stream, logprobs");
    srv_request_free(&r);

    /* defaults: the server's sampling, no limit, no seed */
    REQUIRE(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &why) == 0,
            "%s", why.message);
    CHECK(r.max_tokens == -1 && !r.seed_given && r.sp.temp == defaults.temp &&
              r.sp.top_k == defaults.top_k && !r.stream && !r.logprobs && r.n_stop == 0,
          "defaults");
    srv_request_free(&r);
}

static void test_completion(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(SRV_COMPLETION, " {\"prompt\":[\"Once\"],\"stop\":\"x\",\"logprobs\":2} \n", &r,
                  &why) == 0,
            "%s", why.message);
    CHECK(!strcmp(r.prompt, "Once") && r.n_stop == 1 && r.logprobs && r.top_logprobs == 2,
          "completion fields");
    srv_request_free(&r);
    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":null,\"max_tokens\":null}", &r,
                  &why) == 0,
            "%s", why.message);
    CHECK(!r.logprobs && r.max_tokens == -1, "null is not given");
    srv_request_free(&r);
}

/* Several prompts, OpenAI's array of strings or of id arrays: one choice each. */
static void test_prompts(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":[\"Once\",\"\",\"upon\"],\"echo\":true}", &r,
                  &why) == 0, "%s", why.message);
    CHECK(r.n_prompts == 3 && r.prompts && !strcmp(r.prompts[0].text, "Once") &&
              !strcmp(r.prompts[1].text, "") && !strcmp(r.prompts[2].text, "upon") && r.echo &&
              !r.prompt_toks && !strcmp(r.prompt, ""),
          "three strings: %d", r.n_prompts);
    srv_request_free(&r);
    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":[[1,2,3],[4],[5,6]]}", &r, &why) == 0, "%s",
            why.message);
    CHECK(r.n_prompts == 3 && !r.prompts[0].text && r.prompts[0].n_toks == 3 &&
              r.prompts[0].toks[2] == 3 && r.prompts[1].n_toks == 1 && r.prompts[1].toks[0] == 4 &&
              r.prompts[2].n_toks == 2 && r.prompts[2].toks[0] == 5 && r.prompts[2].toks[1] == 6,
          "three arrays of ids");
    srv_request_free(&r);
    /* one prompt in an array is that prompt, as before: no group */
    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":[[9,8]]}", &r, &why) == 0, "%s", why.message);
    CHECK(!r.prompts && r.n_prompt_toks == 2 && r.prompt_toks[1] == 8, "one array of ids");
    srv_request_free(&r);
    /* the most a request may hold */
    char body[512] = "{\"prompt\":[";
    for (int i = 0; i < SRV_MAX_PROMPTS; i++)
        strcat(body, i ? ",\"p\"" : "\"p\"");
    strcat(body, "]}");
    REQUIRE(parse(SRV_COMPLETION, body, &r, &why) == 0, "%s", why.message);
    CHECK(r.n_prompts == SRV_MAX_PROMPTS, "%d prompts", r.n_prompts);
    srv_request_free(&r);
    body[strlen(body) - 2] = '\0';
    strcat(body, ",\"p\"]}");
    refused(SRV_COMPLETION, body, "prompt", "at most 16");
    /* OpenAI's schema: an array of strings, or of id arrays, never a mix */
    refused(SRV_COMPLETION, "{\"prompt\":[\"a\",[1,2]]}", "prompt", "item 1 is not a string");
    refused(SRV_COMPLETION, "{\"prompt\":[[1,2],\"a\"]}", "prompt", "item 1 is not a non-empty");
    refused(SRV_COMPLETION, "{\"prompt\":[[1],[]]}", "prompt", "item 1 is not a non-empty");
    refused(SRV_COMPLETION, "{\"prompt\":[[1],[2,-3]]}", "prompt", "item 1: token 1");
    refused(SRV_COMPLETION, "{\"prompt\":[[1],[\"a\"]]}", "prompt", "item 1: token 0");
    refused(SRV_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt", "token 1 is not a token id");
    refused(SRV_COMPLETION, "{\"prompt\":[\"a\",null]}", "prompt", "item 1 is not a string");
    refused(SRV_COMPLETION, "{\"prompt\":[[]]}", "prompt", "item 0");
    refused(SRV_COMPLETION, "{\"prompt\":[{}]}", "prompt", "item 0");
    refused(SRV_COMPLETION, "{\"prompt\":[]}", "prompt", "non-empty array");
}

static void test_refusals(void)
{
    static const struct {
        enum srv_endpoint kind;
        const char *body, *param, *words;
    } cases[] = {
        {SRV_CHAT, "{\"messages\":[", NULL, "malformed JSON"},
        {SRV_CHAT, "", NULL, "malformed JSON"},
        {SRV_COMPLETION, "{\"prompt\":\"a\"} x", NULL, "after the value"},
        {SRV_CHAT, "[1]", NULL, "JSON object"},
        {SRV_CHAT, "{}", "messages", "required"},
        {SRV_CHAT, "{\"messages\":[]}", "messages", "non-empty"},
        {SRV_CHAT, "{\"messages\":{}}", "messages", "non-empty array"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", "messages", "role"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages", "'content' is required"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages", "content"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages", "text"},
        {SRV_COMPLETION, "{}", "prompt", "required"},
        {SRV_COMPLETION, "{\"prompt\":5}", "prompt", "string"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"model\":1}", "model", "string"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":\"8\"}", "max_tokens", "number"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens", "[1,"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":2.5}", "max_tokens", "integer"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"max_completion_tokens\":-1}", "max_completion_tokens", "[1,"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"temperature\":3}", "temperature", "[0, 2]"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"temperature\":true}", "temperature", "number"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"top_p\":0}", "top_p", "(0, 1]"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"top_k\":-1}", "top_k", "[0,"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"min_p\":1.5}", "min_p", "[0, 1]"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"presence_penalty\":-3}", "presence_penalty", "[-2, 2]"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"frequency_penalty\":\"1\"}", "frequency_penalty", "number"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"repeat_penalty\":0}", "repeat_penalty", "["},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"seed\":-1}", "seed", "[0,"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"seed\":1.5}", "seed", "integer"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"stop\":5}", "stop", "up to 4"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "up to 4"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"a\",1]}", "stop", "strings"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"n\":2}", "n", "must be 1"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"stream\":1}", "stream", "true or false"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"stream_options\":1}", "stream_options", "object"},
        {SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", "logprobs", "[0, 5]"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs", "true or false"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs", "needs 'logprobs'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "[0, 20]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused(cases[i].kind, cases[i].body, cases[i].param, cases[i].words);
}

int main(void)
{
    sampler_params_default(&defaults);
    test_chat();
    test_completion();
    test_prompts();
    test_refusals();
    return test_done();
}
