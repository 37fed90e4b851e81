/* prima template — render a conversation with a chat template, as the model would see it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "gguf/gguf.h"
#include "text/chat_format.h"

static const char usage_head[] =
    "usage: prima template (-m FILE | --chat-template FILE) --input CASE.json [--now TIME]\n"
    "\n"
    "Render a conversation with a chat template and print the text, byte for byte, as the\n"
    "model reads it (Hugging Face's apply_chat_template: Jinja with trim_blocks and\n"
    "lstrip_blocks).\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 on success; 1 if a file cannot be read, the template does not parse, or\n"
    "it raises an error (its message on stderr); 2 on a usage error.\n";

static bool parse_time(const char *s, time_t *out)
{
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || *end) {
        tm = (struct tm){0};
        end = strptime(s, "%Y-%m-%d", &tm);
    }
    if (!end || *end)
        return false;
    tm.tm_isdst = -1;
    *out = mktime(&tm);
    return *out != (time_t)-1;
}

static int render(const char *model_path, const char *tpl_file, const char *input, time_t now)
{
    char err[600];
    size_t tlen = 0, ilen = 0;
    char *src = NULL, *case_text = cli_read_file(input, &ilen);
    if (!case_text || (tpl_file && !(src = cli_read_file(tpl_file, &tlen)))) {
        free(case_text);
        return 1;
    }
    cJSON *vars = cJSON_ParseWithLength(case_text, ilen);
    free(case_text);
    gguf_file *f = NULL;
    tokenizer *tk = NULL;
    chat_format *cf = NULL;
    int rc = 0;
    if (!cJSON_IsObject(vars))
        rc = cli_fail("template: %s: not a JSON object", input);
    else if (model_path && (!(f = gguf_open(model_path, err, sizeof err)) || !(tk = tokenizer_load(f, err, sizeof err))))
        rc = cli_fail("%s", err);
    else if (!(cf = chat_format_load(f, tk, src, tlen, err, sizeof err)))
        rc = cli_fail("%s%s%s", tpl_file ? tpl_file : "", tpl_file ? ": " : "", err);
    if (!rc) {
        jinja_error je;
        size_t len = 0;
        char *text = chat_format_apply(cf, vars, now, &len, &je);
        if (!text && je.raised)
            rc = cli_fail("template: the template raised an error (line %d): %s", je.line, je.msg);
        else if (!text)
            rc = cli_fail("template: %s", je.msg);
        else if (fwrite(text, 1, len, stdout) != len || fflush(stdout))
            rc = cli_fail("template: cannot write the output");
        free(text);
    }
    chat_format_free(cf);
    tokenizer_free(tk);
    gguf_close(f);
    cJSON_Delete(vars);
    free(src);
    return rc;
}

typedef struct tpl_args {
    const char *model, *tpl, *input, *now;
} tpl_args;

#define F(field) offsetof(tpl_args, field)
static const cli_opt tpl_rows[] = {
    {"-m --model", "FILE", CLI_STR, F(model),
     .help = "a GGUF file: its tokenizer.chat_template, and its BOS and EOS\n"
             "tokens (a file without a template gets prima's built-in format)"},
    {"--chat-template", "FILE", CLI_STR, F(tpl),
     .help = "the Jinja template in FILE (with -m: in place of the model's)"},
    {"--input", "CASE.json", CLI_STR, F(input),
     .help = "the template's variables, a JSON object: messages, tools,\n"
             "add_generation_prompt, bos_token, eos_token and any other\n"
             "(enable_thinking, ...); with -m, bos_token and eos_token come\n"
             "from the model where the object has none"},
    {"--now", "TIME", CLI_STR, F(now),
     .help = "the time strftime_now() formats: YYYY-MM-DD or\n"
             "YYYY-MM-DDTHH:MM:SS, local time (default: now)"},
    {0},
};
#undef F
static const cli_group tpl_group = {NULL, tpl_rows, NULL};

static int run(int argc, char **argv)
{
    tpl_args ta = {0};
    const cli_set set = {.g = &tpl_group, .dst = &ta};
    int rc = cli_opts_parse("template", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *tpl = ta.tpl, *input = ta.input, *now_s = ta.now;
    if (!ta.model && !tpl)
        return cli_usage_error("template", "%s", "no template (-m FILE or --chat-template FILE)");
    if (!input)
        return cli_usage_error("template", "%s", "no conversation (--input CASE.json)");
    time_t now = time(NULL);
    if (now_s && !parse_time(now_s, &now))
        return cli_usage_error("template", "--now: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, got '%s'", now_s);
    return render(ta.model, tpl, input, now);
}

const struct cli_command cli_cmd_template = {"template", "render a conversation with a chat template", run};
