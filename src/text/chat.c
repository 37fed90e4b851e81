/* chat.c — recognising the chat template a model ships (tokenizer.chat_template, a Jinja
 * program) by its distinctive markers, and rendering a conversation in that format.
 *
 * Rendered text never starts with BOS: the tokenizer adds it (add_special) when the vocabulary
 * asks for it. The renderer marks which bytes came from the messages' contents, so that
 * chat_tokenize turns the template's control-token text into control tokens and leaves a
 * message's own (a user typing "<|im_end|>") plain text. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util/strbuf.h"

#define DS_USER "<\xEF\xBD\x9CUser\xEF\xBD\x9C>"            /* <｜User｜> */
#define DS_ASSISTANT "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>" /* <｜Assistant｜> */
#define DS_EOS "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"

static bool contains(gguf_str s, const char *needle)
{
    return memmem(s.ptr, s.len, needle, strlen(needle)) != NULL;
}

enum chat_template chat_template_detect(const gguf_file *f, bool *warned)
{
    *warned = false;
    const gguf_kv *kv = gguf_find(f, "tokenizer.chat_template");
    if (kv && kv->type == GGUF_STRING) {
        gguf_str s = kv->v.str;
        if (contains(s, "<|start_header_id|>") && contains(s, "<|end_header_id|>"))
            return CHAT_LLAMA3;
        if (contains(s, "<|im_start|>"))
            return CHAT_CHATML;
        if (contains(s, DS_USER) && contains(s, DS_ASSISTANT))
            return CHAT_DEEPSEEK_R1;
        if (contains(s, "<start_of_turn>"))
            return CHAT_GEMMA;
        if (contains(s, "[INST]"))
            return contains(s, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    }
    *warned = true;
    return CHAT_CHATML;
}

/* The text so far and, byte for byte, whether it is a message's content (1) or the
 * template's (0); once an append fails, oom stays set and later appends are skipped. */
typedef struct sbuf {
    strbuf s, content;
    bool oom;
} sbuf;

static void add_marked(sbuf *b, const char *s, size_t n, bool content)
{
    if (b->oom)
        return;
    size_t at = b->content.len;
    if (strbuf_add(&b->s, s, n) || strbuf_add(&b->content, s, n)) {
        b->oom = true;
        return;
    }
    memset(b->content.p + at, content, n);
}

static void add_n(sbuf *b, const char *s, size_t n)
{
    add_marked(b, s, n, false);
}

/* A message's content, as it is. */
static void add_content(sbuf *b, const char *s)
{
    add_marked(b, s, strlen(s), true);
}

/* Appends the NULL-terminated list of strings. */
static void add(sbuf *b, ...)
{
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));)
        add_n(b, s, strlen(s));
    va_end(ap);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Content without leading and trailing whitespace (what the templates' `trim` does). */
static void add_trimmed(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    while (n && is_space(s[n - 1]))
        n--;
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    add_marked(b, s, n, true);
}

static bool is_role(const chat_msg *m, const char *role)
{
    return !strcmp(m->role, role);
}

/* The system messages, joined, for the formats that have no turn of their own for them. */
static void add_system(sbuf *b, const chat_msg *msgs, int n, const char *sep)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!is_role(&msgs[i], "system"))
            continue;
        if (any)
            add(b, "\n", NULL);
        add_trimmed(b, msgs[i].content);
        any = true;
    }
    if (any)
        add(b, sep, NULL);
}

/* <|im_start|>role\ncontent<|im_end|>\n */
static void render_chatml(sbuf *b, const chat_msg *msgs, int n, bool add_assistant)
{
    for (int i = 0; i < n; i++) {
        add(b, "<|im_start|>", msgs[i].role, "\n", NULL);
        add_content(b, msgs[i].content);
        add(b, "<|im_end|>\n", NULL);
    }
    if (add_assistant)
        add(b, "<|im_start|>assistant\n", NULL);
}

/* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
static void render_llama3(sbuf *b, const chat_msg *msgs, int n, bool add_assistant)
{
    for (int i = 0; i < n; i++) {
        add(b, "<|start_header_id|>", msgs[i].role, "<|end_header_id|>\n\n", NULL);
        add_trimmed(b, msgs[i].content);
        add(b, "<|eot_id|>", NULL);
    }
    if (add_assistant)
        add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
}

/* [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST]
 * The system prompt goes into the first instruction; the assistant turn follows [/INST]. */
static void render_llama2(sbuf *b, const chat_msg *msgs, int n)
{
    bool first = true, open = false;
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system"))
            continue;
        if (is_role(&msgs[i], "assistant")) {
            if (open)
                add(b, " ", NULL);
            add_trimmed(b, msgs[i].content);
            add(b, " </s>", NULL);
            open = false;
            continue;
        }
        add(b, first ? "[INST] " : "<s>[INST] ", NULL);
        if (first) {
            sbuf sys = {0};
            add_system(&sys, msgs, n, "");
            if (sys.s.len) {
                add(b, "<<SYS>>\n", NULL);
                for (size_t k = 0; k < sys.s.len; k++)
                    add_marked(b, sys.s.p + k, 1, sys.content.p[k]);
                add(b, "\n<</SYS>>\n\n", NULL);
            }
            b->oom |= sys.oom;
            free(sys.s.p);
            free(sys.content.p);
        }
        add_trimmed(b, msgs[i].content);
        add(b, " [/INST]", NULL);
        first = false;
        open = true;
    }
}

/* [INST] user [/INST]answer</s>[INST] user [/INST] (Mistral 7B Instruct); a system prompt is
 * put before the first instruction's text. */
static void render_mistral(sbuf *b, const chat_msg *msgs, int n)
{
    bool first = true;
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system"))
            continue;
        if (is_role(&msgs[i], "assistant")) {
            add_trimmed(b, msgs[i].content);
            add(b, "</s>", NULL);
            continue;
        }
        add(b, "[INST] ", NULL);
        if (first)
            add_system(b, msgs, n, "\n\n");
        add_trimmed(b, msgs[i].content);
        add(b, " [/INST]", NULL);
        first = false;
    }
}

/* system<｜User｜>user<｜Assistant｜>answer<｜end▁of▁sentence｜>...; earlier answers lose
 * their reasoning (the text up to </think>), as the model's own template does. */
static void render_deepseek_r1(sbuf *b, const chat_msg *msgs, int n, bool add_assistant)
{
    add_system(b, msgs, n, "");
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system"))
            continue;
        if (is_role(&msgs[i], "assistant")) {
            const char *c = msgs[i].content;
            const char *end_think = strstr(c, "</think>");
            add(b, DS_ASSISTANT, NULL);
            add_trimmed(b, end_think ? end_think + strlen("</think>") : c);
            add(b, DS_EOS, NULL);
        } else {
            add(b, DS_USER, NULL);
            add_content(b, msgs[i].content);
        }
    }
    if (add_assistant)
        add(b, DS_ASSISTANT, NULL);
}

/* <start_of_turn>user\nsystem\n\nuser<end_of_turn>\n<start_of_turn>model\nanswer<end_of_turn>\n
 * (Gemma 3): the system prompt opens the first user turn, the assistant is "model", every
 * message trimmed. */
static void render_gemma(sbuf *b, const chat_msg *msgs, int n, bool add_assistant)
{
    bool first = true;
    for (int i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system"))
            continue;
        bool model = is_role(&msgs[i], "assistant");
        add(b, "<start_of_turn>", model ? "model" : msgs[i].role, "\n", NULL);
        if (first && !model)
            add_system(b, msgs, n, "\n\n");
        first = false;
        add_trimmed(b, msgs[i].content);
        add(b, "<end_of_turn>\n", NULL);
    }
    if (add_assistant)
        add(b, "<start_of_turn>model\n", NULL);
}

/* The rendered text, and in *content (when not NULL) its marks. */
static char *render(enum chat_template tpl, const chat_msg *msgs, int n, bool add_assistant,
                    char **content)
{
    sbuf b = {0};
    add_n(&b, "", 0);
    switch (tpl) {
    case CHAT_CHATML: render_chatml(&b, msgs, n, add_assistant); break;
    case CHAT_LLAMA3: render_llama3(&b, msgs, n, add_assistant); break;
    case CHAT_LLAMA2: render_llama2(&b, msgs, n); break;
    case CHAT_MISTRAL: render_mistral(&b, msgs, n); break;
    case CHAT_DEEPSEEK_R1: render_deepseek_r1(&b, msgs, n, add_assistant); break;
    case CHAT_GEMMA: render_gemma(&b, msgs, n, add_assistant); break;
    }
    if (b.oom || !content) {
        free(b.content.p);
        b.content.p = NULL;
    }
    if (b.oom) {
        free(b.s.p);
        return NULL;
    }
    if (content)
        *content = b.content.p;
    return b.s.p;
}

char *chat_render(enum chat_template tpl, const chat_msg *msgs, int n, bool add_assistant)
{
    return render(tpl, msgs, n, add_assistant, NULL);
}

int chat_tokenize(const tokenizer *t, enum chat_template tpl, const chat_msg *msgs, int n,
                  bool add_assistant, int32_t **out)
{
    *out = NULL;
    char *content = NULL;
    char *text = render(tpl, msgs, n, add_assistant, &content);
    if (!text)
        return TOK_ERR_NOMEM;
    int rc = tokenizer_encode_marked(t, text, strlen(text), true, (const uint8_t *)content, out);
    free(text);
    free(content);
    return rc;
}
