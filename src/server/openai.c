/* openai.c — OpenAI's wire format: answers, stream chunks, log-probabilities, errors. */
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

static const char *finish_name(const srv_job *j, const srv_result *r)
{
    return r->finish == SRV_FINISH_LENGTH ? "length" : j->n_calls ? "tool_calls" : "stop";
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
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice);
    return o;
}

/* One choice: text (NULL: none) and the finish reason (NULL: not finished). Chat chunks put
 * the text in a delta, with the role in the first one. */
static cJSON *choice(srv_job *j, const char *text, size_t len, bool role, const char *finish)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->req.kind == SRV_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, j->req.stream ? "delta" : "message");
        if (role || !j->req.stream)
            cJSON_AddStringToObject(d, "role", "assistant");
        if (text)
            cJSON_AddItemToObject(d, "content", utf8_string(text, len));
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

static void send_event(srv_job *j, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text)
        return;
    strbuf_add(&j->out, "data: ", 6);
    strbuf_add(&j->out, text, strlen(text));
    strbuf_add(&j->out, "\n\n", 2);
    free(text);
}

void srv_sse_begin(srv_job *j)
{
    if (j->req.kind == SRV_CHAT)
        send_event(j, envelope(j, chunk_object(j), choice(j, "", 0, true, NULL)));
}

void srv_sse_text(srv_job *j, const char *text, size_t len)
{
    send_event(j, envelope(j, chunk_object(j), choice(j, text, len, false, NULL)));
}

void srv_sse_end(srv_job *j)
{
    const srv_result *r = &j->res;
    if (r->finish == SRV_FINISH_ERROR) {
        send_event(j, srv_error_json(r->status, r->error_param, r->error));
    } else if (r->finish != SRV_FINISH_CANCELLED) {
        cJSON *last = envelope(j, chunk_object(j), choice(j, NULL, 0, false, finish_name(j, r)));
        cJSON_AddItemToObject(last, "usage", usage_json(r));
        send_event(j, last);
    }
    strbuf_add(&j->out, "data: [DONE]\n\n", 14);
}

/* OpenAI's tool call: {"index"?, "id", "type": "function", "function": {"name", "arguments"}}
 * (arguments as JSON text), the k-th of the job's. */
static cJSON *call_json(const srv_job *j, const tool_call *c, int k, bool index)
{
    char id[80];
    snprintf(id, sizeof id, "call_%llx%llx_%d", (unsigned long long)j->created,
             (unsigned long long)j->serial, k);
    cJSON *o = cJSON_CreateObject();
    if (index)
        cJSON_AddNumberToObject(o, "index", k);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", c->arguments);
    return o;
}

void srv_sse_delta(srv_job *j, const tool_delta *d)
{
    if (d->reasoning_len) {
        cJSON *c = choice(j, NULL, 0, false, NULL);
        cJSON_AddItemToObject(cJSON_GetObjectItem(c, "delta"), "reasoning_content",
                              utf8_string(d->reasoning, d->reasoning_len));
        send_event(j, envelope(j, chunk_object(j), c));
    }
    if (d->content_len)
        srv_sse_text(j, d->content, d->content_len);
    for (int k = d->first_call; k < d->n_calls; k++) {
        cJSON *c = choice(j, NULL, 0, false, NULL);
        cJSON *calls = cJSON_AddArrayToObject(cJSON_GetObjectItem(c, "delta"), "tool_calls");
        cJSON_AddItemToArray(calls, call_json(j, &d->calls[k], k, true));
        send_event(j, envelope(j, chunk_object(j), c));
        j->n_calls = k + 1;
    }
}

/* A chat answer read for calls and reasoning: its message (content null when there is none
 * beside the calls). */
static cJSON *parsed_answer(srv_job *j, const char *text, size_t len)
{
    tool_reply r;
    if (tool_parse(j->tool_fmt, j->think, text, len, &r))
        return NULL;
    j->n_calls = r.n_calls;
    cJSON *c = choice(j, NULL, 0, false, finish_name(j, &j->res));
    cJSON *m = cJSON_GetObjectItem(c, "message");
    if (r.content_len || !r.n_calls)
        cJSON_AddItemToObject(m, "content", utf8_string(r.content, r.content_len));
    else
        cJSON_AddNullToObject(m, "content");
    if (r.reasoning_len)
        cJSON_AddItemToObject(m, "reasoning_content", utf8_string(r.reasoning, r.reasoning_len));
    if (r.n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (int k = 0; k < r.n_calls; k++)
            cJSON_AddItemToArray(calls, call_json(j, &r.calls[k], k, false));
    }
    tool_reply_free(&r);
    return c;
}

cJSON *srv_answer_json(srv_job *j)
{
    const char *text = j->text.p ? j->text.p : "";
    cJSON *c = j->parse && j->req.kind == SRV_CHAT ? parsed_answer(j, text, j->text.len) : NULL;
    if (!c)
        c = choice(j, text, j->text.len, true, finish_name(j, &j->res));
    cJSON *a = envelope(j, j->req.kind == SRV_CHAT ? "chat.completion" : "text_completion", c);
    cJSON_AddItemToObject(a, "usage", usage_json(&j->res));
    return a;
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

cJSON *srv_models_json(const char *model_id)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "prima");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    return o;
}
