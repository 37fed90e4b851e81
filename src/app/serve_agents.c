/* serve_agents.c — prompts with tools, constrained replies and the reply's format for
 * `prima serve` (serve_agents.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app/serve_agents.h"
#include "text/chat_format.h"
#include "text/json_schema.h"
#include "text/toolcall.h"

/* The model's tool-call format: from its template, else its architecture and name. Also
 * whether the template knows <think> (Qwen3, DeepSeek-R1, QwQ...): such a model may open any
 * reply with reasoning of its own. */
static enum tool_format model_format(serve_engine *se)
{
    if (!se->tool_fmt_known) {
        size_t len = 0;
        const char *src = chat_format_source(se->r->chat, &len);
        se->thinks = src && memmem(src, len, "<think>", 7);
        char arch[64] = "", name[256] = "";
        gguf_get_str(se->r->m->file, "general.architecture", arch, sizeof arch);
        gguf_get_str(se->r->m->file, "general.name", name, sizeof name);
        se->tool_fmt = tool_format_detect(src, len, arch, name);
        se->tool_fmt_known = true;
    }
    return se->tool_fmt;
}

/* A completion's prompt given as token ids: checked against the vocabulary. */
static int prompt_ids(serve_engine *se, const srv_request *q, int32_t **toks, char *err,
                      size_t errlen)
{
    for (int i = 0; i < q->n_prompt_toks; i++)
        if (q->prompt_toks[i] >= se->r->m->hp.n_vocab) {
            snprintf(err, errlen, "token %d of the prompt, %d, is not in the vocabulary (%d "
                     "tokens)", i, (int)q->prompt_toks[i], se->r->m->hp.n_vocab);
            return CHAT_ERR_TEMPLATE;
        }
    *toks = malloc(sizeof **toks * (size_t)q->n_prompt_toks);
    if (!*toks)
        return TOK_ERR_NOMEM;
    memcpy(*toks, q->prompt_toks, sizeof **toks * (size_t)q->n_prompt_toks);
    return q->n_prompt_toks;
}

int serve_prompt(serve_engine *se, const srv_request *q, int32_t **toks, char *err, size_t errlen)
{
    if (q->kind != SRV_CHAT && q->prompt_toks)
        return prompt_ids(se, q, toks, err, errlen);
    if (q->kind != SRV_CHAT)
        return tokenizer_encode(se->r->tk, q->prompt, strlen(q->prompt), true, true, toks);
    if (!q->chat_json) /* a request of roles and texts only */
        return chat_format_tokenize(se->r->chat, se->r->tk, q->msgs, q->n_msgs, true, toks, err,
                                    errlen);
    /* the template sees the conversation as Hugging Face's apply_chat_template is given it */
    cJSON *vars = cJSON_CreateObject();
    bool ok = vars && cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)q->chat_json) &&
              cJSON_AddBoolToObject(vars, "add_generation_prompt", true);
    if (ok && q->tools && q->tool_choice != SRV_TOOLS_NONE)
        ok = cJSON_AddItemReferenceToObject(vars, "tools", (cJSON *)q->tools);
    int n = ok ? chat_format_tokenize_vars(se->r->chat, se->r->tk, vars, toks, err, errlen)
               : TOK_ERR_NOMEM;
    cJSON_Delete(vars);
    return n;
}

bool serve_reply_format(serve_engine *se, srv_job *job, const int32_t *toks, int n)
{
    const srv_request *q = srv_job_request(job);
    if (q->kind != SRV_CHAT)
        return false;
    /* the prompt's last tokens as text: does the assistant's turn open in <think>? */
    char tail[256];
    size_t len = 0;
    for (int i = n > 4 ? n - 4 : 0; i < n; i++) {
        size_t k = tokenizer_piece(se->r->tk, toks[i], true, tail + len, sizeof tail - 1 - len);
        len += k < sizeof tail - 1 - len ? k : sizeof tail - 1 - len;
    }
    while (len && (tail[len - 1] == ' ' || tail[len - 1] == '\n'))
        len--;
    tail[len] = '\0';
    bool think = len >= 7 && !strcmp(tail + len - 7, "<think>");
    enum tool_format f = model_format(se);
    bool tools = q->tools && q->tool_choice != SRV_TOOLS_NONE;
    if (!tools && !think && !se->thinks && f != TOOL_GPTOSS)
        return false;
    srv_job_parse_reply(job, f, think);
    return true;
}

int serve_constraint_open(serve_engine *se, const srv_request *q, serve_constraint *c,
                          const char **param, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char *src = NULL;
    const char *text = NULL;
    char why[400] = "";
    bool call = q->tools && (q->tool_choice == SRV_TOOLS_REQUIRED || q->tool_choice == SRV_TOOLS_NAMED);
    if (call) {
        *param = "tools";
        src = tool_call_grammar(model_format(se), q->tools,
                                q->tool_choice == SRV_TOOLS_NAMED ? q->tool_name : NULL,
                                q->parallel_tool_calls, why, sizeof why);
    } else if (q->out == SRV_OUT_GRAMMAR) {
        *param = "grammar";
        text = q->grammar;
    } else if (q->out == SRV_OUT_JSON) {
        *param = q->out_param ? q->out_param : "response_format";
        text = json_object_grammar();
    } else if (q->out == SRV_OUT_SCHEMA) {
        *param = q->out_param ? q->out_param : "response_format";
        src = json_schema_grammar(q->schema, NULL, why, sizeof why);
    } else {
        return 0;
    }
    if (!text && !src) {
        snprintf(err, errlen, "%s: %s", *param, why);
        return -1;
    }
    if (!text)
        text = src;
    c->g = grammar_parse(text, strlen(text), why, sizeof why);
    free(src);
    if (!c->g) {
        snprintf(err, errlen, "%s: %s", *param, why);
        return -1;
    }
    int n = se->r->m->hp.n_vocab;
    if (!se->gv)
        se->gv = grammar_vocab_new(se->r->tk);
    c->st = grammar_state_new(c->g);
    c->allowed = malloc((size_t)n);
    c->logits = malloc(sizeof *c->logits * (size_t)n);
    if (!se->gv || !c->st || !c->allowed || !c->logits || grammar_vocab_size(se->gv) > n) {
        serve_constraint_close(c);
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    return 0;
}

const float *serve_constraint_mask(serve_engine *se, serve_constraint *c, const float *logits,
                                   char *err, size_t errlen)
{
    if (!c->st)
        return logits;
    int k = grammar_state_mask(c->st, se->gv, c->allowed);
    if (k <= 0) {
        snprintf(err, errlen, k < 0 ? "out of memory"
                 : "the output constraint allows no token of this vocabulary here");
        return NULL;
    }
    /* tokens past the vocabulary (padding rows of the output matrix) are never allowed */
    int n = se->r->m->hp.n_vocab, nv = grammar_vocab_size(se->gv);
    for (int i = 0; i < n; i++)
        c->logits[i] = i < nv && c->allowed[i] ? logits[i] : -INFINITY;
    return c->logits;
}

bool serve_constraint_take(serve_engine *se, serve_constraint *c, int32_t tok)
{
    if (!c->st)
        return false;
    /* the mask allowed tok, so the grammar takes it */
    grammar_state_accept_token(c->st, se->gv, tok);
    return grammar_state_complete(c->st) && !grammar_state_open(c->st);
}

void serve_constraint_close(serve_constraint *c)
{
    grammar_state_free(c->st);
    grammar_free(c->g);
    free(c->allowed);
    free(c->logits);
    memset(c, 0, sizeof *c);
}
