/* openai.c — OpenAI's wire format: answers, stream chunks, log-probabilities, errors; and the
 * UTF-8 and event helpers the other APIs' formats share. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

size_t srv_utf8_seq(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
                 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    /* RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF */
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* A JSON string holding NUL bytes, which cJSON's strings (C strings) cannot: the literal is
 * assembled from cJSON's escaping of the pieces between them, joined by \u0000, and goes out
 * verbatim as a raw item. NULL when out of memory. */
static cJSON *string_with_nuls(const char *s, size_t n)
{
    strbuf lit = {0};
    int bad = strbuf_add(&lit, "\"", 1);
    for (size_t i = 0; !bad && i <= n;) {
        size_t k = strnlen(s + i, n - i);
        cJSON *piece = cJSON_CreateString(s + i);   /* stops at the NUL (or the end) */
        char *esc = piece ? cJSON_PrintUnformatted(piece) : NULL;
        cJSON_Delete(piece);
        bad = !esc || strbuf_add(&lit, esc + 1, strlen(esc) - 2);   /* without its quotes */
        free(esc);
        i += k + 1;
        if (!bad && i <= n)
            bad = strbuf_add(&lit, "\\u0000", 6);
    }
    cJSON *raw = bad || strbuf_add(&lit, "\"", 1) ? NULL : cJSON_CreateRaw(lit.p);
    free(lit.p);
    return raw;
}

/* The bytes as UTF-8, each invalid byte replaced by U+FFFD (a token can be part of a
 * character), NUL-terminated after *len bytes (which may hold NULs); NULL when out of memory. */
static char *utf8_clean(const char *p, size_t n, size_t *len)
{
    char *out = malloc(3 * n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = srv_utf8_seq((const unsigned char *)p + i, n - i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    *len = o;
    return out;
}

/* A JSON string of the bytes (utf8_clean); a NUL byte (a byte token) is kept, as \u0000. */
static cJSON *utf8_string(const char *p, size_t n)
{
    size_t o;
    char *out = utf8_clean(p, n, &o);
    if (!out)
        return NULL;
    cJSON *s = memchr(out, 0, o) ? string_with_nuls(out, o) : cJSON_CreateString(out);
    free(out);
    return s;
}

cJSON *srv_utf8_string(const char *p, size_t n)
{
    return utf8_string(p, n);
}

static cJSON *bytes_array(const char *p, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)p[i]));
    return a;
}

/* Chat: {"token", "logprob", "bytes"} (with "top_logprobs" for the chosen one). */
static cJSON *chat_entry(const srv_token_prob *t)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "token", utf8_string(t->piece, t->len));
    cJSON_AddNumberToObject(e, "logprob", t->logprob);
    cJSON_AddItemToObject(e, "bytes", bytes_array(t->piece, t->len));
    return e;
}

void srv_logprob_add(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top)
{
    if (j->req.kind == SRV_CHAT) {
        if (!j->lp)
            j->lp = cJSON_CreateArray();
        cJSON *e = chat_entry(tok);
        cJSON *alts = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < n_top; i++)
            cJSON_AddItemToArray(alts, chat_entry(&top[i]));
        cJSON_AddItemToArray(j->lp, e);
        return;
    }
    /* completions: parallel arrays */
    if (!j->lp) {
        j->lp = cJSON_CreateObject();
        cJSON_AddArrayToObject(j->lp, "tokens");
        cJSON_AddArrayToObject(j->lp, "token_logprobs");
        cJSON_AddArrayToObject(j->lp, "top_logprobs");
        cJSON_AddArrayToObject(j->lp, "text_offset");
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(j->lp, "tokens"), utf8_string(tok->piece, tok->len));
    cJSON_AddItemToArray(cJSON_GetObjectItem(j->lp, "token_logprobs"),
                         cJSON_CreateNumber(tok->logprob));
    cJSON *alts = cJSON_CreateObject();
    for (int i = 0; i < n_top; i++) {
        /* an object key is a C string: it ends at a NUL byte */
        size_t len;
        char *name = utf8_clean(top[i].piece, top[i].len, &len);
        if (name && !cJSON_GetObjectItemCaseSensitive(alts, name))
            cJSON_AddNumberToObject(alts, name, top[i].logprob);
        free(name);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(j->lp, "top_logprobs"), alts);
    cJSON_AddItemToArray(cJSON_GetObjectItem(j->lp, "text_offset"),
                         cJSON_CreateNumber((double)j->text_offset));
    j->text_offset += tok->len;
}

/* The log-probabilities gathered since the last chunk, in the choice's format (null: none). */
static cJSON *take_logprobs(srv_job *j)
{
    if (!j->lp)
        return cJSON_CreateNull();
    cJSON *lp = j->lp;
    j->lp = NULL;
    if (j->req.kind == SRV_COMPLETION)
        return lp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", lp);
    return o;
}

/* A reply that made tool calls ends with "tool_calls" (unless cut short). */
static const char *finish_name(const srv_job *j)
{
    if (j->res.finish == SRV_FINISH_LENGTH)
        return "length";
    return j->calls ? "tool_calls" : "stop";
}

/* The calls as OpenAI writes them: [{(index,) id, type, function: {name, arguments}}]. */
static cJSON *calls_json(const cJSON *calls, int first, bool indexed)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = first; i < cJSON_GetArraySize(calls); i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
        if (indexed)
            cJSON_AddNumberToObject(e, "index", i);
        cJSON_AddStringToObject(e, "id", cJSON_GetObjectItem(c, "id")->valuestring);
        cJSON_AddStringToObject(e, "type", "function");
        cJSON_AddStringToObject(f, "name", cJSON_GetObjectItem(c, "name")->valuestring);
        cJSON_AddStringToObject(f, "arguments", cJSON_GetObjectItem(c, "arguments")->valuestring);
        cJSON_AddItemToObject(e, "function", f);
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static cJSON *usage_json(const srv_result *r)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens + r->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", r->cached_tokens);
    return u;
}

/* {"id", "object", "created", "model", "choices": [choice]} */
static cJSON *envelope(const srv_job *j, const char *object, cJSON *choice)
{
    char id[64];
    snprintf(id, sizeof id, "%s-%llx%llx", j->req.kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, (unsigned long long)j->serial);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model_id);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (choice)
        cJSON_AddItemToArray(choices, choice);
    return o;
}

/* One choice: text (NULL: none) and the finish reason (NULL: not finished). Chat chunks put
 * the text in a delta, with the role in the first one. */
static cJSON *choice(srv_job *j, const char *text, size_t len, bool role, const char *finish)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    if (j->req.kind == SRV_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, j->req.stream ? "delta" : "message");
        if (role || !j->req.stream)
            cJSON_AddStringToObject(d, "role", "assistant");
        if (!j->req.stream && j->calls && !len)   /* a reply of calls only */
            cJSON_AddNullToObject(d, "content");
        else if (text)
            cJSON_AddItemToObject(d, "content", utf8_string(text, len));
        if (!j->req.stream && j->reasoning.len)
            cJSON_AddItemToObject(d, "reasoning_content",
                                  utf8_string(j->reasoning.p, j->reasoning.len));
        if (!j->req.stream && j->calls)
            cJSON_AddItemToObject(d, "tool_calls", calls_json(j->calls, 0, false));
    } else {
        cJSON_AddItemToObject(c, "text", utf8_string(text ? text : "", text ? len : 0));
    }
    cJSON_AddItemToObject(c, "logprobs", take_logprobs(j));
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static const char *chunk_object(const srv_job *j)
{
    return j->req.kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion";
}

void srv_send_event(srv_job *j, const char *event, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text)
        return;
    if (event) {
        strbuf_add(&j->out, "event: ", 7);
        strbuf_add(&j->out, event, strlen(event));
        strbuf_add(&j->out, "\n", 1);
    }
    strbuf_add(&j->out, "data: ", 6);
    strbuf_add(&j->out, text, strlen(text));
    strbuf_add(&j->out, "\n\n", 2);
    free(text);
}

static void send_event(srv_job *j, cJSON *obj)
{
    srv_send_event(j, NULL, obj);
}

static void openai_begin(srv_job *j)
{
    if (j->req.kind == SRV_CHAT)
        send_event(j, envelope(j, chunk_object(j), choice(j, "", 0, true, NULL)));
}

static void openai_text(srv_job *j, const char *text, size_t len)
{
    send_event(j, envelope(j, chunk_object(j), choice(j, text, len, false, NULL)));
}

/* A chunk whose delta holds one member (reasoning text, or the newest tool call). */
static void delta_chunk(srv_job *j, const char *name, cJSON *value)
{
    cJSON *c = choice(j, NULL, 0, false, NULL);
    if (!cJSON_AddItemToObject(cJSON_GetObjectItem(c, "delta"), name, value))
        cJSON_Delete(value); /* completions have no delta: their reply is text alone */
    send_event(j, envelope(j, chunk_object(j), c));
}

static void openai_reasoning(srv_job *j, const char *text, size_t len)
{
    delta_chunk(j, "reasoning_content", utf8_string(text, len));
}

static void openai_tool_call(srv_job *j, const cJSON *call)
{
    (void)call; /* the newest of j->calls */
    delta_chunk(j, "tool_calls", calls_json(j->calls, cJSON_GetArraySize(j->calls) - 1, true));
}

static cJSON *openai_error(int status, const char *param, const char *code, const char *message)
{
    cJSON *o = srv_error_json(status, param, message);
    if (code)
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(o, "error"), "code",
                                  cJSON_CreateString(code));
    return o;
}

/* The last chunk says why it ended; the usage follows in a chunk of its own, with no choices,
 * when the request asked for it (stream_options.include_usage), as OpenAI sends it. A request
 * of several prompts (a group) ends once, after every choice's last chunk: its usage (all its
 * choices') or the error that ended it, then [DONE]; its members send their last chunks only. */
static void openai_end(srv_job *j)
{
    const srv_result *r = &j->res;
    if (r->finish == SRV_FINISH_ERROR) {
        if (!j->group)
            send_event(j, openai_error(r->status, r->error_param, r->error_code, r->error));
    } else if (r->finish != SRV_FINISH_CANCELLED) {
        if (!j->members)
            send_event(j, envelope(j, chunk_object(j),
                                   choice(j, NULL, 0, false, finish_name(j))));
        if (j->req.include_usage && !j->group) {
            cJSON *u = envelope(j, chunk_object(j), NULL);
            cJSON_AddItemToObject(u, "usage", usage_json(r));
            send_event(j, u);
        }
    }
    if (!j->group)
        strbuf_add(&j->out, "data: [DONE]\n\n", 14);
}

static cJSON *answer_choice(srv_job *j)
{
    return choice(j, j->text.p ? j->text.p : "", j->text.len, true, finish_name(j));
}

/* A group's answer holds its members' choices, by index, and the usage of all (its res). */
static cJSON *openai_answer(srv_job *j)
{
    if (j->req.kind == SRV_EMBED)
        return srv_embed_answer(j);
    cJSON *a = envelope(j, j->req.kind == SRV_CHAT ? "chat.completion" : "text_completion",
                        j->members ? NULL : answer_choice(j));
    cJSON *choices = cJSON_GetObjectItem(a, "choices");
    for (int i = 0; i < j->n_members; i++)
        cJSON_AddItemToArray(choices, answer_choice(j->members[i]));
    cJSON_AddItemToObject(a, "usage", usage_json(&j->res));
    return a;
}

const srv_wire srv_openai_wire = {"text/event-stream", openai_begin, openai_text,
                                  openai_reasoning, openai_tool_call, openai_end, openai_answer,
                                  openai_error};

const srv_wire *srv_wire_of(enum srv_api api)
{
    return api == SRV_API_OLLAMA      ? &srv_ollama_wire
           : api == SRV_API_ANTHROPIC ? &srv_anthropic_wire
                                      : &srv_openai_wire;
}

cJSON *srv_error_json(int status, const char *param, const char *message)
{
    const char *type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (status == 401)
        cJSON_AddStringToObject(e, "code", "invalid_api_key");
    else
        cJSON_AddNullToObject(e, "code");
    return o;
}

cJSON *srv_model_json(const char *model_id)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "prima");
    return m;
}

cJSON *srv_models_json(const char *model_id)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), srv_model_json(model_id));
    return o;
}
