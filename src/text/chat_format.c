/* chat_format.c — the model's Jinja chat template when it has one that parses, the built-in
 * format otherwise; the prompt's tokens from either. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_format.h"

struct chat_format {
    jinja_template *jinja;          /* NULL: the built-in format */
    enum chat_template builtin;
    bool warned;                    /* the file's template was neither readable nor recognised */
    char *bos, *eos;                /* the tokens' texts, NULL where the vocabulary has none */
    char *src;                      /* the Jinja source (NULL: none), for what it writes */
    size_t src_len;
    char what[640];
};

static const char *builtin_name(enum chat_template t)
{
    switch (t) {
    case CHAT_LLAMA3: return "Llama 3";
    case CHAT_LLAMA2: return "Llama 2";
    case CHAT_MISTRAL: return "Mistral";
    case CHAT_DEEPSEEK_R1: return "DeepSeek R1";
    default: return "ChatML";
    }
}

static char *token_text(const tokenizer *t, int32_t id)
{
    if (!t || id < 0)
        return NULL;
    size_t n = tokenizer_piece(t, id, true, NULL, 0);
    char *p = malloc(n + 1);
    if (p) {
        tokenizer_piece(t, id, true, p, n);
        p[n] = '\0';
    }
    return p;
}

chat_format *chat_format_load(const gguf_file *f, const tokenizer *t, const char *src, size_t len,
                              char *err, size_t errlen)
{
    chat_format *cf = calloc(1, sizeof *cf);
    if (!cf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    jinja_error je;
    if (src) {
        if (!(cf->jinja = jinja_parse(src, len, &je))) {
            snprintf(err, errlen, "chat template: %s", je.msg);
            free(cf);
            return NULL;
        }
        snprintf(cf->what, sizeof cf->what, "the chat template given");
        cf->src = strndup(src, len);
        cf->src_len = cf->src ? len : 0;
    } else {
        const gguf_kv *kv = f ? gguf_find(f, "tokenizer.chat_template") : NULL;
        if (kv && kv->type == GGUF_STRING && (cf->jinja = jinja_parse(kv->v.str.ptr, kv->v.str.len, &je))) {
            snprintf(cf->what, sizeof cf->what, "the model's chat template");
            cf->src = strndup(kv->v.str.ptr, kv->v.str.len);
            cf->src_len = cf->src ? kv->v.str.len : 0;
        } else {
            /* a template this interpreter cannot read still names its format */
            cf->builtin = chat_template_detect(f, &cf->warned);
            if (kv && kv->type == GGUF_STRING)
                snprintf(cf->what, sizeof cf->what, "built-in %s format (the model's template: %.500s)",
                         builtin_name(cf->builtin), je.msg);
            else
                snprintf(cf->what, sizeof cf->what, "built-in %s format (the model has no template)",
                         builtin_name(cf->builtin));
        }
    }
    cf->bos = token_text(t, t ? tokenizer_bos(t) : -1);
    cf->eos = token_text(t, t ? tokenizer_eos(t) : -1);
    return cf;
}

void chat_format_free(chat_format *cf)
{
    if (!cf)
        return;
    jinja_free(cf->jinja);
    free(cf->src);
    free(cf->bos);
    free(cf->eos);
    free(cf);
}

const char *chat_format_describe(const chat_format *cf, bool *warned)
{
    if (warned)
        *warned = cf->warned;
    return cf->what;
}

static chat_msg *builtin_msgs(const cJSON *vars, int *n);

/* The built-in format's rendering of vars' messages (role and text content). */
static char *apply_builtin(const chat_format *cf, const cJSON *vars, size_t *len, jinja_error *err)
{
    int n;
    chat_msg *m = builtin_msgs(vars, &n);
    bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vars, "add_generation_prompt"));
    char *text = m ? chat_render(cf->builtin, m, n, gen) : NULL;
    free(m);
    if (!text)
        snprintf(err->msg, sizeof err->msg, "out of memory");
    else
        *len = strlen(text);
    return text;
}

/* chat_format_apply, and with a Jinja template the marks of the bytes that came from the
 * messages and tools (jinja_render_marked; NULL plain: not wanted). */
static char *apply(const chat_format *cf, const cJSON *vars, time_t now, size_t *len, uint8_t **plain,
                   jinja_error *err)
{
    *err = (jinja_error){0};
    if (!cJSON_IsObject(vars)) {
        snprintf(err->msg, sizeof err->msg, "the variables are not a JSON object");
        return NULL;
    }
    if (!cf->jinja)
        return apply_builtin(cf, vars, len, err);
    cJSON *all = cJSON_Duplicate(vars, true);
    bool ok = all != NULL;
    if (ok && cf->bos && !cJSON_HasObjectItem(all, "bos_token"))
        ok = cJSON_AddStringToObject(all, "bos_token", cf->bos) != NULL;
    if (ok && cf->eos && !cJSON_HasObjectItem(all, "eos_token"))
        ok = cJSON_AddStringToObject(all, "eos_token", cf->eos) != NULL;
    static const char *const user_text[] = {"messages", "tools", NULL};
    char *text = ok ? jinja_render_marked(cf->jinja, all, user_text, now, len, plain, err) : NULL;
    if (!ok)
        snprintf(err->msg, sizeof err->msg, "out of memory");
    cJSON_Delete(all);
    return text;
}

char *chat_format_apply(const chat_format *cf, const cJSON *vars, time_t now, size_t *len,
                        jinja_error *err)
{
    return apply(cf, vars, now, len, NULL, err);
}

/* {"messages": [{"role", "content"}...], "add_generation_prompt": add_assistant} */
static cJSON *conversation(const chat_msg *msgs, int n, bool add_assistant)
{
    cJSON *vars = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(vars, "messages");
    bool ok = arr && cJSON_AddBoolToObject(vars, "add_generation_prompt", add_assistant);
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        ok = m && cJSON_AddItemToArray(arr, m) && cJSON_AddStringToObject(m, "role", msgs[i].role) &&
             cJSON_AddStringToObject(m, "content", msgs[i].content);
    }
    if (!ok) {
        cJSON_Delete(vars);
        return NULL;
    }
    return vars;
}

/* The built-in format's messages from vars: role and text content (NULL: out of memory). */
static chat_msg *builtin_msgs(const cJSON *vars, int *n)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(vars, "messages");
    chat_msg *m = calloc((size_t)cJSON_GetArraySize(msgs) + 1, sizeof *m);
    int k = 0;
    for (const cJSON *e = m && cJSON_IsArray(msgs) ? msgs->child : NULL; e; e = e->next, k++) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "role"));
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "content"));
        m[k].role = role ? role : "user";
        m[k].content = content ? content : "";
    }
    *n = k;
    return m;
}

int chat_format_tokenize_vars(const chat_format *cf, const tokenizer *t, const cJSON *vars,
                              int32_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cf->jinja) {
        int n;
        chat_msg *m = builtin_msgs(vars, &n);
        if (!m)
            return TOK_ERR_NOMEM;
        bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vars, "add_generation_prompt"));
        int rc = chat_tokenize(t, cf->builtin, m, n, gen, out);
        free(m);
        return rc;
    }
    jinja_error je;
    size_t len = 0;
    uint8_t *plain = NULL;
    char *text = apply(cf, vars, time(NULL), &len, &plain, &je);
    if (!text) {
        snprintf(err, errlen, "chat template: %s", je.msg);
        return CHAT_ERR_TEMPLATE;
    }
    /* Templates that write bos_token themselves (Llama 3's) must not get a second one. The
     * template's control-token text becomes control tokens; the messages' contents stay plain
     * text, so a user typing "<|eot_id|>" cannot end a turn. */
    bool has_bos = cf->bos && *cf->bos && !strncmp(text, cf->bos, strlen(cf->bos));
    int rc = tokenizer_encode_marked(t, text, len, !has_bos, plain, out);
    free(text);
    free(plain);
    return rc;
}

int chat_format_tokenize(const chat_format *cf, const tokenizer *t, const chat_msg *msgs, int n,
                         bool add_assistant, int32_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cf->jinja)
        return chat_tokenize(t, cf->builtin, msgs, n, add_assistant, out);
    cJSON *vars = conversation(msgs, n, add_assistant);
    if (!vars)
        return TOK_ERR_NOMEM;
    int rc = chat_format_tokenize_vars(cf, t, vars, out, err, errlen);
    cJSON_Delete(vars);
    return rc;
}

const char *chat_format_source(const chat_format *cf, size_t *len)
{
    *len = cf->src_len;
    return cf->src;
}
