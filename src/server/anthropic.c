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

/* The text of a block's "text", or of a tool result's content (a string or text blocks),
 * appended to t. 0, or -1 with why. */
static int add_text(strbuf *t, const cJSON *c, srv_refusal *why)
{
    if (cJSON_IsString(c))
        return strbuf_add(t, c->valuestring, strlen(c->valuestring)) ? srv_refuse(why, NULL,
                                                                                  "out of memory")
                                                                      : 0;
    const cJSON *b;
    if (!cJSON_IsArray(c))
        return srv_refuse(why, "messages", "a tool result's content must be a string or text "
                          "blocks");
    cJSON_ArrayForEach(b, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return srv_refuse(why, "messages", "a tool result's content blocks must be text "
                              "(images and documents are not supported)");
        if (add_text(t, text, why))
            return -1;
    }
    return 0;
}

/* A message as the chat template sees it, in both of the request's forms; text is kept with r.
 * NULL when out of memory. */
static cJSON *add_message(srv_request *r, const char *role, strbuf *text)
{
    const char *kept = srv_keep(r, text->p ? text->p : calloc(1, 1));
    *text = (strbuf){0};
    cJSON *t = kept ? cJSON_CreateObject() : NULL;
    if (!t || !cJSON_AddItemToArray(r->chat_json, t))
        return NULL;
    cJSON_AddStringToObject(t, "role", role);
    cJSON_AddStringToObject(t, "content", kept);
    r->msgs[r->n_msgs++] = (chat_msg){role, kept};
    return t;
}

/* One message's content blocks: text (joined), thinking (the assistant's own: dropped),
 * tool_use (an assistant's calls) and tool_result (a user's answers: each a message of role
 * tool, before the user's text). 0, or -1 with why. */
static int add_blocks(srv_request *r, bool user, const cJSON *content, srv_refusal *why)
{
    strbuf text = {0};
    cJSON *calls = NULL;
    int rc = 0;
    bool had_results = false;
    if (cJSON_IsString(content)) {
        rc = add_text(&text, content, why);
        content = NULL;
    } else if (!cJSON_IsArray(content)) {
        rc = srv_refuse(why, "messages", "content must be a string or an array of content "
                        "blocks");
    }
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        if (rc)
            break;
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "type"));
        if (!type) {
            rc = srv_refuse(why, "messages", "a content block needs a string 'type'");
        } else if (!strcmp(type, "text")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text");
            rc = cJSON_IsString(t) ? add_text(&text, t, why)
                                   : srv_refuse(why, "messages", "a text block needs 'text'");
        } else if (!user && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking"))) {
            continue;
        } else if (!user && !strcmp(type, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
                rc = srv_refuse(why, "messages", "a tool_use block needs 'id', 'name' and an "
                                "object 'input'");
                break;
            }
            if (!calls)
                calls = cJSON_CreateArray();
            cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
            cJSON_AddItemToArray(calls, c);
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddItemToObject(c, "function", f);
            cJSON_AddStringToObject(f, "name", name->valuestring);
            cJSON_AddItemToObject(f, "arguments", cJSON_Duplicate(input, true));
        } else if (user && !strcmp(type, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            const cJSON *c = srv_field(b, "content");
            strbuf result = {0};
            if (!cJSON_IsString(id)) {
                rc = srv_refuse(why, "messages", "a tool_result block needs 'tool_use_id'");
                break;
            }
            rc = c ? add_text(&result, c, why) : 0;
            const char *fname = srv_call_name(r->chat_json, id->valuestring);
            cJSON *t = rc ? NULL : add_message(r, "tool", &result);
            if (!rc && !t)
                rc = srv_refuse(why, NULL, "out of memory");
            free(result.p);
            if (rc)
                break;
            had_results = true;
            cJSON_AddStringToObject(t, "tool_call_id", id->valuestring);
            if (fname)
                cJSON_AddStringToObject(t, "name", fname);
        } else {
            rc = srv_refuse(why, "messages", "content blocks of this type are not supported here "
                            "(text; an assistant's tool_use, a user's tool_result)");
        }
    }
    /* the text (or an empty turn), unless the message held only tool results */
    bool only_results = had_results && !text.len;
    if (!rc && !only_results) {
        cJSON *t = add_message(r, user ? "user" : "assistant", &text);
        if (!t)
            rc = srv_refuse(why, NULL, "out of memory");
        else if (calls) {
            cJSON *tc = srv_template_calls(calls, r->n_msgs - 1, why);
            rc = tc ? 0 : -1;
            if (tc)
                cJSON_AddItemToObject(t, "tool_calls", tc);
        }
    }
    cJSON_Delete(calls);
    free(text.p);
    return rc;
}

static int parse_messages(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *msgs = srv_field(root, "messages"), *system = srv_field(root, "system");
    int n = cJSON_GetArraySize(msgs);
    if (!msgs)
        return srv_refuse(why, "messages", "messages: Field required");
    if (!cJSON_IsArray(msgs) || n == 0)
        return srv_refuse(why, "messages", "messages: must be a non-empty array");
    int room = 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
        room += 1 + cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content"));
    r->msgs = calloc((size_t)room, sizeof *r->msgs);
    r->chat_json = cJSON_CreateArray();
    if (!r->msgs || !r->chat_json)
        return srv_refuse(why, NULL, "out of memory");
    if (system) {
        strbuf text = {0};
        if (add_text(&text, system, why)) {
            free(text.p);
            return srv_refuse(why, "system", "system: must be a string or an array of text "
                              "blocks");
        }
        if (!text.len)
            free(text.p);
        else if (!add_message(r, "system", &text))
            return srv_refuse(why, NULL, "out of memory");
    }
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = srv_field(m, "content");
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (!user && strcmp(role->valuestring, "assistant")))
            return srv_refuse(why, "messages", "a message needs a role, user or assistant");
        if (!content)
            return srv_refuse(why, "messages", "a message needs its content");
        if (add_blocks(r, user, content, why))
            return -1;
    }
    return 0;
}

/* tools [{name, description, input_schema}] and tool_choice {type: auto | any | tool (with
 * name) | none, disable_parallel_tool_use}, in OpenAI's terms (kept in api_json) for
 * srv_parse_tools. */
static int parse_tools(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *tools = srv_field(root, "tools"), *choice = srv_field(root, "tool_choice");
    if (!tools && !choice)
        return 0;
    cJSON *o = cJSON_CreateObject();
    r->api_json = o;
    if (!o)
        return srv_refuse(why, NULL, "out of memory");
    if (tools && !cJSON_IsArray(tools))
        return srv_refuse(why, "tools", "tools: must be an array");
    cJSON *list = cJSON_AddArrayToObject(o, "tools");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
            return srv_refuse(why, "tools", "tools: only client tools (name, input_schema) are "
                              "supported, not Anthropic's server tools");
        if (!cJSON_IsString(name) || !cJSON_IsObject(schema))
            return srv_refuse(why, "tools", "tools: a tool needs 'name' and an object "
                              "'input_schema'");
        cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddItemToArray(list, e);
        cJSON_AddStringToObject(e, "type", "function");
        cJSON_AddItemToObject(e, "function", f);
        cJSON_AddStringToObject(f, "name", name->valuestring);
        if (cJSON_IsString(desc))
            cJSON_AddStringToObject(f, "description", desc->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, true));
    }
    if (choice) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(choice, "type"));
        static const char *const types[][2] = {
            {"auto", "auto"}, {"any", "required"}, {"none", "none"}, {"tool", NULL}};
        int k = -1;
        for (int i = 0; type && i < 4; i++)
            if (!strcmp(type, types[i][0]))
                k = i;
        if (k < 0)
            return srv_refuse(why, "tool_choice", "tool_choice: type must be auto, any, tool or "
                              "none");
        bool one = false;
        if (srv_get_bool(choice, "disable_parallel_tool_use", &one, why))
            return -1;
        cJSON_AddBoolToObject(o, "parallel_tool_calls", !one);
        if (types[k][1]) {
            cJSON_AddStringToObject(o, "tool_choice", types[k][1]);
        } else {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
            if (!cJSON_IsString(name))
                return srv_refuse(why, "tool_choice", "tool_choice: type tool needs 'name'");
            cJSON *c = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name",
                                    name->valuestring);
        }
    }
    return srv_parse_tools(r, o, why);
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
    return parse_tools(r, root, why) || srv_parse_stop(r, root, "stop_sequences", why) ? -1 : 0;
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

static const char *stop_reason(const srv_job *j)
{
    const srv_result *r = &j->res;
    if (r->finish == SRV_FINISH_LENGTH)
        return "max_tokens";
    if (j->calls)
        return "tool_use";
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
        cJSON_AddStringToObject(o, "stop_reason", stop_reason(j));
        if (r->stop_sequence && !j->calls)
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

/* A block {type, <member>: text}: text's "text", thinking's "thinking". */
static cJSON *text_block(const char *type, const char *member, const char *text, size_t len)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", type);
    cJSON_AddItemToObject(b, member, srv_utf8_string(text, len));
    return b;
}

static cJSON *tool_use_block(const cJSON *call, bool with_input)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", cJSON_GetObjectItem(call, "id")->valuestring);
    cJSON_AddStringToObject(b, "name", cJSON_GetObjectItem(call, "name")->valuestring);
    cJSON_AddItemToObject(b, "input", with_input ? srv_call_arguments(call) : cJSON_CreateObject());
    return b;
}

/* An event: {"type": name, ...obj's members}. */
static void event(srv_job *j, const char *name, cJSON *obj)
{
    cJSON *e = obj ? obj : cJSON_CreateObject();
    cJSON_AddItemToObject(e, "type", cJSON_CreateString(name));
    srv_send_event(j, name, e);
}

/* {"index": the current block, "delta": delta}, as a content_block_delta. */
static void block_delta(srv_job *j, cJSON *delta)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "index", j->n_blocks - 1);
    cJSON_AddItemToObject(d, "delta", delta);
    event(j, "content_block_delta", d);
}

/* The stream's content blocks: one open at a time (j->block: its kind), each ended before the
 * next begins; text and thinking blocks open with their first delta. */
enum { NO_BLOCK, TEXT_BLOCK, THINKING_BLOCK, TOOL_BLOCK };

static void close_block(srv_job *j)
{
    if (j->block == NO_BLOCK)
        return;
    cJSON *stop = cJSON_CreateObject();
    cJSON_AddNumberToObject(stop, "index", j->n_blocks - 1);
    event(j, "content_block_stop", stop);
    j->block = NO_BLOCK;
}

static void open_block(srv_job *j, int kind, cJSON *block)
{
    close_block(j);
    cJSON *start = cJSON_CreateObject();
    cJSON_AddNumberToObject(start, "index", j->n_blocks++);
    cJSON_AddItemToObject(start, "content_block", block);
    event(j, "content_block_start", start);
    j->block = kind;
}

static void anthropic_begin(srv_job *j)
{
    cJSON *start = cJSON_CreateObject();
    cJSON_AddItemToObject(start, "message", message(j, NULL, false));
    event(j, "message_start", start);
    event(j, "ping", NULL);
}

static void anthropic_text(srv_job *j, const char *text, size_t len)
{
    if (j->block != TEXT_BLOCK)
        open_block(j, TEXT_BLOCK, text_block("text", "text", "", 0));
    cJSON *delta = text_block("text_delta", "text", text, len);
    block_delta(j, delta);
}

static void anthropic_reasoning(srv_job *j, const char *text, size_t len)
{
    if (j->block != THINKING_BLOCK)
        open_block(j, THINKING_BLOCK, text_block("thinking", "thinking", "", 0));
    block_delta(j, text_block("thinking_delta", "thinking", text, len));
}

/* A tool_use block: begun with an empty input, its arguments as one input_json_delta. */
static void anthropic_tool_call(srv_job *j, const cJSON *call)
{
    open_block(j, TOOL_BLOCK, tool_use_block(call, false));
    cJSON *delta = cJSON_CreateObject();
    cJSON_AddStringToObject(delta, "type", "input_json_delta");
    cJSON_AddStringToObject(delta, "partial_json",
                            cJSON_GetObjectItem(call, "arguments")->valuestring);
    block_delta(j, delta);
    close_block(j);
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
    if (!j->n_blocks) /* an empty reply is one empty text block */
        open_block(j, TEXT_BLOCK, text_block("text", "text", "", 0));
    close_block(j);
    cJSON *md = cJSON_CreateObject();
    cJSON *delta = cJSON_AddObjectToObject(md, "delta");
    cJSON_AddStringToObject(delta, "stop_reason", stop_reason(j));
    if (r->stop_sequence && !j->calls)
        cJSON_AddStringToObject(delta, "stop_sequence", r->stop_sequence);
    else
        cJSON_AddNullToObject(delta, "stop_sequence");
    add_usage(md, r->prompt_tokens, r->completion_tokens);
    event(j, "message_delta", md);
    event(j, "message_stop", NULL);
}

/* thinking (when there was reasoning), text (unless the reply is calls alone), tool_use. */
static cJSON *anthropic_answer(srv_job *j)
{
    cJSON *content = cJSON_CreateArray();
    if (j->reasoning.len)
        cJSON_AddItemToArray(content, text_block("thinking", "thinking", j->reasoning.p,
                                                 j->reasoning.len));
    if (j->text.len || !j->calls)
        cJSON_AddItemToArray(content, text_block("text", "text", j->text.p ? j->text.p : "",
                                                 j->text.len));
    const cJSON *c;
    cJSON_ArrayForEach(c, j->calls)
        cJSON_AddItemToArray(content, tool_use_block(c, true));
    return message(j, content, true);
}

const srv_wire srv_anthropic_wire = {"text/event-stream", anthropic_begin, anthropic_text,
                                     anthropic_reasoning, anthropic_tool_call, anthropic_end,
                                     anthropic_answer, anthropic_error};
