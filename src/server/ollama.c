/* ollama.c — Ollama's API: /api/chat and /api/generate requests, their answers and NDJSON
 * streams (a JSON object per line, the last with "done": true and the timings in nanoseconds),
 * the model views (/api/tags, /api/ps, /api/show) and its error object {"error": "..."}.
 * Sampling, limits and stop strings land in the same srv_request fields as OpenAI's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"

/* ---- requests --------------------------------------------------------------------------- */

/* "options": the sampling parameters and limits Ollama's clients send; the others (mirostat,
 * num_thread, num_gpu, ...) concern Ollama's own runner and are ignored. */
static int parse_options(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *o = srv_field(root, "options");
    if (!o)
        return 0;
    if (!cJSON_IsObject(o))
        return srv_refuse(why, "options", "'options' must be an object");
    sampler_params *sp = &r->sp;
    double v;
    if (srv_get_float(o, "temperature", 0, 2, &sp->temp, why) ||
        srv_get_float(o, "top_p", 0, 1, &sp->top_p, why) ||
        srv_get_float(o, "min_p", 0, 1, &sp->min_p, why) ||
        srv_get_float(o, "presence_penalty", -2, 2, &sp->presence_penalty, why) ||
        srv_get_float(o, "frequency_penalty", -2, 2, &sp->frequency_penalty, why) ||
        srv_get_float(o, "repeat_penalty", 1e-3, 100, &sp->repeat_penalty, why) ||
        srv_parse_seed(r, o, why) || srv_parse_stop(r, o, "stop", why))
        return -1;
    if (srv_field(o, "top_p") && sp->top_p <= 0.0f)
        return srv_refuse(why, "top_p", "'top_p' must be in (0, 1]");
    int got = srv_get_int(o, "top_k", 0, 1 << 30, &v, why);
    if (got < 0)
        return -1;
    if (got)
        sp->top_k = (int)v;
    /* -1: no limit, -2: until the context is full (the same here: a full context ends it) */
    got = srv_get_int(o, "num_predict", -2, 1 << 30, &v, why);
    if (got < 0)
        return -1;
    if (got && v == 0)
        return srv_refuse(why, "num_predict", "'num_predict' must be at least 1 (or -1, -2)");
    if (got)
        r->max_tokens = v > 0 ? (int)v : -1;
    /* the context is the server's (-c): a request cannot resize it */
    return srv_get_int(o, "num_ctx", 1, 1 << 30, &v, why) < 0 ? -1 : 0;
}

/* Fields of Ollama's that this server cannot honour: refused when given (not empty), rather
 * than answered as if they had been. */
static int refuse_unsupported(const cJSON *root, srv_refusal *why)
{
    static const struct {
        const char *name, *why;
    } no[] = {
        {"images", "'images': this server's models read text only"},
        {"template", "'template': the model's own chat template is used (\"raw\": true sends "
                     "the prompt as it is)"},
        {"suffix", "'suffix' (fill in the middle) is not supported"},
        {"context", "'context' (the token context of an earlier answer) is not supported: send "
                    "the conversation to /api/chat"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        const cJSON *v = srv_field(root, no[i].name);
        bool empty = !v || (cJSON_IsString(v) && !*v->valuestring) ||
                     (cJSON_IsArray(v) && !cJSON_GetArraySize(v));
        if (!empty)
            return srv_refuse(why, no[i].name, no[i].why);
    }
    return 0;
}

/* A message as the chat template sees it, added to the request's conversation (chat_json) and
 * to its plain messages; NULL when out of memory. */
static cJSON *add_message(srv_request *r, const char *role, const char *content)
{
    cJSON *t = cJSON_CreateObject();
    if (!t || !cJSON_AddItemToArray(r->chat_json, t))
        return NULL;
    cJSON_AddStringToObject(t, "role", role);
    cJSON_AddStringToObject(t, "content", content);
    r->msgs[r->n_msgs++] = (chat_msg){role, content};
    return t;
}

/* Room for n messages, in both forms. */
static int new_conversation(srv_request *r, int n, srv_refusal *why)
{
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    r->chat_json = cJSON_CreateArray();
    return r->msgs && r->chat_json ? 0 : srv_refuse(why, NULL, "out of memory");
}

/* messages: {role: system|user|assistant|tool, content, tool_calls (assistant: [{function:
 * {name, arguments: {...}}}]), tool_name (tool: the function it answers), images}. */
static int parse_ollama_messages(srv_request *r, const cJSON *msgs, srv_refusal *why)
{
    int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs))
        return srv_refuse(why, "messages", "'messages' must be an array");
    if (n == 0) {
        r->load_only = true;
        return 0;
    }
    if (new_conversation(r, n, why))
        return -1;
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = srv_field(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return srv_refuse(why, "messages", "a message must be an object with a string 'role'");
        int known = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(role->valuestring, roles[i]))
                known = i;
        if (known < 0)
            return srv_refuse(why, "messages", "a message's role must be system, user, "
                              "assistant or tool");
        if (content && !cJSON_IsString(content))
            return srv_refuse(why, "messages", "a message's 'content' must be a string");
        const cJSON *images = srv_field(m, "images");
        if (images && cJSON_GetArraySize(images))
            return srv_refuse(why, "messages", "'images': this server's models read text only");
        const cJSON *calls = srv_field(m, "tool_calls"), *tool_name = srv_field(m, "tool_name");
        if (calls && known != 2)
            return srv_refuse(why, "messages", "only an assistant message has 'tool_calls'");
        if (tool_name && !cJSON_IsString(tool_name))
            return srv_refuse(why, "messages", "'tool_name' must be a string");
        cJSON *t = add_message(r, roles[known], content ? content->valuestring : "");
        if (!t)
            return srv_refuse(why, NULL, "out of memory");
        if (calls) {
            cJSON *tc = srv_template_calls(calls, r->n_msgs - 1, why);
            if (!tc)
                return -1;
            cJSON_AddItemToObject(t, "tool_calls", tc);
        }
        if (known == 3 && tool_name)
            cJSON_AddStringToObject(t, "name", tool_name->valuestring);
    }
    return 0;
}

/* format: "json" (any JSON object) or a JSON schema the reply must follow. */
static int parse_format(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *format = srv_field(root, "format");
    if (!format || (cJSON_IsString(format) && !*format->valuestring))
        return 0;
    if (cJSON_IsString(format) && !strcmp(format->valuestring, "json")) {
        r->out = SRV_OUT_JSON;
        r->out_param = "format";
        return 0;
    }
    if (!cJSON_IsObject(format))
        return srv_refuse(why, "format", "'format' must be \"json\" or a JSON schema (an object)");
    r->out = SRV_OUT_SCHEMA;
    r->schema = format;
    r->strict = true;
    r->out_param = "format";
    return 0;
}

/* /api/generate: the prompt, as it is ("raw": true) or as a user's turn after "system". */
static int parse_generate(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *prompt = srv_field(root, "prompt"), *system = srv_field(root, "system");
    bool raw = false;
    if (srv_get_bool(root, "raw", &raw, why))
        return -1;
    if (prompt && !cJSON_IsString(prompt))
        return srv_refuse(why, "prompt", "'prompt' must be a string");
    if (system && !cJSON_IsString(system))
        return srv_refuse(why, "system", "'system' must be a string");
    r->reply_as_text = true;
    if (!prompt || !*prompt->valuestring) {
        r->load_only = true;
        return 0;
    }
    if (raw) {
        r->kind = SRV_COMPLETION;
        r->prompt = prompt->valuestring;
        return 0;
    }
    r->kind = SRV_CHAT;
    if (new_conversation(r, 2, why))
        return -1;
    if ((system && *system->valuestring && !add_message(r, "system", system->valuestring)) ||
        !add_message(r, "user", prompt->valuestring))
        return srv_refuse(why, NULL, "out of memory");
    return 0;
}

static int parse_ollama(srv_request *r, enum srv_endpoint kind, const cJSON *root,
                        srv_refusal *why)
{
    const cJSON *model = srv_field(root, "model");
    if (!model)
        return srv_refuse(why, "model", "model is required");
    if (!cJSON_IsString(model))
        return srv_refuse(why, "model", "'model' must be a string");
    r->model = model->valuestring;
    r->stream = true; /* Ollama streams unless told not to */
    if (srv_get_bool(root, "stream", &r->stream, why) || refuse_unsupported(root, why))
        return -1;
    /* accepted: "keep_alive" (the model stays loaded whatever it says), "think" (a model's
     * reasoning is part of its reply) */
    const cJSON *ka = srv_field(root, "keep_alive");
    if (ka && !cJSON_IsString(ka) && !cJSON_IsNumber(ka))
        return srv_refuse(why, "keep_alive", "'keep_alive' must be a duration (\"5m\") or a "
                          "number of seconds");
    const cJSON *think = srv_field(root, "think");
    if (think && !cJSON_IsBool(think) && !cJSON_IsString(think))
        return srv_refuse(why, "think", "'think' must be true, false or a level (\"high\")");
    if (parse_options(r, root, why) || parse_format(r, root, why))
        return -1;
    /* tools: OpenAI's array, and the model chooses (Ollama has no tool_choice) */
    if (kind == SRV_CHAT && srv_parse_tools(r, root, why))
        return -1;
    if (kind == SRV_CHAT) {
        const cJSON *msgs = srv_field(root, "messages");
        if (!msgs) {
            r->load_only = true;
            return 0;
        }
        return parse_ollama_messages(r, msgs, why);
    }
    return parse_generate(r, root, why);
}

int srv_ollama_parse(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                     const sampler_params *defaults, srv_refusal *why)
{
    cJSON *root = srv_request_json(r, kind, body, len, defaults, why);
    if (!root)
        return -1;
    r->api = SRV_API_OLLAMA;
    int rc = parse_ollama(r, kind, root, why);
    if (rc)
        srv_request_free(r);
    return rc;
}

/* ---- answers ---------------------------------------------------------------------------- */

void srv_ollama_time(char *buf, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%09ldZ", day, ts.tv_nsec);
}

static void unix_time(long long t, char *buf, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* {"model", "created_at"}: the name the request gave, else the server's. */
static cJSON *head(const srv_job *j)
{
    cJSON *o = cJSON_CreateObject();
    char now[48];
    srv_ollama_time(now, sizeof now);
    cJSON_AddStringToObject(o, "model", j->req.model ? j->req.model : j->model_id);
    cJSON_AddStringToObject(o, "created_at", now);
    return o;
}

/* The reply text: "response" for /api/generate, an assistant "message" for /api/chat; its
 * reasoning (thinking: NULL for none) beside it. The message, or NULL for /api/generate. */
static cJSON *add_text(cJSON *o, const srv_job *j, const char *text, size_t len,
                       const char *thinking, size_t thinking_len)
{
    if (j->req.reply_as_text) {
        cJSON_AddItemToObject(o, "response", srv_utf8_string(text, len));
        if (thinking)
            cJSON_AddItemToObject(o, "thinking", srv_utf8_string(thinking, thinking_len));
        return NULL;
    }
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddItemToObject(m, "content", srv_utf8_string(text, len));
    if (thinking)
        cJSON_AddItemToObject(m, "thinking", srv_utf8_string(thinking, thinking_len));
    return m;
}

/* Tool calls as Ollama writes them: [{function: {name, arguments: {...}}}], from the first. */
static void add_calls(cJSON *m, const cJSON *calls, int first)
{
    if (!m || !calls)
        return;
    cJSON *a = cJSON_AddArrayToObject(m, "tool_calls");
    for (int i = first; i < cJSON_GetArraySize(calls); i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", cJSON_GetObjectItem(c, "name")->valuestring);
        cJSON_AddItemToObject(f, "arguments", srv_call_arguments(c));
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "function", f);
        cJSON_AddItemToArray(a, e);
    }
}

/* "done": true, why, and the timings (nanoseconds) and counts. The model is loaded before the
 * server starts: load_duration is 0. */
static void add_done(cJSON *o, const srv_job *j)
{
    const srv_result *r = &j->res;
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", j->req.load_only             ? "load"
                                              : r->finish == SRV_FINISH_LENGTH ? "length"
                                                                               : "stop");
    double total = j->req.load_only ? 0 : srv_now() - j->t_start;
    cJSON_AddNumberToObject(o, "total_duration", round(total * 1e9));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", r->prompt_tokens);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", round(r->prefill_s * 1e9));
    cJSON_AddNumberToObject(o, "eval_count", r->completion_tokens);
    cJSON_AddNumberToObject(o, "eval_duration", round(r->decode_s * 1e9));
}

static void send_line(srv_job *j, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text)
        return;
    strbuf_add(&j->out, text, strlen(text));
    strbuf_add(&j->out, "\n", 1);
    free(text);
}

static void ollama_begin(srv_job *j)
{
    (void)j; /* the first line carries the first text */
}

static void ollama_text(srv_job *j, const char *text, size_t len)
{
    cJSON *o = head(j);
    add_text(o, j, text, len, NULL, 0);
    cJSON_AddBoolToObject(o, "done", false);
    send_line(j, o);
}

static void ollama_reasoning(srv_job *j, const char *text, size_t len)
{
    cJSON *o = head(j);
    add_text(o, j, "", 0, text, len);
    cJSON_AddBoolToObject(o, "done", false);
    send_line(j, o);
}

static void ollama_tool_call(srv_job *j, const cJSON *call)
{
    (void)call; /* the newest of j->calls */
    cJSON *o = head(j);
    add_calls(add_text(o, j, "", 0, NULL, 0), j->calls, cJSON_GetArraySize(j->calls) - 1);
    cJSON_AddBoolToObject(o, "done", false);
    send_line(j, o);
}

static cJSON *ollama_error(int status, const char *param, const char *code, const char *message)
{
    (void)status, (void)param, (void)code;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", message);
    return o;
}

static void ollama_end(srv_job *j)
{
    const srv_result *r = &j->res;
    if (r->finish == SRV_FINISH_ERROR) {
        send_line(j, ollama_error(r->status, r->error_param, r->error_code, r->error));
    } else if (r->finish != SRV_FINISH_CANCELLED) {
        cJSON *o = head(j);
        add_text(o, j, "", 0, NULL, 0);
        add_done(o, j);
        send_line(j, o);
    }
}

static cJSON *ollama_answer(srv_job *j)
{
    if (j->req.kind == SRV_EMBED)
        return srv_embed_answer(j);
    cJSON *o = head(j);
    cJSON *m = add_text(o, j, j->text.p ? j->text.p : "", j->text.len,
                        j->reasoning.len ? j->reasoning.p : NULL, j->reasoning.len);
    add_calls(m, j->calls, 0);
    add_done(o, j);
    return o;
}

const srv_wire srv_ollama_wire = {"application/x-ndjson", ollama_begin, ollama_text,
                                  ollama_reasoning, ollama_tool_call, ollama_end, ollama_answer,
                                  ollama_error};

/* ---- the model views -------------------------------------------------------------------- */

/* name, or name followed by Ollama's default tag. */
static bool same_name(const char *given, const char *name)
{
    size_t n = strlen(name);
    return !strcmp(given, name) || (!strncmp(given, name, n) && !strcmp(given + n, ":latest"));
}

bool srv_name_matches(const srv_config *c, const char *name)
{
    if (same_name(name, c->model_id))
        return true;
    for (int i = 0; i < c->n_model_names; i++)
        if (same_name(name, c->model_names[i]))
            return true;
    return false;
}

/* "8.03B", "494.03M", "0.26M": as Ollama writes a parameter count. */
static void param_size(double n, char *buf, size_t cap)
{
    if (n >= 1e9)
        snprintf(buf, cap, "%.2fB", n / 1e9);
    else
        snprintf(buf, cap, "%.2fM", n / 1e6);
}

static cJSON *details(const srv_model_info *info)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    if (!info)
        return d;
    char ps[32];
    param_size(info->n_params, ps, sizeof ps);
    cJSON_AddStringToObject(d, "family", info->family);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "families"), cJSON_CreateString(info->family));
    cJSON_AddStringToObject(d, "parameter_size", ps);
    cJSON_AddStringToObject(d, "quantization_level", info->quantization);
    return d;
}

/* The served model as /api/tags lists it; running: as /api/ps does (it never unloads). */
static cJSON *model_entry(const srv_config *c, bool running)
{
    const srv_model_info *info = c->info;
    cJSON *m = cJSON_CreateObject();
    char name[300], when[48];
    snprintf(name, sizeof name, "%s%s", c->model_id, strchr(c->model_id, ':') ? "" : ":latest");
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddStringToObject(m, "model", name);
    if (!running) {
        unix_time(info ? info->modified : 0, when, sizeof when);
        cJSON_AddStringToObject(m, "modified_at", when);
    }
    cJSON_AddNumberToObject(m, "size", info ? info->size : 0);
    cJSON_AddStringToObject(m, "digest", info ? info->digest : "");
    cJSON_AddItemToObject(m, "details", details(info));
    if (running) {
        cJSON_AddStringToObject(m, "expires_at", "9999-12-31T23:59:59Z");
        cJSON_AddNumberToObject(m, "size_vram", 0);
        cJSON_AddNumberToObject(m, "context_length", info ? info->n_ctx : 0);
    }
    return m;
}

cJSON *srv_ollama_tags(const srv_config *c, bool running)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), model_entry(c, running));
    return o;
}

cJSON *srv_ollama_show(const srv_config *c, const cJSON *body, int *status, char *msg,
                       size_t cap)
{
    const cJSON *name = srv_field(body, "model");
    if (!name)
        name = srv_field(body, "name"); /* the older field */
    if (!cJSON_IsString(name)) {
        *status = 400;
        snprintf(msg, cap, "model is required");
        return NULL;
    }
    if (!srv_name_matches(c, name->valuestring)) {
        *status = 404;
        snprintf(msg, cap, "model '%.100s' not found", name->valuestring);
        return NULL;
    }
    const srv_model_info *info = c->info;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "license", "");
    cJSON_AddStringToObject(o, "modelfile", "");
    cJSON_AddStringToObject(o, "parameters", "");
    cJSON_AddStringToObject(o, "template", info && info->chat_template ? info->chat_template : "");
    cJSON_AddItemToObject(o, "details", details(info));
    cJSON *mi = cJSON_AddObjectToObject(o, "model_info");
    if (info) {
        char key[96];
        cJSON_AddStringToObject(mi, "general.architecture", info->family);
        cJSON_AddNumberToObject(mi, "general.parameter_count", info->n_params);
        snprintf(key, sizeof key, "%.60s.context_length", info->family);
        cJSON_AddNumberToObject(mi, key, info->n_ctx);
        char when[48];
        unix_time(info->modified, when, sizeof when);
        cJSON_AddStringToObject(o, "modified_at", when);
    }
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "capabilities"),
                         cJSON_CreateString("completion"));
    return o;
}
