/* request.c — parsing and checking an OpenAI-style request body (request.h), refusing anything
 * of the wrong type or out of range with a message that names the field. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "server/request.h"

static int refuse(srv_refusal *why, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(srv_refusal *why, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->message, sizeof why->message, fmt, ap);
    va_end(ap);
    why->param = param;
    return -1;
}

/* A field that is absent or null is "not given". */
static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The field as a number in [lo, hi]: 1 given, 0 not given, -1 refused. */
static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out,
                      srv_refusal *why)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return refuse(why, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return refuse(why, name, "'%s' must be in [%g, %g], got %g", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

static int get_int(const cJSON *obj, const char *name, double lo, double hi, double *out,
                   srv_refusal *why)
{
    int got = get_number(obj, name, lo, hi, out, why);
    if (got == 1 && *out != floor(*out))
        return refuse(why, name, "'%s' must be an integer, got %g", name, *out);
    return got;
}

static int get_float_into(const cJSON *obj, const char *name, double lo, double hi, float *dst,
                          srv_refusal *why)
{
    double v = 0;
    int got = get_number(obj, name, lo, hi, &v, why);
    if (got == 1)
        *dst = (float)v;
    return got < 0 ? -1 : 0;
}

static int get_bool(const cJSON *obj, const char *name, bool *dst, srv_refusal *why)
{
    const cJSON *v = field(obj, name);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return refuse(why, name, "'%s' must be true or false", name);
    *dst = cJSON_IsTrue(v);
    return 0;
}

static char *keep(srv_request *r, char *text)
{
    if (!text)
        return NULL;
    char **o = realloc(r->owned, sizeof *o * (size_t)(r->n_owned + 1));
    if (!o) {
        free(text);
        return NULL;
    }
    r->owned = o;
    r->owned[r->n_owned++] = text;
    return text;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts joined. */
static const char *content_text(srv_request *r, const cJSON *c, srv_refusal *why)
{
    if (cJSON_IsString(c))
        return c->valuestring;
    if (!cJSON_IsArray(c)) {
        refuse(why, "messages", "a message's 'content' must be a string or an array of text parts");
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            refuse(why, "messages", "only content parts of type 'text' are supported");
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *joined = keep(r, malloc(len + 1));
    if (!joined) {
        refuse(why, NULL, "out of memory");
        return NULL;
    }
    size_t at = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(joined + at, t, strlen(t));
        at += strlen(t);
    }
    joined[at] = '\0';
    return joined;
}

/* An assistant message's tool_calls, for the template: {id, type, function: {name,
 * arguments}} with the arguments (OpenAI's JSON text) as an object where they parse as one, as
 * templates write them with tojson. NULL with why filled in. */
static cJSON *template_calls(const cJSON *calls, int at, srv_refusal *why)
{
    if (!cJSON_IsArray(calls)) {
        refuse(why, "messages", "message %d: 'tool_calls' must be an array", at);
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) ||
            (args && !cJSON_IsString(args) && !cJSON_IsObject(args)) || (id && !cJSON_IsString(id))) {
            cJSON_Delete(out);
            refuse(why, "messages", "message %d: a tool call needs 'function' with a string "
                   "'name' and 'arguments' (a JSON string or an object)", at);
            return NULL;
        }
        cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddItemToArray(out, e);
        if (id)
            cJSON_AddStringToObject(e, "id", id->valuestring);
        cJSON_AddStringToObject(e, "type", "function");
        cJSON_AddItemToObject(e, "function", f);
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        if (parsed && !cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            parsed = NULL;
        }
        cJSON_AddItemToObject(f, "arguments", parsed ? parsed
                              : args ? cJSON_Duplicate(args, true) : cJSON_CreateObject());
    }
    return out;
}

/* The name of the call a tool message answers (templates that print it read "name"). */
static const char *call_name(const cJSON *tmsgs, const char *id)
{
    const cJSON *m, *c;
    cJSON_ArrayForEach(m, tmsgs) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
            if (cid && !strcmp(cid, id))
                return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(c, "function"), "name"));
        }
    }
    return NULL;
}

static int parse_messages(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *msgs = field(root, "messages");
    if (!msgs)
        return refuse(why, "messages", "'messages' is required");
    int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs) || n == 0)
        return refuse(why, "messages", "'messages' must be a non-empty array");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    cJSON *tmsgs = cJSON_CreateArray();
    r->chat_json = tmsgs;
    if (!r->msgs || !tmsgs)
        return refuse(why, NULL, "out of memory");
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool"};
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return refuse(why, "messages", "message %d: expected an object with a string 'role'",
                          r->n_msgs);
        int known = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(role->valuestring, roles[i]))
                known = i;
        if (known < 0)
            return refuse(why, "messages",
                          "message %d: role must be system, user, assistant, developer or tool",
                          r->n_msgs);
        const cJSON *calls = field(m, "tool_calls");
        if (calls && known != 2)
            return refuse(why, "messages", "message %d: only an assistant message has "
                          "'tool_calls'", r->n_msgs);
        /* an assistant message that only calls tools has content null (or none) */
        bool may_lack = calls != NULL;
        if (!content || cJSON_IsNull(content)) {
            if (!may_lack)
                return refuse(why, "messages", "message %d: 'content' is required", r->n_msgs);
            content = NULL;
        }
        const char *text = content ? content_text(r, content, why) : "";
        if (!text)
            return -1;
        /* a developer message is OpenAI's newer name for a system message */
        const char *name = roles[known == 3 ? 0 : known];
        r->msgs[r->n_msgs++] = (chat_msg){name, text};
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToArray(tmsgs, t);
        cJSON_AddStringToObject(t, "role", name);
        cJSON_AddStringToObject(t, "content", text);
        if (calls) {
            cJSON *tc = template_calls(calls, r->n_msgs - 1, why);
            if (!tc)
                return -1;
            cJSON_AddItemToObject(t, "tool_calls", tc);
        }
        if (known == 4) {
            const cJSON *id = field(m, "tool_call_id");
            if (id && !cJSON_IsString(id))
                return refuse(why, "messages", "message %d: 'tool_call_id' must be a string",
                              r->n_msgs - 1);
            const cJSON *nm = field(m, "name");
            const char *fname = cJSON_IsString(nm) ? nm->valuestring
                                : id ? call_name(tmsgs, id->valuestring) : NULL;
            if (id)
                cJSON_AddStringToObject(t, "tool_call_id", id->valuestring);
            if (fname)
                cJSON_AddStringToObject(t, "name", fname);
        }
    }
    return 0;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}]. */
static int parse_tools(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *tools = field(root, "tools");
    r->parallel_tool_calls = true;
    if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, why))
        return -1;
    if (tools) {
        if (!cJSON_IsArray(tools))
            return refuse(why, "tools", "'tools' must be an array");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
                !cJSON_IsObject(fn) || !cJSON_IsString(name) || !*name->valuestring)
                return refuse(why, "tools", "tool %d: expected {\"type\": \"function\", "
                              "\"function\": {\"name\": ...}}", r->n_tools);
            if (strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-.") != strlen(name->valuestring) ||
                strlen(name->valuestring) > 64)
                return refuse(why, "tools", "tool %d: a function name is 1 to 64 of a-z, A-Z, "
                              "0-9, _, - and .", r->n_tools);
            if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
                return refuse(why, "tools", "tool %d: 'parameters' must be a JSON schema object",
                              r->n_tools);
            r->n_tools++;
        }
        if (r->n_tools)
            r->tools = tools;
    }
    const cJSON *tc = field(root, "tool_choice");
    r->tool_choice = SRV_TOOLS_AUTO;
    if (!tc)
        return 0;
    if (cJSON_IsString(tc)) {
        static const char *const names[] = {"auto", "none", "required"};
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(tc->valuestring, names[i]))
                k = i;
        if (k < 0)
            return refuse(why, "tool_choice", "'tool_choice' must be auto, none, required or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = (enum srv_tool_choice)k;
    } else {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(tc, "function"), "name"));
        if (!cJSON_IsObject(tc) || !name)
            return refuse(why, "tool_choice", "'tool_choice' must be auto, none, required or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = SRV_TOOLS_NAMED;
        r->tool_name = name;
        bool found = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, (const cJSON *)r->tools) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
            found |= n && !strcmp(n, name);
        }
        if (!found)
            return refuse(why, "tool_choice", "'tool_choice' names '%.64s', which is not in "
                          "'tools'", name);
    }
    if ((r->tool_choice == SRV_TOOLS_REQUIRED) && !r->tools)
        return refuse(why, "tool_choice", "'tool_choice' required needs 'tools'");
    return 0;
}

/* response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
 * "schema", "strict"}}, or llama.cpp's grammar (GBNF). */
static int parse_output(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *g = field(root, "grammar");
    if (g) {
        if (!cJSON_IsString(g))
            return refuse(why, "grammar", "'grammar' must be a string of GBNF");
        r->out = SRV_OUT_GRAMMAR;
        r->grammar = g->valuestring;
    }
    const cJSON *rf = field(root, "response_format");
    if (!rf)
        return 0;
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rf, "type"));
    if (!cJSON_IsObject(rf) || !type)
        return refuse(why, "response_format", "'response_format' must be an object with a 'type'");
    if (!strcmp(type, "text"))
        return 0;
    if (g)
        return refuse(why, "response_format", "give 'grammar' or 'response_format', not both");
    if (!strcmp(type, "json_object")) {
        r->out = SRV_OUT_JSON;
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return refuse(why, "response_format", "'response_format' type must be text, json_object "
                      "or json_schema");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(js) || (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)))
        return refuse(why, "response_format", "'response_format' json_schema needs "
                      "'json_schema': {\"name\": ..., \"schema\": {...}}");
    if (get_bool(js, "strict", &r->strict, why))
        return refuse(why, "response_format", "'json_schema.strict' must be true or false");
    r->out = schema ? SRV_OUT_SCHEMA : SRV_OUT_JSON;
    r->schema = schema;
    return 0;
}

/* A token id of a prompt given as ids: an integer in [0, 2^31); the generator checks it
 * against the vocabulary. */
static bool token_id(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483648.0 &&
           v->valuedouble == floor(v->valuedouble);
}

/* An array of token ids: its length, or -1 (refused: item `at` of prompt, -1 for prompt
 * itself, names it). */
static int count_ids(const cJSON *a, int at, srv_refusal *why)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!token_id(e))
            return at < 0 ? refuse(why, "prompt", "'prompt' token %d is not a token id (an "
                                   "integer >= 0)", n)
                          : refuse(why, "prompt", "'prompt' item %d: token %d is not a token id "
                                   "(an integer >= 0)", at, n);
        n++;
    }
    return n;
}

static void copy_ids(const cJSON *a, int32_t *to)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
        *to++ = (int32_t)e->valuedouble;
}

/* Several prompts: each a string, or each a non-empty array of ids (OpenAI's schema takes an
 * array of one kind or the other, never a mix), into r->prompts: one block, the srv_inputs
 * then every prompt's ids. */
static int parse_prompts(srv_request *r, const cJSON *p, int n, srv_refusal *why)
{
    bool texts = cJSON_IsString(cJSON_GetArrayItem(p, 0));
    size_t ids = 0;
    int at = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        if (texts && !cJSON_IsString(e))
            return refuse(why, "prompt", "'prompt' item %d is not a string: an array of prompts "
                          "holds strings only, or arrays of token ids only", at);
        if (!texts) {
            int k = cJSON_IsArray(e) ? count_ids(e, at, why) : -2;
            if (k == -1)
                return -1;
            if (k <= 0)
                return refuse(why, "prompt", "'prompt' item %d is not a non-empty array of token "
                              "ids: an array of prompts holds strings only, or arrays of token "
                              "ids only", at);
            ids += (size_t)k;
        }
        at++;
    }
    r->prompts = malloc(sizeof *r->prompts * (size_t)n + sizeof(int32_t) * ids);
    if (!r->prompts)
        return refuse(why, NULL, "out of memory");
    int32_t *tok = (int32_t *)(void *)(r->prompts + n);
    cJSON_ArrayForEach(e, p) {
        srv_input *in = &r->prompts[r->n_prompts++];
        if (texts) {
            *in = (srv_input){.text = e->valuestring};
        } else {
            *in = (srv_input){.toks = tok, .n_toks = cJSON_GetArraySize(e)};
            copy_ids(e, tok);
            tok += in->n_toks;
        }
    }
    r->prompt = "";
    return 0;
}

/* OpenAI's prompt: a string, an array of token ids, or an array of up to SRV_MAX_PROMPTS
 * prompts (strings, or arrays of ids), answered with one choice each. An array of one prompt
 * is that prompt. */
static int parse_prompt(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *p = field(root, "prompt");
    if (!p)
        return refuse(why, "prompt", "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompt = p->valuestring;
        return 0;
    }
    int n = cJSON_GetArraySize(p);
    if (!cJSON_IsArray(p) || n == 0)
        return refuse(why, "prompt", "'prompt' must be a string, an array of token ids, or a "
                      "non-empty array of prompts (strings or arrays of token ids)");
    if (!cJSON_IsNumber(cJSON_GetArrayItem(p, 0))) {
        if (n > SRV_MAX_PROMPTS)
            return refuse(why, "prompt", "'prompt' holds %d prompts: at most %d in one request",
                          n, SRV_MAX_PROMPTS);
        if (n > 1)
            return parse_prompts(r, p, n, why);
        p = cJSON_GetArrayItem(p, 0);
        if (cJSON_IsString(p)) {
            r->prompt = p->valuestring;
            return 0;
        }
        if (!cJSON_IsArray(p) || !cJSON_GetArraySize(p))
            return refuse(why, "prompt", "'prompt' item 0 is not a string or a non-empty array "
                          "of token ids");
    }
    n = count_ids(p, -1, why);
    if (n < 0)
        return -1;
    r->prompt_toks = malloc(sizeof *r->prompt_toks * (size_t)n);
    if (!r->prompt_toks)
        return refuse(why, NULL, "out of memory");
    copy_ids(p, r->prompt_toks);
    r->n_prompt_toks = n;
    r->prompt = "";
    return 0;
}

static int parse_stop(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *s = field(root, "stop");
    if (!s)
        return 0;
    if (cJSON_IsString(s)) {
        if (*s->valuestring)
            r->stop[r->n_stop++] = s->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) > SRV_MAX_STOP)
        return refuse(why, "stop", "'stop' must be a string or an array of up to %d strings",
                      SRV_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        if (!cJSON_IsString(e))
            return refuse(why, "stop", "'stop' must be a string or an array of up to %d strings",
                          SRV_MAX_STOP);
        if (*e->valuestring)
            r->stop[r->n_stop++] = e->valuestring;
    }
    return 0;
}

static int parse_sampling(srv_request *r, const cJSON *root, srv_refusal *why)
{
    sampler_params *sp = &r->sp;
    double v;
    if (get_float_into(root, "temperature", 0, 2, &sp->temp, why) ||
        get_float_into(root, "top_p", 0, 1, &sp->top_p, why) ||
        get_float_into(root, "min_p", 0, 1, &sp->min_p, why) ||
        get_float_into(root, "presence_penalty", -2, 2, &sp->presence_penalty, why) ||
        get_float_into(root, "frequency_penalty", -2, 2, &sp->frequency_penalty, why) ||
        get_float_into(root, "repeat_penalty", 1e-3, 100, &sp->repeat_penalty, why))
        return -1;
    if (field(root, "top_p") && sp->top_p <= 0.0f)
        return refuse(why, "top_p", "'top_p' must be in (0, 1]");
    int got = get_int(root, "top_k", 0, 1 << 30, &v, why);
    if (got < 0)
        return -1;
    if (got)
        sp->top_k = (int)v;
    got = get_int(root, "seed", 0, 9007199254740992.0, &v, why);
    if (got < 0)
        return -1;
    if (got) {
        sp->seed = (uint64_t)v;
        r->seed_given = true;
    }
    return 0;
}

/* logprobs: a boolean with top_logprobs 0..20 (chat), or the number of alternatives 0..5
 * (completions). */
static int parse_logprobs(srv_request *r, const cJSON *root, srv_refusal *why)
{
    double v;
    int got;
    if (r->kind == SRV_COMPLETION) {
        got = get_int(root, "logprobs", 0, 5, &v, why);
        if (got == 1) {
            r->logprobs = true;
            r->top_logprobs = (int)v;
        }
        return got < 0 ? -1 : 0;
    }
    if (get_bool(root, "logprobs", &r->logprobs, why))
        return -1;
    got = get_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &v, why);
    if (got < 0)
        return -1;
    if (got) {
        if (!r->logprobs && v > 0)
            return refuse(why, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)v;
    }
    return 0;
}

static int parse_body(srv_request *r, const cJSON *root, srv_refusal *why)
{
    if (!cJSON_IsObject(root))
        return refuse(why, NULL, "the request body must be a JSON object");
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model))
        return refuse(why, "model", "'model' must be a string");
    r->model = model ? model->valuestring : NULL;
    if (r->kind == SRV_CHAT ? parse_messages(r, root, why) : parse_prompt(r, root, why))
        return -1;
    double v;
    int got = get_int(root, "n", 1, 1, &v, why);
    if (got < 0)
        return refuse(why, "n", "'n' must be 1 (one choice per prompt)");
    static const char *const limits[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        got = get_int(root, limits[i], 1, 1 << 30, &v, why);
        if (got < 0)
            return -1;
        if (got)
            r->max_tokens = (int)v;
    }
    if (get_bool(root, "stream", &r->stream, why))
        return -1;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so))
        return refuse(why, "stream_options", "'stream_options' must be an object");
    if (so && get_bool(so, "include_usage", &r->include_usage, why))
        return -1;
    if (r->kind == SRV_COMPLETION && get_bool(root, "echo", &r->echo, why))
        return -1;
    if (r->kind == SRV_CHAT && parse_tools(r, root, why))
        return -1;
    return parse_stop(r, root, why) || parse_sampling(r, root, why) ||
                   parse_logprobs(r, root, why) || parse_output(r, root, why)
               ? -1
               : 0;
}

/* The body is UTF-8 with no NUL, raw or as \u0000 in a string: cJSON's strings are C strings,
 * which would cut a prompt at its NUL without a word, and a prompt of invalid UTF-8 would reach
 * the tokenizer as bytes no client meant. */
static int check_text(const char *body, size_t len, srv_refusal *why)
{
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        unsigned char ch = (unsigned char)body[i];
        if (!ch)
            return refuse(why, NULL, "the body holds a NUL byte (at byte %zu)", i);
        size_t k = srv_utf8_seq((const unsigned char *)body + i, len - i);
        if (!k)
            return refuse(why, NULL, "the body is not valid UTF-8 (at byte %zu)", i);
        if (ch == '"') {
            in_string = !in_string;
        } else if (ch == '\\' && in_string && i + 1 < len) {
            if (len - i >= 6 && !memcmp(body + i + 1, "u0000", 5))
                return refuse(why, NULL, "a string holds \\u0000 (at byte %zu): NUL characters "
                              "are not accepted", i);
            /* an escape's second character is ASCII in JSON; anything else cJSON refuses */
            if ((unsigned char)body[i + 1] < 0x80)
                k = 2;
        }
        i += k;
    }
    return 0;
}

cJSON *srv_request_json(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                        const sampler_params *defaults, srv_refusal *why)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->sp = *defaults;
    if (check_text(body, len, why))
        return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        refuse(why, NULL, "malformed JSON at byte %zu of the body", at);
        return NULL;
    }
    r->json = root;
    while (end && end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end != body + len) {
        srv_request_free(r);
        refuse(why, NULL, "malformed JSON: data after the value at byte %zu",
               (size_t)(end - body));
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        srv_request_free(r);
        refuse(why, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

int srv_request_parse(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                      const sampler_params *defaults, srv_refusal *why)
{
    cJSON *root = srv_request_json(r, kind, body, len, defaults, why);
    if (!root)
        return -1;
    int rc = parse_body(r, root, why);
    if (rc)
        srv_request_free(r);
    return rc;
}

void srv_request_free(srv_request *r)
{
    cJSON_Delete(r->json);
    cJSON_Delete(r->chat_json);
    cJSON_Delete(r->api_json);
    free(r->msgs);
    free(r->prompt_toks);
    free(r->prompts);
    free(r->inputs);
    for (int i = 0; i < r->n_owned; i++)
        free(r->owned[i]);
    free(r->owned);
    memset(r, 0, sizeof *r);
}

/* ---- the helpers the other APIs' parsers share (internal.h) ---- */

int srv_refuse(srv_refusal *why, const char *param, const char *message)
{
    return refuse(why, param, "%s", message);
}

const cJSON *srv_field(const cJSON *obj, const char *name)
{
    return field(obj, name);
}

int srv_get_int(const cJSON *obj, const char *name, double lo, double hi, double *out,
                srv_refusal *why)
{
    return get_int(obj, name, lo, hi, out, why);
}

int srv_get_float(const cJSON *obj, const char *name, double lo, double hi, float *dst,
                  srv_refusal *why)
{
    return get_float_into(obj, name, lo, hi, dst, why);
}

int srv_get_bool(const cJSON *obj, const char *name, bool *dst, srv_refusal *why)
{
    return get_bool(obj, name, dst, why);
}

char *srv_keep(srv_request *r, char *text)
{
    return keep(r, text);
}

int srv_parse_stop(srv_request *r, const cJSON *obj, const char *name, srv_refusal *why)
{
    const cJSON *s = field(obj, name);
    if (!s)
        return 0;
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) > SRV_MAX_STOP)
        return refuse(why, name, "'%s' must be an array of up to %d strings", name,
                      SRV_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        if (!cJSON_IsString(e))
            return refuse(why, name, "'%s' must be an array of up to %d strings", name,
                          SRV_MAX_STOP);
        if (*e->valuestring)
            r->stop[r->n_stop++] = e->valuestring;
    }
    return 0;
}

int srv_parse_seed(srv_request *r, const cJSON *obj, srv_refusal *why)
{
    double v = 0;
    int got = get_int(obj, "seed", -9007199254740992.0, 9007199254740992.0, &v, why);
    if (got == 1 && v >= 0) {   /* Ollama's clients send -1 for "any seed" */
        r->sp.seed = (uint64_t)v;
        r->seed_given = true;
    }
    return got < 0 ? -1 : 0;
}

int srv_parse_tools(srv_request *r, const cJSON *obj, srv_refusal *why)
{
    return parse_tools(r, obj, why);
}

cJSON *srv_template_calls(const cJSON *calls, int at, srv_refusal *why)
{
    return template_calls(calls, at, why);
}

const char *srv_call_name(const cJSON *tmsgs, const char *id)
{
    return call_name(tmsgs, id);
}
