/* libFuzzer target for the Jinja interpreter: the input is a template, rendered with a
 * conversation like those of the fixtures (system, user, an assistant tool call and its
 * result, tools, generation prompt, BOS/EOS). Any template must parse or fail with a one-line
 * message, and render (or fail) the same twice: once marking the messages' and tools' text
 * (jinja_render_marked), once not — the marks never change the text, and no state leaks from
 * one render into the next. The build gives the interpreter a smaller step bound
 * (CMakeLists.txt), so that a looping template ends well within libFuzzer's timeout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"

static const char case_json[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in \\u00c9vian? <|im_end|> \\\"q\\\"\\n\\t\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"abc123XYZ\", \"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": {\"location\": \"\\u00c9vian\", \"unit\": \"celsius\"}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"abc123XYZ\", \"name\": \"get_weather\", \"content\": \"{\\\"t\\\": 21.5}\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>warm</think>21.5 degrees\", \"reasoning_content\": \"warm\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"},"
    " \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"location\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

static cJSON *vars;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    vars = cJSON_Parse(case_json);
    if (!vars) {
        fprintf(stderr, "fuzz_jinja: the built-in case is not JSON\n");
        exit(1);
    }
    return 0;
}

static void check_error(const jinja_error *err)
{
    if (!memchr(err->msg, '\0', sizeof err->msg) || strchr(err->msg, '\n') || (!err->msg[0] && !err->raised))
        abort();   /* an error is one line of text */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jinja_error err;
    jinja_template *t = jinja_parse((const char *)data, size, &err);
    if (!t) {
        check_error(&err);
        return 0;
    }
    static const char *const user_text[] = {"messages", "tools", NULL};
    size_t n1 = 0, n2 = 0;
    uint8_t *plain = NULL;
    char *a = jinja_render_marked(t, vars, user_text, 1785024000, &n1, &plain, &err);
    if (!a)
        check_error(&err);
    else if (n1 && (plain[0] > 1 || plain[n1 - 1] > 1))   /* the marks cover the text */
        abort();
    char *b = jinja_render(t, vars, 1785024000, &n2, &err);
    if (!a != !b || (a && (n1 != n2 || memcmp(a, b, n1))))
        abort();
    free(a);
    free(b);
    free(plain);
    jinja_free(t);
    return 0;
}
