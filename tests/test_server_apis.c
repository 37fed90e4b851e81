/* The Ollama and Anthropic request parsers: what their clients send lands in the same fields as
 * OpenAI's (messages, sampling, limits, stop strings, tools, the output constraint), the
 * conversation reaches the chat template with tool calls and results, and anything malformed,
 * of the wrong type or unsupported is refused naming the field, never accepted half-read. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "server/request.h"
#include "test.h"

static sampler_params defaults;

enum api { OLLAMA_CHAT, OLLAMA_GENERATE, ANTHROPIC, OPENAI_COMPLETION, OPENAI_CHAT, OPENAI_EMBED,
           OLLAMA_EMBED };

static int parse(enum api a, const char *body, srv_request *r, srv_refusal *why)
{
    size_t n = strlen(body);
    switch (a) {
    case OLLAMA_CHAT: return srv_ollama_parse(r, SRV_CHAT, body, n, &defaults, why);
    case OLLAMA_GENERATE: return srv_ollama_parse(r, SRV_COMPLETION, body, n, &defaults, why);
    case ANTHROPIC: return srv_anthropic_parse(r, body, n, &defaults, why);
    case OPENAI_COMPLETION: return srv_request_parse(r, SRV_COMPLETION, body, n, &defaults, why);
    case OPENAI_EMBED: return srv_embed_parse(r, SRV_API_OPENAI, body, n, &defaults, why);
    case OLLAMA_EMBED: return srv_embed_parse(r, SRV_API_OLLAMA, body, n, &defaults, why);
    default: return srv_request_parse(r, SRV_CHAT, body, n, &defaults, why);
    }
}

/* The conversation the template sees, as JSON text (freed by the caller). */
static char *template_view(const srv_request *r)
{
    return r->chat_json ? cJSON_PrintUnformatted(r->chat_json) : strdup("null");
}

static void test_ollama(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(OLLAMA_CHAT,
                  "{\"model\":\"m:latest\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                  "{\"role\":\"user\",\"content\":\"U\"},{\"role\":\"assistant\",\"content\":\"\","
                  "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},"
                  "{\"role\":\"tool\",\"content\":\"42\",\"tool_name\":\"f\"}],"
                  "\"options\":{\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"num_predict\":9,"
                  "\"num_ctx\":4096,\"seed\":3,\"stop\":[\"x\",\"y\"],\"repeat_penalty\":1.2,"
                  "\"mirostat\":0},\"keep_alive\":\"5m\",\"think\":false,\"format\":\"json\","
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                  "{\"type\":\"object\"}}}]}",
                  &r, &why) == 0,
            "refused: %s", why.message);
    CHECK(r.api == SRV_API_OLLAMA && r.kind == SRV_CHAT && r.stream, "api, kind, streams by default");
    CHECK(!strcmp(r.model, "m:latest"), "model %s", r.model);
    CHECK(r.sp.temp == 0.5f && r.sp.top_p == 0.9f && r.sp.top_k == 7 && r.max_tokens == 9 &&
              r.seed_given && r.sp.seed == 3 && fabsf(r.sp.repeat_penalty - 1.2f) < 1e-6f,
          "options");
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "y"), "stop");
    CHECK(r.out == SRV_OUT_JSON, "format json");
    CHECK(r.n_tools == 1 && r.tool_choice == SRV_TOOLS_AUTO, "tools");
    CHECK(r.n_msgs == 4 && !strcmp(r.msgs[3].role, "tool"), "messages");
    char *view = template_view(&r);
    CHECK(strstr(view, "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                       "\"arguments\":{\"a\":1}}}]") &&
              strstr(view, "{\"role\":\"tool\",\"content\":\"42\",\"name\":\"f\"}"),
          "template view: %s", view);
    free(view);
    srv_request_free(&r);

    /* generate: the prompt as a user's turn after the system, or raw; a schema as format */
    REQUIRE(parse(OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"P\",\"system\":\"S\","
                  "\"stream\":false,\"format\":{\"type\":\"object\"},\"options\":{\"num_predict\":-1,"
                  "\"seed\":-1}}", &r, &why) == 0, "refused: %s", why.message);
    CHECK(r.kind == SRV_CHAT && r.n_msgs == 2 && !strcmp(r.msgs[1].content, "P") &&
              !strcmp(r.msgs[0].role, "system") && r.reply_as_text && !r.stream,
          "generate as a chat");
    CHECK(r.out == SRV_OUT_SCHEMA && cJSON_IsObject((const cJSON *)r.schema), "format schema");
    CHECK(r.max_tokens == -1 && !r.seed_given, "num_predict -1, seed -1");
    srv_request_free(&r);
    REQUIRE(parse(OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"<s>P\",\"raw\":true}", &r, &why) == 0,
            "refused: %s", why.message);
    CHECK(r.kind == SRV_COMPLETION && !strcmp(r.prompt, "<s>P") && r.reply_as_text, "raw");
    srv_request_free(&r);
    /* no prompt, no messages: load the model */
    REQUIRE(parse(OLLAMA_GENERATE, "{\"model\":\"m\"}", &r, &why) == 0, "%s", why.message);
    CHECK(r.load_only, "generate without a prompt loads");
    srv_request_free(&r);
    REQUIRE(parse(OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[]}", &r, &why) == 0, "%s", why.message);
    CHECK(r.load_only, "chat without messages loads");
    srv_request_free(&r);
}

static void test_anthropic(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(ANTHROPIC,
                  "{\"model\":\"m\",\"max_tokens\":64,\"system\":[{\"type\":\"text\",\"text\":\"S1\"},"
                  "{\"type\":\"text\",\"text\":\"S2\"}],\"messages\":["
                  "{\"role\":\"user\",\"content\":\"Weather?\"},"
                  "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},"
                  "{\"type\":\"text\",\"text\":\"Let me look.\"},{\"type\":\"tool_use\",\"id\":\"t1\","
                  "\"name\":\"weather\",\"input\":{\"city\":\"Oslo\"}}]},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
                  "\"content\":[{\"type\":\"text\",\"text\":\"-3 C\"}]},{\"type\":\"text\",\"text\":\"Thanks\"}]}],"
                  "\"stop_sequences\":[\"END\"],\"temperature\":0.3,\"top_k\":5,\"stream\":true,"
                  "\"metadata\":{\"user_id\":\"u\"},\"tools\":[{\"name\":\"weather\",\"description\":\"d\","
                  "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
                  "\"tool_choice\":{\"type\":\"tool\",\"name\":\"weather\",\"disable_parallel_tool_use\":true}}",
                  &r, &why) == 0,
            "refused: %s", why.message);
    CHECK(r.api == SRV_API_ANTHROPIC && r.max_tokens == 64 && r.stream && r.sp.temp == 0.3f &&
              r.sp.top_k == 5,
          "fields");
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "END"), "stop_sequences");
    CHECK(r.n_msgs == 5, "%d messages: system, user, assistant, tool, user", r.n_msgs);
    if (r.n_msgs == 5)
        CHECK(!strcmp(r.msgs[0].content, "S1S2") && !strcmp(r.msgs[2].content, "Let me look.") &&
                  !strcmp(r.msgs[3].role, "tool") && !strcmp(r.msgs[3].content, "-3 C") &&
                  !strcmp(r.msgs[4].content, "Thanks"),
              "contents");
    CHECK(r.n_tools == 1 && r.tool_choice == SRV_TOOLS_NAMED && !strcmp(r.tool_name, "weather") &&
              !r.parallel_tool_calls,
          "tools and tool_choice");
    char *view = template_view(&r);
    CHECK(strstr(view, "\"tool_calls\":[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":"
                       "\"weather\",\"arguments\":{\"city\":\"Oslo\"}}}]") &&
              strstr(view, "\"role\":\"tool\",\"content\":\"-3 C\",\"tool_call_id\":\"t1\","
                           "\"name\":\"weather\""),
          "template view: %s", view);
    free(view);
    srv_request_free(&r);

    static const char *const choices[][2] = {
        {"{\"type\":\"auto\"}", "auto"}, {"{\"type\":\"any\"}", "required"},
        {"{\"type\":\"none\"}", "none"}};
    for (int i = 0; i < 3; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
                 "\"tool_choice\":%s}", choices[i][0]);
        REQUIRE(parse(ANTHROPIC, body, &r, &why) == 0, "%s: %s", body, why.message);
        enum srv_tool_choice want[] = {SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NONE};
        CHECK(r.tool_choice == want[i] && r.parallel_tool_calls, "tool_choice %s", choices[i][1]);
        srv_request_free(&r);
    }
}

static void test_openai_details(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,3],\"echo\":true}", &r, &why) == 0,
            "%s", why.message);
    CHECK(r.n_prompt_toks == 3 && r.prompt_toks[2] == 3 && r.echo && !strcmp(r.model, "m"),
          "token ids, echo, model");
    srv_request_free(&r);
    REQUIRE(parse(OPENAI_COMPLETION, "{\"prompt\":[[7,8]]}", &r, &why) == 0, "%s", why.message);
    CHECK(r.n_prompt_toks == 2 && r.prompt_toks[0] == 7, "an array of one array of ids");
    srv_request_free(&r);
    REQUIRE(parse(OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true}}", &r, &why) == 0, "%s", why.message);
    CHECK(r.include_usage, "include_usage");
    srv_request_free(&r);
}

static void test_embeddings(void)
{
    srv_request r;
    srv_refusal why;
    REQUIRE(parse(OPENAI_EMBED, "{\"model\":\"m\",\"input\":[\"a\",[3,4],\"b\",[5]],"
                  "\"encoding_format\":\"base64\",\"dimensions\":64}", &r, &why) == 0, "%s", why.message);
    CHECK(r.kind == SRV_EMBED && r.n_inputs == 4 && r.base64 && r.dimensions == 64 && !r.truncate,
          "fields");
    if (r.n_inputs == 4)
        CHECK(!strcmp(r.inputs[0].text, "a") && r.inputs[1].n_toks == 2 && r.inputs[1].toks[1] == 4 &&
                  !strcmp(r.inputs[2].text, "b") && r.inputs[3].n_toks == 1 && r.inputs[3].toks[0] == 5,
              "inputs");
    srv_request_free(&r);
    REQUIRE(parse(OPENAI_EMBED, "{\"input\":[1,2,3]}", &r, &why) == 0, "%s", why.message);
    CHECK(r.n_inputs == 1 && r.inputs[0].n_toks == 3 && !r.inputs[0].text, "one input of ids");
    srv_request_free(&r);
    REQUIRE(parse(OLLAMA_EMBED, "{\"model\":\"m\",\"input\":\"x\",\"keep_alive\":0}", &r, &why) == 0,
            "%s", why.message);
    CHECK(r.api == SRV_API_OLLAMA && r.n_inputs == 1 && r.truncate, "ollama: truncate by default");
    srv_request_free(&r);
}

/* The body is refused, naming param (NULL: the whole body) with a message containing words. */
static void refused(enum api a, const char *body, const char *param, const char *words)
{
    srv_request r;
    srv_refusal why;
    int rc = parse(a, body, &r, &why);
    CHECK(rc == -1, "accepted: %s", body);
    if (rc) {
        CHECK(param ? why.param && !strcmp(why.param, param) : !why.param,
              "%s: param %s, want %s", body, why.param ? why.param : "(none)",
              param ? param : "(none)");
        CHECK(strstr(why.message, words), "%s: message '%s' lacks '%s'", body, why.message, words);
    } else {
        srv_request_free(&r);
    }
}

static void test_refusals(void)
{
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    static const struct {
        enum api a;
        const char *body, *param, *words;
    } cases[] = {
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[", NULL, "malformed JSON"},
        {OLLAMA_CHAT, "[]", NULL, "JSON object"},
        {OLLAMA_CHAT, "{" MSGS "}", "model", "model is required"},
        {OLLAMA_CHAT, "{\"model\":5," MSGS "}", "model", "string"},
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages", "array"},
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", "messages", "role"},
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":1}]}", "messages", "string"},
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"images\":[\"aGk=\"]}]}", "messages", "text only"},
        {OLLAMA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages", "assistant"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"stream\":\"no\"}", "stream", "true or false"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":[]}", "options", "object"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"temperature\":\"hot\"}}", "temperature", "number"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"num_predict\":0}}", "num_predict", "at least 1"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"num_predict\":-3}}", "num_predict", "[-2,"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"num_ctx\":0}}", "num_ctx", "[1,"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"stop\":\"x\"}}", "stop", "array"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"options\":{\"top_k\":1.5}}", "top_k", "integer"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"format\":\"xml\"}", "format", "json"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"keep_alive\":[]}", "keep_alive", "duration"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"think\":1}", "think", "true, false"},
        {OLLAMA_CHAT, "{\"model\":\"m\"," MSGS ",\"tools\":[{\"type\":\"function\"}]}", "tools", "tool 0"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":5}", "prompt", "string"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"system\":[]}", "system", "string"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"raw\":\"yes\"}", "raw", "true or false"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"template\":\"{{ .Prompt }}\"}", "template", "chat template"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"suffix\":\"s\"}", "suffix", "not supported"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"context\":[1,2]}", "context", "/api/chat"},
        {OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"p\",\"images\":[\"x\"]}", "images", "text only"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,", NULL, "malformed JSON"},
        {ANTHROPIC, "{\"max_tokens\":5," MSGS "}", "model", "Field required"},
        {ANTHROPIC, "{\"model\":\"m\"," MSGS "}", "max_tokens", "Field required"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":0," MSGS "}", "max_tokens", "[1,"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5}", "messages", "Field required"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages", "non-empty"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages", "user or assistant"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", "messages", "content"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages", "content blocks"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", "messages", "not supported"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}", "messages", "not supported"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":3}]}]}", "messages", "object 'input'"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}", "messages", "tool_use_id"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages", "'text'"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"system\":5," MSGS "}", "system", "system"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"temperature\":1.5}", "temperature", "[0, 1]"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"stop_sequences\":\"x\"}", "stop_sequences", "array"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"tools\":[{\"name\":\"f\"}]}", "tools", "input_schema"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}", "tools", "server tools"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"some\"}}", "tool_choice", "auto, any"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\"}}", "tool_choice", "needs 'name'"},
        {ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5," MSGS ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", "tool_choice", "not in"},
        {OPENAI_COMPLETION, "{\"prompt\":[\"a\",[1]]}", "prompt", "strings only"},
        {OPENAI_COMPLETION, "{\"prompt\":[1,-2]}", "prompt", "token id"},
        {OPENAI_COMPLETION, "{\"prompt\":[1,2.5]}", "prompt", "token id"},
        {OPENAI_COMPLETION, "{\"prompt\":[]}", "prompt", "string"},
        {OPENAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", "echo", "true or false"},
        {OPENAI_CHAT, "{" MSGS ",\"stream_options\":{\"include_usage\":1}}", "include_usage", "true or false"},
        {OPENAI_EMBED, "{}", "input", "required"},
        {OPENAI_EMBED, "{\"input\":5}", "input", "string or a non-empty array"},
        {OPENAI_EMBED, "{\"input\":[]}", "input", "non-empty"},
        {OPENAI_EMBED, "{\"input\":\"\"}", "input", "empty string"},
        {OPENAI_EMBED, "{\"input\":[\"a\",7]}", "input", "array of strings"},
        {OPENAI_EMBED, "{\"input\":[[1,-1]]}", "input", "token id"},
        {OPENAI_EMBED, "{\"input\":[1,\"a\"]}", "input", "token id"},
        {OPENAI_EMBED, "{\"input\":[[]]}", "input", "none empty"},
        {OPENAI_EMBED, "{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format", "float or base64"},
        {OPENAI_EMBED, "{\"input\":\"a\",\"dimensions\":0}", "dimensions", "[1,"},
        {OPENAI_EMBED, "{\"input\":\"a\",\"model\":[]}", "model", "string"},
        {OLLAMA_EMBED, "{\"input\":\"a\",\"truncate\":\"yes\"}", "truncate", "true or false"},
    };
#undef MSGS
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused(cases[i].a, cases[i].body, cases[i].param, cases[i].words);
}

int main(void)
{
    sampler_params_default(&defaults);
    test_ollama();
    test_anthropic();
    test_openai_details();
    test_embeddings();
    test_refusals();
    return test_done();
}
