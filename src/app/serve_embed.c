/* serve_embed.c — `prima serve`'s embeddings: each input tokenized (a text as a completion's
 * prompt is, but its control-token text stays plain text), evaluated in a free slot's sequence
 * and pooled (session_embed: the mean of the last hidden states, unit length). */
#include <stdlib.h>
#include <string.h>

#include "app/serve_engine.h"

static void refuse(srv_result *res, int status, const char *param, const char *code,
                   const char *msg)
{
    res->finish = SRV_FINISH_ERROR;
    res->status = status;
    res->error_param = param;
    res->error_code = code;
    snprintf(res->error, sizeof res->error, "%s", msg);
}

/* Input i's tokens into *toks (malloc'd): the count, or 0 with res refused. */
static int input_tokens(serve_engine *se, const srv_request *q, int i, int32_t **toks,
                        srv_result *res)
{
    const srv_input *in = &q->inputs[i];
    char msg[300];
    int n;
    if (in->text) {
        n = tokenizer_encode(se->r->tk, in->text, strlen(in->text), true, false, toks);
        if (n < 0) {
            snprintf(msg, sizeof msg, "input %d: cannot tokenize it: %s", i, tokenizer_strerror(n));
            refuse(res, n == TOK_ERR_NOMEM ? 500 : 400, "input", NULL, msg);
            return 0;
        }
    } else {
        for (int k = 0; k < in->n_toks; k++)
            if (in->toks[k] >= se->r->m->hp.n_vocab) {
                snprintf(msg, sizeof msg, "input %d: token %d is not in the vocabulary (%d "
                         "tokens)", i, (int)in->toks[k], se->r->m->hp.n_vocab);
                refuse(res, 400, "input", NULL, msg);
                return 0;
            }
        n = in->n_toks;
        *toks = malloc(sizeof **toks * (size_t)n);
        if (!*toks) {
            refuse(res, 500, NULL, NULL, "out of memory");
            return 0;
        }
        memcpy(*toks, in->toks, sizeof **toks * (size_t)n);
    }
    if (n == 0)
        refuse(res, 400, "input", NULL, "an input has no tokens");
    if (n > se->r->n_ctx && q->truncate)
        n = se->r->n_ctx; /* Ollama's truncate: the first tokens that fit */
    else if (n > se->r->n_ctx) {
        snprintf(msg, sizeof msg, "input %d has %d tokens; the context holds %d", i, n,
                 se->r->n_ctx);
        refuse(res, 400, "input", "context_length_exceeded", msg);
        n = 0;
    }
    if (!n) {
        free(*toks);
        *toks = NULL;
    }
    return n;
}

bool serve_embed(serve_engine *se, srv *sv, srv_job *job, session *s, char *err, size_t errlen)
{
    const srv_request *q = srv_job_request(job);
    const int n_embd = se->r->m->hp.n_embd;
    srv_result res = {.finish = SRV_FINISH_STOP};
    bool ok = true;
    if (q->dimensions && q->dimensions != n_embd) {
        char msg[128];
        snprintf(msg, sizeof msg, "'dimensions' %d: this model's embeddings have %d", q->dimensions,
                 n_embd);
        refuse(&res, 400, "dimensions", NULL, msg);
    }
    float *v = malloc(sizeof *v * (size_t)n_embd);
    if (!v)
        refuse(&res, 500, NULL, NULL, "out of memory");
    double t0 = se_now();
    for (int i = 0; res.finish != SRV_FINISH_ERROR && i < q->n_inputs; i++) {
        int32_t *toks = NULL;
        int n = input_tokens(se, q, i, &toks, &res);
        if (!n)
            break;
        session_truncate(s, 0);
        if (session_embed(s, toks, n, v, err, errlen)) {
            refuse(&res, 500, NULL, NULL, err);
            ok = !se->ring; /* a ring's failure ends its session; a NaN on one device does not */
        } else {
            srv_job_embedding(job, i, v, n_embd);
            res.prompt_tokens += n;
        }
        free(toks);
    }
    session_truncate(s, 0);
    free(v);
    res.prefill_s = se_now() - t0;
    srv_job_finish(sv, job, &res);
    return ok;
}
