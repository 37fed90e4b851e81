/* tok_spm.c — SentencePiece-style segmentation ("llama" vocabularies).
 *
 * Spaces become U+2581, the text is split into UTF-8 characters, and adjacent symbols are
 * merged greedily: always the pair whose concatenation is the vocabulary token with the highest
 * score (leftmost on ties), until no adjacent pair forms a token. A final symbol that is not a
 * token is written as byte tokens (<0xNN>). */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

typedef struct spm_session {
    const tokenizer *t;
    const char *text;
    tok_symbol *sym;
    tok_heap heap;
    bool oom;
} spm_session;

static void try_merge(spm_session *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    uint32_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = tok_lookup(s->t, s->text + s->sym[left].start, size);
    if (id < 0 || id >= s->t->n_vocab)
        return;
    tok_bigram b = {-(double)s->t->score[id], left, right, size};
    if (!tok_heap_push(&s->heap, b))
        s->oom = true;
}

/* ' ' -> U+2581, with one more in front when the text gets the space prefix. */
static char *escape_spaces(const char *text, size_t len, bool space_prefix, size_t *out_len)
{
    size_t n = len + (space_prefix ? 3 : 0);
    for (size_t i = 0; i < len; i++)
        n += text[i] == ' ' ? 2 : 0;
    char *e = malloc(n ? n : 1);
    if (!e)
        return NULL;
    size_t k = 0;
    if (space_prefix) {
        memcpy(e, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            e[k++] = text[i];
        }
    }
    *out_len = n;
    return e;
}

void spm_encode(const tokenizer *t, const char *text, size_t len, bool space_prefix, tok_vec *out)
{
    size_t n;
    char *esc = escape_spaces(text, len, space_prefix, &n);
    tok_symbol *sym = esc ? malloc(sizeof *sym * (n ? n : 1)) : NULL;
    if (!sym) {
        free(esc);
        out->oom = true;
        return;
    }
    int32_t n_sym = 0;
    for (size_t i = 0; i < n; n_sym++) {
        size_t cl = utf8_seq_len((uint8_t)esc[i]);
        if (cl > n - i)
            cl = n - i;
        sym[n_sym] = (tok_symbol){n_sym - 1, n_sym + 1, (uint32_t)i, (uint32_t)cl, -1};
        i += cl;
    }
    if (n_sym)
        sym[n_sym - 1].next = -1;

    spm_session s = {t, esc, sym, {0}, false};
    for (int32_t i = 1; i < n_sym; i++)
        try_merge(&s, i - 1, i);
    while (s.heap.n && !s.oom) {
        tok_bigram b = tok_heap_pop(&s.heap);
        tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (!l->n || !r->n || l->n + r->n != b.size)
            continue;   /* one side changed since this pair was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        try_merge(&s, l->prev, b.left);
        try_merge(&s, b.left, l->next);
    }

    for (int32_t i = n_sym ? 0 : -1; i >= 0 && !s.oom; i = sym[i].next) {
        int32_t id = tok_lookup(t, esc + sym[i].start, sym[i].n);
        if (id >= 0 && id < t->n_vocab) {
            tok_vec_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < sym[i].n; k++) {
            int32_t bt = t->byte_token[(uint8_t)esc[sym[i].start + k]];
            if (bt >= 0)
                tok_vec_push(out, bt);
        }
    }
    if (s.oom)
        out->oom = true;
    free(s.heap.v);
    free(sym);
    free(esc);
}
