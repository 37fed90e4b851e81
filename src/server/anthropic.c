/* anthropic.c — Anthropic's Messages API: POST /v1/messages requests, their answers, the
 * server-sent event sequence of a stream (message_start, content_block_start, ping,
 * content_block_delta..., content_block_stop, message_delta with the stop reason and usage,
 * message_stop) and its error object {"type": "error", "error": {"type", "message"}}. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* ---- requests --------------------------------------------------------------------------- */

/* Text blocks joined into one string (kept with r); other block types are refused, but for an
 * assistant's thinking, which is its own and is dropped from the history. */
static const char *blocks_text(srv_request *r, const cJSON *c, const char *param,
                               srv_refusal *why)
{
    if (cJSON_IsString(c))
        return c->valuestring;
    if (!cJSON_IsArray(c)) {
        srv_refuse(why, param, "content must be a string or an array of content blocks");
        return NULL;
    }
    strbuf t = {0};
    const cJSON *b;
    cJSON_ArrayForEach(b, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            free(t.p);
            srv_refuse(why, param, "a content block must be an object with a string 'type'");
            return NULL;
        }
        if (!strcmp(type->valuestring, "thinking") ||
            !strcmp(type->valuestring, "redacted_thinking"))
            continue;
        if (strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            free(t.p);
            srv_refuse(why, param, strcmp(type->valuestring, "text")
                                       ? "only content blocks of type text are supported "
                                         "(images and documents are not)"
                                       : "a text block needs a string 'text'");
            return NULL;
        }
        if (strbuf_add(&t, text->valuestring, strlen(text->valuestring))) {
            free(t.p);
            srv_refuse(why, NULL, "out of memory");
            return NULL;
        }
    }
    const char *joined = srv_keep(r, t.p ? t.p : calloc(1, 1));
    if (!joined)
        srv_refuse(why, NULL, "out of memory");
    return joined;
}

static int parse_messages(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *msgs = srv_field(root, "messages"), *system = srv_field(root, "system");
    int n = cJSON_GetArraySize(msgs);
    if (!msgs)
        return srv_refuse(why, "messages", "messages: Field required");
    if (!cJSON_IsArray(msgs) || n == 0)
        return srv_refuse(why, "messages", "messages: must be a non-empty array");
    r->msgs = calloc((size_t)n + 1, sizeof *r->msgs);
    if (!r->msgs)
        return srv_refuse(why, NULL, "out of memory");
    if (system) {
        const char *text = blocks_text(r, system, "system", why);
        if (!text)
            return -1;
        if (*text)
            r->msgs[r->n_msgs++] = (chat_msg){"system", text};
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = srv_field(m, "content");
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (!user && strcmp(role->valuestring, "assistant")))
            return srv_refuse(why, "messages", "a message needs a role, user or assistant");
        if (!content)
            return srv_refuse(why, "messages", "a message needs its content");
        const char *text = blocks_text(r, content, "messages", why);
        if (!text)
            return -1;
        r->msgs[r->n_msgs++] = (chat_msg){user ? "user" : "assistant", text};
    }
    return 0;
}

static int parse_anthropic(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *model = srv_field(root, "model");
    if (!model)
        return srv_refuse(why, "model", "model: Field required");
    if (!cJSON_IsString(model))
        return srv_refuse(why, "model", "model: must be a string");
    r->model = model->valuestring;
    double v;
    int got = srv_get_int(root, "max_tokens", 1, 1 << 30, &v, why);
    if (got < 0)
        return -1;
    if (!got)
        return srv_refuse(why, "max_tokens", "max_tokens: Field required");
    r->max_tokens = (int)v;
    sampler_params *sp = &r->sp;
    if (parse_messages(r, root, why) || srv_get_bool(root, "stream", &r->stream, why) ||
        srv_get_float(root, "temperature", 0, 1, &sp->temp, why) ||
        srv_get_float(root, "top_p", 0, 1, &sp->top_p, why))
        return -1;
    if (srv_field(root, "top_p") && sp->top_p <= 0.0f)
        return srv_refuse(why, "top_p", "top_p: must be in (0, 1]");
    got = srv_get_int(root, "top_k", 0, 1 << 30, &v, why);
    if (got < 0)
        return -1;
    if (got)
        sp->top_k = (int)v;
    const cJSON *tools = srv_field(root, "tools");
    if (tools && cJSON_GetArraySize(tools))
        return srv_refuse(why, "tools", "tools: not supported yet");
    return srv_parse_stop(r, root, "stop_sequences", why);
}

int srv_anthropic_parse(srv_request *r, const char *body, size_t len,
                        const sampler_params *defaults, srv_refusal *why)
{
    cJSON *root = srv_request_json(r, SRV_CHAT, body, len, defaults, why);
    if (!root)
        return -1;
    r->api = SRV_API_ANTHROPIC;
    int rc = parse_anthropic(r, root, why);
    if (rc)
        srv_request_free(r);
    return rc;
}

/* ---- answers ---------------------------------------------------------------------------- */

static const char *stop_reason(const srv_result *r)
{
    if (r->finish == SRV_FINISH_LENGTH)
        return "max_tokens";
    return r->stop_sequence ? "stop_sequence" : "end_turn";
}

static void add_usage(cJSON *o, int input, int output)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", input);
    cJSON_AddNumberToObject(u, "output_tokens", output);
}

/* The message object; content: its blocks (NULL: an empty list), finished: with its stop
 * reason (else null, as message_start has it). */
static cJSON *message(const srv_job *j, cJSON *content, bool finished)
{
    char id[64];
    snprintf(id, sizeof id, "msg_%llx%llx", (unsigned long long)j->created,
             (unsigned long long)j->serial);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", j->req.model ? j->req.model : j->model_id);
    cJSON_AddItemToObject(o, "content", content ? content : cJSON_CreateArray());
    const srv_result *r = &j->res;
    if (finished) {
        cJSON_AddStringToObject(o, "stop_reason", stop_reason(r));
        if (r->stop_sequence)
            cJSON_AddStringToObject(o, "stop_sequence", r->stop_sequence);
        else
            cJSON_AddNullToObject(o, "stop_sequence");
        add_usage(o, r->prompt_tokens, r->completion_tokens);
    } else {
        cJSON_AddNullToObject(o, "stop_reason");
        cJSON_AddNullToObject(o, "stop_sequence");
        add_usage(o, j->prompt_tokens, 0);
    }
    return o;
}

static cJSON *text_block(const char *text, size_t len)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddItemToObject(b, "text", srv_utf8_string(text, len));
    return b;
}

/* An event: {"type": name, ...obj's members}. */
static void event(srv_job *j, const char *name, cJSON *obj)
{
    cJSON *e = obj ? obj : cJSON_CreateObject();
    cJSON_AddItemToObject(e, "type", cJSON_CreateString(name));
    srv_send_event(j, name, e);
}

static void anthropic_begin(srv_job *j)
{
    cJSON *start = cJSON_CreateObject();
    cJSON_AddItemToObject(start, "message", message(j, NULL, false));
    event(j, "message_start", start);
    cJSON *block = cJSON_CreateObject();
    cJSON_AddNumberToObject(block, "index", 0);
    cJSON_AddItemToObject(block, "content_block", text_block("", 0));
    event(j, "content_block_start", block);
    event(j, "ping", NULL);
}

static void anthropic_text(srv_job *j, const char *text, size_t len)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "index", 0);
    cJSON *delta = cJSON_AddObjectToObject(d, "delta");
    cJSON_AddStringToObject(delta, "type", "text_delta");
    cJSON_AddItemToObject(delta, "text", srv_utf8_string(text, len));
    event(j, "content_block_delta", d);
}

static const char *error_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

static cJSON *anthropic_error(int status, const char *param, const char *code,
                              const char *message)
{
    (void)param, (void)code;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "error");
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", error_type(status));
    cJSON_AddStringToObject(e, "message", message);
    return o;
}

static void anthropic_end(srv_job *j)
{
    const srv_result *r = &j->res;
    if (r->finish == SRV_FINISH_ERROR) {
        srv_send_event(j, "error", anthropic_error(r->status, r->error_param, r->error_code,
                                                   r->error));
        return;
    }
    if (r->finish == SRV_FINISH_CANCELLED)
        return;
    cJSON *stop = cJSON_CreateObject();
    cJSON_AddNumberToObject(stop, "index", 0);
    event(j, "content_block_stop", stop);
    cJSON *md = cJSON_CreateObject();
    cJSON *delta = cJSON_AddObjectToObject(md, "delta");
    cJSON_AddStringToObject(delta, "stop_reason", stop_reason(r));
    if (r->stop_sequence)
        cJSON_AddStringToObject(delta, "stop_sequence", r->stop_sequence);
    else
        cJSON_AddNullToObject(delta, "stop_sequence");
    add_usage(md, r->prompt_tokens, r->completion_tokens);
    event(j, "message_delta", md);
    event(j, "message_stop", NULL);
}

static cJSON *anthropic_answer(srv_job *j)
{
    cJSON *content = cJSON_CreateArray();
    cJSON_AddItemToArray(content, text_block(j->text.p ? j->text.p : "", j->text.len));
    return message(j, content, true);
}

const srv_wire srv_anthropic_wire = {"text/event-stream", anthropic_begin, anthropic_text,
                                     anthropic_end, anthropic_answer, anthropic_error};
