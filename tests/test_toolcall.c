/* Tool calls (text/toolcall.h): the format recognised from the fixtures' published templates
 * and from model names; replies of every format parsed into content, reasoning and calls;
 * the same replies streamed, cut at every byte boundary and fed byte by byte, giving deltas
 * that add up to the whole; the grammar of a required call, which matches the calls the parser
 * reads and refuses other text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/grammar.h"
#include "text/toolcall.h"
#include "util/strbuf.h"

typedef struct want {
    enum tool_format f;
    bool think;
    const char *text;
    const char *content, *reasoning;
    const char *calls[3][2];   /* name, arguments (compact JSON) */
} want;

#define DS_BEGIN "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
static const want replies[] = {
    {TOOL_HERMES, false, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t2\", \"arguments\": {}}\n</tool_call>",
     "Let me check.", "", {{"get_weather", "{\"location\":\"Paris\"}"}, {"t2", "{}"}}},
    {TOOL_HERMES, true, "I should call it.\n</think>\n\n<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":[1,\"}\"]}}</tool_call>",
     "", "I should call it.", {{"f", "{\"a\":[1,\"}\"]}"}}},
    {TOOL_HERMES, false, "<think>hmm</think>Just text, <tool_call> not JSON", "Just text, <tool_call> not JSON", "hmm", {{0}}},
    {TOOL_HERMES, false, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1", "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1", "", {{0}}},
    {TOOL_LLAMA3, false, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"cats\"}}",
     "", "", {{"search", "{\"q\":\"cats\"}"}}},
    {TOOL_LLAMA3, false, " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": true}}",
     "", "", {{"a", "{}"}, {"b", "{\"k\":true}"}}},
    {TOOL_LLAMA3, false, "{not a call} but text", "{not a call} but text", "", {{0}}},
    {TOOL_MISTRAL, false, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, "
     "{\"name\": \"neg\", \"arguments\": \"{\\\"x\\\": 3}\"}]", "", "", {{"add", "{\"a\":1,\"b\":2}"}, {"neg", "{\"x\":3}"}}},
    {TOOL_MISTRAL, false, "Sure.[TOOL_CALLS]get_time[ARGS]{\"tz\": \"UTC\"}", "Sure.", "", {{"get_time", "{\"tz\":\"UTC\"}"}}},
    {TOOL_GPTOSS, false, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>",
     "", "Need the weather.", {{"get_weather", "{\"city\":\"Oslo\"}"}}},
    {TOOL_GPTOSS, false, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi there!",
     "Hi there!", "Easy.", {{0}}},
    {TOOL_GPTOSS, false, "plain words", "plain words", "", {{0}}},
    {TOOL_DEEPSEEK, true, "Think.</think>" DS_BEGIN "function<｜tool▁sep｜>lookup\n```json\n{\"id\": 7}\n```"
     "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>other\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "", "Think.", {{"lookup", "{\"id\":7}"}, {"other", "{}"}}},
    {TOOL_DEEPSEEK, false, "Ok " DS_BEGIN "lookup<｜tool▁sep｜>{\"id\": 8}<｜tool▁call▁end｜><｜tool▁calls▁end｜> done",
     "Ok  done", "", {{"lookup", "{\"id\":8}"}}},
};

static int n_calls(const want *w)
{
    int n = 0;
    while (n < 3 && w->calls[n][0])
        n++;
    return n;
}

static void check_reply(const want *w, const char *how, const char *content, size_t clen,
                        const char *reasoning, size_t rlen, const tool_call *calls, int nc)
{
    CHECK(clen == strlen(w->content) && !memcmp(content, w->content, clen),
          "%s %s content '%.*s', want '%s' (of '%s')", tool_format_name(w->f), how, (int)clen,
          content, w->content, w->text);
    CHECK(rlen == strlen(w->reasoning) && !memcmp(reasoning, w->reasoning, rlen),
          "%s %s reasoning '%.*s', want '%s'", tool_format_name(w->f), how, (int)rlen, reasoning,
          w->reasoning);
    CHECK(nc == n_calls(w), "%s %s: %d calls, want %d (of '%s')", tool_format_name(w->f), how, nc,
          n_calls(w), w->text);
    for (int i = 0; i < nc && i < n_calls(w); i++)
        CHECK(!strcmp(calls[i].name, w->calls[i][0]) && !strcmp(calls[i].arguments, w->calls[i][1]),
              "%s %s call %d: %s %s, want %s %s", tool_format_name(w->f), how, i, calls[i].name,
              calls[i].arguments, w->calls[i][0], w->calls[i][1]);
}

/* Feeds text in pieces cut at cuts[] (ascending, ncut of them), the deltas gathered. */
static void streamed(const want *w, const size_t *cuts, int ncut, const char *how)
{
    tool_parser *p = tool_parser_new(w->f, w->think);
    strbuf content = {0}, reasoning = {0};
    tool_call calls[8];
    int nc = 0;
    size_t at = 0, n = strlen(w->text);
    for (int i = 0; i <= ncut; i++) {
        size_t to = i < ncut ? cuts[i] : n;
        tool_delta d;
        REQUIRE(!(i == ncut + 1 ? tool_parser_finish(p, &d) : tool_parser_feed(p, w->text + at, to - at, &d)),
                "out of memory");
        for (int pass = 0; pass < 2; pass++) {
            strbuf_add(&content, d.content ? d.content : "", d.content_len);
            strbuf_add(&reasoning, d.reasoning ? d.reasoning : "", d.reasoning_len);
            for (int k = d.first_call; k < d.n_calls && nc < 8; k++)
                calls[nc++] = (tool_call){strdup(d.calls[k].name), strdup(d.calls[k].arguments)};
            if (pass == 0 && i == ncut)
                REQUIRE(!tool_parser_finish(p, &d), "out of memory");
            else
                break;
        }
        at = to;
    }
    check_reply(w, how, content.p ? content.p : "", content.len, reasoning.p ? reasoning.p : "",
                reasoning.len, calls, nc);
    for (int i = 0; i < nc; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(content.p);
    free(reasoning.p);
    tool_parser_free(p);
}

static void parsing(void)
{
    for (size_t i = 0; i < sizeof replies / sizeof replies[0]; i++) {
        const want *w = &replies[i];
        tool_reply r;
        REQUIRE(!tool_parse(w->f, w->think, w->text, strlen(w->text), &r), "out of memory");
        check_reply(w, "whole", r.content, r.content_len, r.reasoning, r.reasoning_len, r.calls,
                    r.n_calls);
        tool_reply_free(&r);
        size_t n = strlen(w->text);
        for (size_t cut = 0; cut <= n; cut++) {
            char how[32];
            snprintf(how, sizeof how, "cut at %zu", cut);
            streamed(w, &cut, 1, how);
        }
        size_t *every = malloc(sizeof *every * (n + 1));
        for (size_t k = 0; k < n; k++)
            every[k] = k + 1;
        streamed(w, every, (int)n, "byte by byte");
        free(every);
    }
}

static bool matches(const grammar *g, const char *s)
{
    grammar_state *st = grammar_state_new(g);
    bool ok = grammar_state_accept(st, s, strlen(s)) && grammar_state_complete(st);
    grammar_state_free(st);
    return ok;
}

static void grammars(void)
{
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]");
    static const struct { enum tool_format f; const char *yes, *no; } cases[] = {
        {TOOL_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"unit\":\"c\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\":\"c\"}}\n</tool_call>"},
        {TOOL_LLAMA3, "{\"name\": \"ping\", \"parameters\": {}}", "{\"name\": \"pong\", \"parameters\": {}}"},
        {TOOL_MISTRAL, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\":\"\"}}]",
         "[TOOL_CALLS][]"},
        {TOOL_GPTOSS, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"x\"}<|call|>",
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":1}<|call|>"},
        {TOOL_DEEPSEEK, DS_BEGIN "function<｜tool▁sep｜>ping\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         DS_BEGIN "function<｜tool▁sep｜>ping\n```json\n{\"a\":1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        char *src = tool_call_grammar(cases[i].f, tools, NULL, true, err, sizeof err);
        REQUIRE(src, "%s: %s", tool_format_name(cases[i].f), err);
        grammar *g = grammar_parse(src, strlen(src), err, sizeof err);
        REQUIRE(g, "%s: %s\n%s", tool_format_name(cases[i].f), err, src);
        CHECK(matches(g, cases[i].yes), "%s grammar refuses %s", tool_format_name(cases[i].f), cases[i].yes);
        CHECK(!matches(g, cases[i].no), "%s grammar allows %s", tool_format_name(cases[i].f), cases[i].no);
        CHECK(!matches(g, "Sure, here is the weather."), "%s grammar allows text", tool_format_name(cases[i].f));
        tool_reply r;
        REQUIRE(!tool_parse(cases[i].f, false, cases[i].yes, strlen(cases[i].yes), &r), "oom");
        CHECK(r.n_calls >= 1 && !r.content_len, "%s: the grammar's call parses as %d calls, content '%s'",
              tool_format_name(cases[i].f), r.n_calls, r.content);
        tool_reply_free(&r);
        grammar_free(g);
        free(src);
        /* one named function only */
        src = tool_call_grammar(cases[i].f, tools, "ping", false, err, sizeof err);
        g = src ? grammar_parse(src, strlen(src), err, sizeof err) : NULL;
        REQUIRE(g, "%s", err);
        CHECK(!matches(g, cases[i].yes) || strstr(cases[i].yes, "ping"), "%s: named call allows another",
              tool_format_name(cases[i].f));
        grammar_free(g);
        free(src);
    }
    char err[256];
    CHECK(!tool_call_grammar(TOOL_HERMES, tools, "nope", false, err, sizeof err) &&
          strstr(err, "no tool named 'nope'"), "an unknown function: %s", err);
    cJSON_Delete(tools);
}

static void detection(void)
{
    CHECK(tool_format_detect(NULL, 0, "qwen3", "Qwen3 0.6B") == TOOL_HERMES, "qwen3");
    CHECK(tool_format_detect(NULL, 0, "llama", "Meta Llama 3.1 8B Instruct") == TOOL_LLAMA3, "llama 3");
    CHECK(tool_format_detect(NULL, 0, "llama", "Mistral 7B Instruct") == TOOL_MISTRAL, "mistral");
    CHECK(tool_format_detect(NULL, 0, "gpt-oss", NULL) == TOOL_GPTOSS, "gpt-oss");
    CHECK(tool_format_detect(NULL, 0, "qwen2", "DeepSeek R1 Distill Qwen 7B") == TOOL_DEEPSEEK, "deepseek name");
    static const struct { const char *file; enum tool_format f; } tpl[] = {
        {"Qwen-Qwen2.5-7B-Instruct", TOOL_HERMES}, {"Qwen-Qwen3-0.6B", TOOL_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", TOOL_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct", TOOL_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407", TOOL_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506", TOOL_MISTRAL},
        {"openai-gpt-oss-120b", TOOL_GPTOSS},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", TOOL_DEEPSEEK},
        {"deepseek-ai-DeepSeek-V3.1", TOOL_DEEPSEEK},
    };
    const char *dir = test_fixtures();
    for (size_t i = 0; i < sizeof tpl / sizeof tpl[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/templates/%s.jinja", dir, tpl[i].file);
        FILE *f = fopen(path, "rb");
        REQUIRE(f, "cannot open %s", path);
        static char src[1 << 20];
        size_t n = fread(src, 1, sizeof src, f);
        fclose(f);
        CHECK(tool_format_detect(src, n, NULL, NULL) == tpl[i].f, "%s: %s", tpl[i].file,
              tool_format_name(tool_format_detect(src, n, NULL, NULL)));
    }
}

/* text[0..n) parsed whole: content of clen bytes and ncalls calls, the first named name; streamed
 * in two pieces cut anywhere, the same. */
static void odd_reply(enum tool_format f, const char *text, size_t n, size_t clen, int ncalls,
                      const char *name)
{
    tool_reply w;
    REQUIRE(!tool_parse(f, false, text, n, &w), "out of memory");
    CHECK(w.content_len == clen && w.n_calls == ncalls && (!ncalls || !strcmp(w.calls[0].name, name)),
          "%s reply of %zu bytes: %zu bytes of content, %d calls (%s), want %zu, %d (%s)",
          tool_format_name(f), n, w.content_len, w.n_calls, w.n_calls ? w.calls[0].name : "-", clen,
          ncalls, name ? name : "-");
    for (size_t cut = 0; cut <= n; cut++) {
        tool_parser *p = tool_parser_new(f, false);
        strbuf content = {0};
        int calls = 0;
        for (int step = 0; step < 3; step++) {
            tool_delta d;
            REQUIRE(!(step == 0   ? tool_parser_feed(p, text, cut, &d)
                      : step == 1 ? tool_parser_feed(p, text + cut, n - cut, &d)
                                  : tool_parser_finish(p, &d)),
                    "out of memory");
            strbuf_add(&content, d.content ? d.content : "", d.content_len);
            calls = d.n_calls > calls ? d.n_calls : calls;
        }
        CHECK(content.len == w.content_len && !memcmp(content.p ? content.p : "", w.content, content.len) &&
                  calls == w.n_calls,
              "%s reply of %zu bytes cut at %zu: streamed %zu bytes of content, %d calls; whole %zu, %d",
              tool_format_name(f), n, cut, content.len, calls, w.content_len, w.n_calls);
        free(content.p);
        tool_parser_free(p);
    }
    tool_reply_free(&w);
}

/* Replies holding NUL bytes (content like any other byte, never space) and names no function
 * has: whole and streamed agree, and a name with a NUL, a space or over 64 bytes is no call. */
static void odd_replies(void)
{
    static const char nul[] = "\0 [TOOL_CALLS]\0\0[{\"name\": \"h\"}]\0";
    odd_reply(TOOL_MISTRAL, nul, sizeof nul - 1, sizeof nul - 1, 0, NULL);
    static const char nul_name[] = "[TOOL_CALLS]a\0b[ARGS]{}";
    odd_reply(TOOL_MISTRAL, nul_name, sizeof nul_name - 1, sizeof nul_name - 1, 0, NULL);
    static const char space_name[] = "[TOOL_CALLS]get time[ARGS]{}";
    odd_reply(TOOL_MISTRAL, space_name, sizeof space_name - 1, sizeof space_name - 1, 0, NULL);
    odd_reply(TOOL_MISTRAL, "[TOOL_CALLS] get_time[ARGS]{}", 29, 0, 1, "get_time");
    char longest[128] = "[TOOL_CALLS]", name[65] = {0};
    memset(name, 'n', 64);
    strcat(strcat(longest, name), "[ARGS]{}");
    odd_reply(TOOL_MISTRAL, longest, strlen(longest), 0, 1, name);
    char over[128] = "[TOOL_CALLS]";
    memset(over + 12, 'n', 65);
    strcpy(over + 77, "[ARGS]{}");
    odd_reply(TOOL_MISTRAL, over, strlen(over), strlen(over), 0, NULL);
    static const char hermes[] = "\0<tool_call>\0{\"name\": \"f\", \"arguments\": {}}</tool_call>\0";
    odd_reply(TOOL_HERMES, hermes, sizeof hermes - 1, sizeof hermes - 1, 0, NULL);
}

int main(void)
{
    parsing();
    odd_replies();
    grammars();
    detection();
    return test_done();
}
