#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fidelity.h"
#include "support/greedy.h"

float *greedy_logits(session *s, const int32_t *prompt, int n, int steps, char *err,
                     size_t errlen)
{
    const size_t nv = (size_t)s->m->hp.n_vocab;
    float *out = malloc(sizeof(float) * nv * (size_t)(steps + 1));
    if (!out) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (session_eval(s, prompt, n, NULL, err, errlen))
        goto fail;
    memcpy(out, s->logits, sizeof(float) * nv);
    for (int g = 0; g < steps; g++) {
        int32_t t = fid_argmax(s->logits, (int)nv);
        if (session_eval(s, &t, 1, NULL, err, errlen))
            goto fail;
        memcpy(out + nv * (size_t)(g + 1), s->logits, sizeof(float) * nv);
    }
    return out;
fail:
    free(out);
    return NULL;
}

void greedy_step(session *const *ss, int count, int32_t *next, const int32_t **tok, int *n)
{
    for (int i = 0; i < count; i++) {
        next[i] = fid_argmax(ss[i]->logits, ss[i]->m->hp.n_vocab);
        tok[i] = &next[i];
        n[i] = 1;
    }
}
