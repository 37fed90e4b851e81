/* tokenizer.c — vocabulary loading, special tokens, encode dispatch, pieces and streaming
 * detokenization. The two segmentation algorithms live in tok_spm.c and tok_bpe.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "util/strbuf.h"

/* Inputs longer than this are refused: symbol indices are 32-bit, and the SPM segmenter's text
 * (spaces written as 3-byte U+2581) can be three times as long as the input. */

/* ---- interned texts ---- */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;          /* FNV-1a, folded to 32 bits */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static tok_slot *find_slot(const tokenizer *t, const char *s, size_t n, uint32_t h)
{
    for (uint32_t i = h & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        tok_slot *sl = &t->slots[i];
        if (sl->id < 0)
            return sl;
        if (sl->hash == h && sl->len == n && !memcmp(tok_text(t, sl->id), s, n))
            return sl;
    }
}

int32_t tok_lookup(const tokenizer *t, const char *s, size_t n)
{
    if (!t->slots)
        return -1;
    return find_slot(t, s, n, hash_bytes(s, n))->id;
}

static bool grow_slots(tokenizer *t)
{
    uint32_t cap = t->slots ? (t->slot_mask + 1) * 2 : 1024;
    tok_slot *slots = malloc(sizeof *slots * cap);
    if (!slots)
        return false;
    for (uint32_t i = 0; i < cap; i++)
        slots[i].id = -1;
    tok_slot *old = t->slots;
    uint32_t old_cap = old ? t->slot_mask + 1 : 0;
    t->slots = slots;
    t->slot_mask = cap - 1;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old[i].id < 0)
            continue;
        uint32_t j = old[i].hash & t->slot_mask;
        while (slots[j].id >= 0)
            j = (j + 1) & t->slot_mask;
        slots[j] = old[i];
    }
    free(old);
    return true;
}

int32_t tok_intern(tokenizer *t, const char *s, size_t n, bool dup_wins)
{
    if (n > UINT32_MAX - 1 || t->n_ids == INT32_MAX)
        return -1;
    if ((t->n_slots_used + 1) * 2 > (t->slots ? t->slot_mask + 1 : 0) && !grow_slots(t))
        return -1;
    uint32_t h = hash_bytes(s, n);
    tok_slot *sl = find_slot(t, s, n, h);
    if (sl->id >= 0 && !dup_wins)
        return sl->id;
    if (t->n_ids == t->cap_ids) {
        int32_t cap = t->cap_ids ? (t->cap_ids > INT32_MAX / 2 ? INT32_MAX : t->cap_ids * 2) : 1024;
        uint32_t *off = realloc(t->text_off, sizeof *off * (size_t)cap);
        if (off)
            t->text_off = off;
        uint32_t *len = realloc(t->text_len, sizeof *len * (size_t)cap);
        if (len)
            t->text_len = len;
        if (!off || !len)
            return -1;
        t->cap_ids = cap;
    }
    if (strbuf_reserve(&t->arena, &t->arena_cap, t->arena_len, n, 4096))
        return -1;
    if (t->arena_len > UINT32_MAX - n - 1)
        return -1;
    int32_t id = t->n_ids++;
    t->text_off[id] = (uint32_t)t->arena_len;
    t->text_len[id] = (uint32_t)n;
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0';
    t->arena_len += n + 1;
    if (sl->id < 0)
        t->n_slots_used++;
    sl->hash = h;
    sl->len = (uint32_t)n;
    sl->id = id;
    return id;
}

/* ---- small containers shared with the segmenters ---- */

void tok_vec_push(tok_vec *out, int32_t id)
{
    if (out->oom)
        return;
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 64;
        int32_t *v = realloc(out->v, sizeof *v * cap);
        if (!v) {
            out->oom = true;
            return;
        }
        out->v = v;
        out->cap = cap;
    }
    out->v[out->n++] = id;
}

static bool bigram_before(const tok_bigram *a, const tok_bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

bool tok_heap_push(tok_heap *h, tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok_bigram *v = realloc(h->v, sizeof *v * cap);
        if (!v)
            return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && bigram_before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return true;
}

tok_bigram tok_heap_pop(tok_heap *h)
{
    tok_bigram top = h->v[0];
    tok_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* ---- loading ---- */

/* A special-token id from the file, kept only when it names a token. */
static int32_t special_id(const gguf_file *f, const char *key, int32_t def, int32_t n_vocab)
{
    int64_t v = gguf_get_int(f, key, -1);
    if (v < 0 || v >= n_vocab)
        return def < n_vocab ? def : -1;
    return (int32_t)v;
}

static void add_eog(tokenizer *t, int32_t id)
{
    if (id < 0 || t->n_eog == TOK_MAX_EOG)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    t->eog[t->n_eog++] = id;
}

/* Texts of end-of-turn / end-of-text tokens of common model families. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "<|EOT|>", "<|end_of_text|>", "<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>",   /* <｜end▁of▁sentence｜> */
};

/* End of generation: EOS, the EOT / EOM ids the file names, and tokens known by their text. */
static void find_eog(tokenizer *t, const gguf_file *f)
{
    add_eog(t, t->eos);
    add_eog(t, special_id(f, "tokenizer.ggml.eot_token_id", -1, t->n_vocab));
    add_eog(t, special_id(f, "tokenizer.ggml.eom_token_id", -1, t->n_vocab));
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++)
        add_eog(t, tokenizer_find(t, eog_texts[i]));
}

static bool is_special_type(uint8_t type)
{
    return type == TOK_CONTROL || type == TOK_USER_DEFINED || type == TOK_UNKNOWN;
}

static int32_t trie_child(const tokenizer *t, int32_t node, uint8_t byte)
{
    for (int32_t c = t->trie[node].child; c >= 0; c = t->trie[c].sibling)
        if (t->trie[c].byte == byte)
            return c;
    return -1;
}

/* Trie of the texts that can be matched as whole tokens in raw text; node 0 is the root. */
static int build_trie(tokenizer *t)
{
    size_t n_nodes = 1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->type[id]))
            n_nodes += t->text_len[id];
    if (n_nodes > INT32_MAX)
        return -1;
    t->trie = malloc(sizeof *t->trie * n_nodes);
    if (!t->trie)
        return -1;
    t->trie[0] = (trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!is_special_type(t->type[id]) || !t->text_len[id])
            continue;
        const uint8_t *s = (const uint8_t *)tok_text(t, id);
        int32_t node = 0;
        for (uint32_t i = 0; i < t->text_len[id]; i++) {
            int32_t c = trie_child(t, node, s[i]);
            if (c < 0) {
                c = t->n_trie++;
                t->trie[c] = (trie_node){-1, t->trie[node].child, -1, s[i]};
                t->trie[node].child = c;
            }
            node = c;
        }
        t->trie[node].token = id;   /* the last of duplicate texts wins, as in tok_lookup */
    }
    return 0;
}

static int load_vocab(tokenizer *t, const gguf_file *f, char *err, size_t errlen)
{
    const gguf_array *toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_STRING || toks->n == 0) {
        snprintf(err, errlen, "%s: tokenizer.ggml.tokens is missing or not a list of strings", f->path);
        return -1;
    }
    if (toks->n > INT32_MAX / 2) {
        snprintf(err, errlen, "%s: tokenizer.ggml.tokens has %llu entries (too many)", f->path,
                 (unsigned long long)toks->n);
        return -1;
    }
    const gguf_array *scores = gguf_get_arr(f, "tokenizer.ggml.scores");
    const gguf_array *types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    if (scores && (scores->n != toks->n || scores->type == GGUF_STRING || scores->type == GGUF_ARRAY)) {
        snprintf(err, errlen, "%s: tokenizer.ggml.scores is not %llu numbers", f->path,
                 (unsigned long long)toks->n);
        return -1;
    }
    if (types && (types->n != toks->n || types->type == GGUF_STRING || types->type == GGUF_ARRAY)) {
        snprintf(err, errlen, "%s: tokenizer.ggml.token_type is not %llu numbers", f->path,
                 (unsigned long long)toks->n);
        return -1;
    }
    t->n_vocab = (int32_t)toks->n;
    t->score = malloc(sizeof *t->score * toks->n);
    t->type = malloc(toks->n);
    size_t total = 0;
    for (uint64_t i = 0; i < toks->n; i++)
        total += toks->strs[i].len + 1;
    t->arena = malloc(total);
    if (!t->score || !t->type || !t->arena)
        goto oom;
    t->arena_cap = total;
    while ((t->slot_mask + 1) / 2 < toks->n)
        if (!grow_slots(t))
            goto oom;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (tok_intern(t, toks->strs[id].ptr, toks->strs[id].len, true) != id)
            goto oom;
        t->score[id] = scores ? (float)gguf_arr_float(scores, (uint64_t)id) : 0.0f;
        int64_t type = types ? gguf_arr_int(types, (uint64_t)id) : TOK_NORMAL;
        if (type < TOK_UNDEFINED || type > TOK_BYTE) {
            snprintf(err, errlen, "%s: token %d has type %lld (expected 0..6)", f->path, id, (long long)type);
            return -1;
        }
        t->type[id] = (uint8_t)type;
    }
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory loading %llu tokens", f->path, (unsigned long long)toks->n);
    return -1;
}

static void find_byte_tokens(tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = tokenizer_find(t, hex);
        if (id < 0) {   /* a vocabulary without byte tokens may hold the byte itself */
            char c = (char)b;
            id = tok_lookup(t, &c, 1);
        }
        t->byte_token[b] = id >= 0 && id < t->n_vocab ? id : t->unk;
    }
}

tokenizer *tokenizer_load(const gguf_file *f, char *err, size_t errlen)
{
    char model[32];
    if (!gguf_get_str(f, "tokenizer.ggml.model", model, sizeof model)) {
        snprintf(err, errlen, "%s: no tokenizer.ggml.model (the file has no vocabulary)", f->path);
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return NULL;
    }
    if (!strcmp(model, "llama")) {
        t->model = TOK_MODEL_SPM;
    } else if (!strcmp(model, "gpt2")) {
        t->model = TOK_MODEL_BPE;
    } else {
        snprintf(err, errlen, "%s: tokenizer model '%s' is not supported (llama and gpt2 are)", f->path, model);
        free(t);
        return NULL;
    }
    if (load_vocab(t, f, err, errlen) < 0)
        goto fail;

    bool spm = t->model == TOK_MODEL_SPM;
    t->bos = special_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, t->n_vocab);
    t->eos = special_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, t->n_vocab);
    t->unk = special_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, t->n_vocab);
    t->add_bos = spm;
    t->add_eos = false;
    t->add_space_prefix = spm;
    if (spm) {
        find_byte_tokens(t);
    } else if (bpe_load(t, f, err, errlen) < 0) {
        goto fail;
    }
    t->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", t->add_bos) && t->bos >= 0;
    t->add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", t->add_eos) && t->eos >= 0;
    t->add_space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    find_eog(t, f);
    if (build_trie(t) < 0) {
        snprintf(err, errlen, "%s: out of memory indexing special tokens", f->path);
        goto fail;
    }
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

void tokenizer_free(tokenizer *t)
{
    if (!t)
        return;
    if (t->model == TOK_MODEL_BPE)
        bpe_free(t);
    free(t->arena);
    free(t->text_off);
    free(t->text_len);
    free(t->score);
    free(t->type);
    free(t->slots);
    free(t->trie);
    free(t);
}

int tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos; }
bool tokenizer_add_eos(const tokenizer *t) { return t->add_eos; }

bool tokenizer_is_eog(const tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

int32_t tokenizer_find(const tokenizer *t, const char *text)
{
    int32_t id = tok_lookup(t, text, strlen(text));
    return id < t->n_vocab ? id : -1;
}

/* ---- encoding ---- */

typedef struct special_match {
    size_t pos;
    uint32_t len;
    int32_t token;
} special_match;

static int match_order(const void *pa, const void *pb)
{
    const special_match *a = pa, *b = pb;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    if (a->token != b->token)
        return a->token < b->token ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static int pos_order(const void *pa, const void *pb)
{
    const special_match *a = pa, *b = pb;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Finds the special tokens written in the text. Longer tokens take precedence, each token's
 * occurrences are taken left to right, and a later token only matches text no earlier one
 * took — the order in which the reference splits its fragments. Control tokens match with
 * parse_special, and only over bytes that plain (NULL: none) does not mark. Returns the accepted
 * matches sorted by position (count in *n), or -1 when out of memory. */
static int find_specials(const tokenizer *t, const char *text, size_t len, bool parse_special,
                         const uint8_t *plain, special_match **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (t->trie[0].child < 0)
        return 0;
    special_match *m = NULL;
    size_t nm = 0, cap = 0;
    for (size_t p = 0; p < len; p++) {
        int32_t node = 0;
        bool control = parse_special;   /* control tokens may still match from p */
        for (size_t i = p; i < len; i++) {
            node = trie_child(t, node, (uint8_t)text[i]);
            if (node < 0)
                break;
            control &= !(plain && plain[i]);
            int32_t id = t->trie[node].token;
            if (id < 0 || (!control && t->type[id] != TOK_USER_DEFINED))
                continue;
            if (nm == cap) {
                cap = cap ? cap * 2 : 16;
                special_match *g = realloc(m, sizeof *m * cap);
                if (!g) {
                    free(m);
                    return -1;
                }
                m = g;
            }
            m[nm++] = (special_match){p, (uint32_t)(i + 1 - p), id};
        }
    }
    if (!nm)
        return 0;
    uint8_t *taken = calloc(len, 1);
    if (!taken) {
        free(m);
        return -1;
    }
    qsort(m, nm, sizeof *m, match_order);
    size_t kept = 0;
    for (size_t i = 0; i < nm; i++) {
        bool free_range = true;
        for (uint32_t k = 0; k < m[i].len && free_range; k++)
            free_range = !taken[m[i].pos + k];
        if (!free_range)
            continue;
        memset(taken + m[i].pos, 1, m[i].len);
        m[kept++] = m[i];
    }
    free(taken);
    qsort(m, kept, sizeof *m, pos_order);
    *out = m;
    *n = kept;
    return 0;
}

static int encode_fragment(const tokenizer *t, const char *text, size_t len, bool after_special, tok_vec *v)
{
    if (!len)
        return 0;
    if (t->model == TOK_MODEL_SPM) {
        spm_encode(t, text, len, t->add_space_prefix && after_special, v);
        return 0;
    }
    return bpe_encode(t, text, len, v);
}

const char *tokenizer_strerror(int rc)
{
    switch (rc) {
    case TOK_ERR_TOO_LONG:
        return "the text is longer than the tokenizer accepts (256 MiB)";
    case TOK_ERR_NOMEM:
        return "out of memory";
    case TOK_ERR_PATTERN:
        return "the vocabulary's pre-tokenizer pattern failed on the text (a PCRE2 limit)";
    default:
        return rc < 0 ? "tokenizing failed" : "no error";
    }
}

static int encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                  bool parse_special, const uint8_t *plain, int32_t **out)
{
    *out = NULL;
    if (len > TOKENIZER_MAX_INPUT)
        return TOK_ERR_TOO_LONG;
    tok_vec v = {0};
    if (add_special && t->add_bos)
        tok_vec_push(&v, t->bos);
    special_match *m;
    size_t nm;
    if (find_specials(t, text, len, parse_special, plain, &m, &nm) < 0) {
        free(v.v);
        return TOK_ERR_NOMEM;
    }
    /* SPM adds its space prefix at the start of the text and after every special token. */
    size_t at = 0;
    bool after_special = true;
    int rc = 0;
    for (size_t i = 0; i <= nm && rc == 0; i++) {
        size_t end = i < nm ? m[i].pos : len;
        if (end > at) {
            rc = encode_fragment(t, text + at, end - at, after_special, &v);
            after_special = false;
        }
        if (i < nm) {
            tok_vec_push(&v, m[i].token);
            after_special = true;
            at = m[i].pos + m[i].len;
        }
    }
    free(m);
    if (add_special && t->add_eos)
        tok_vec_push(&v, t->eos);
    if (rc < 0 || v.oom || v.n > INT32_MAX) {
        free(v.v);
        return rc < 0 ? rc : TOK_ERR_NOMEM;
    }
    if (!v.v)
        v.v = malloc(sizeof *v.v);   /* an empty result is still a valid array */
    if (!v.v)
        return TOK_ERR_NOMEM;
    *out = v.v;
    return (int)v.n;
}

/* ---- pieces and detokenization ---- */

static size_t copy_out(const char *s, size_t n, char *buf, size_t cap)
{
    if (cap)   /* buf may be NULL with cap 0: a length query */
        memcpy(buf, s, n < cap ? n : cap);
    return n;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* SPM normal tokens write spaces as U+2581 (E2 96 81). */
static size_t unescape_spaces(const char *s, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (i + 2 < n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            c = ' ';
            i += 2;
        }
        if (k < cap)
            buf[k] = c;
        k++;
    }
    return k;
}

size_t tokenizer_piece(const tokenizer *t, int32_t id, bool special, char *buf, size_t cap)
{
    if (id < 0 || id >= t->n_vocab)
        return 0;
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id];
    switch (t->type[id]) {
    case TOK_CONTROL:
    case TOK_UNKNOWN:
        return special ? copy_out(s, n, buf, cap) : 0;
    case TOK_USER_DEFINED:
        return copy_out(s, n, buf, cap);
    case TOK_NORMAL:
        return t->model == TOK_MODEL_SPM ? unescape_spaces(s, n, buf, cap) : bpe_decode_text(s, n, buf, cap);
    case TOK_BYTE:
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
            char b = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            return copy_out(&b, 1, buf, cap);
        }
        return copy_out(s, n, buf, cap);
    default:
        return 0;   /* unused and undefined tokens stand for no text */
    }
}

void detok_init(detok_stream *s)
{
    s->n_pending = 0;
    s->first = true;
    s->special = false;
}

/* How many bytes the sequence starting with lead has in well-formed UTF-8 (0: cannot start one). */
static int utf8_need(uint8_t lead)
{
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

/* Whether b may follow the bytes already pending (Unicode's table of well-formed sequences). */
static bool utf8_continues(const char *pending, int n, uint8_t b)
{
    uint8_t lo = 0x80, hi = 0xBF;
    if (n == 1) {
        switch ((uint8_t)pending[0]) {
        case 0xE0: lo = 0xA0; break;
        case 0xED: hi = 0x9F; break;
        case 0xF0: lo = 0x90; break;
        case 0xF4: hi = 0x8F; break;
        default: break;
        }
    }
    return b >= lo && b <= hi;
}

typedef struct out_buf {
    char *p;
    size_t n, cap;
} out_buf;

static void put(out_buf *o, const char *s, size_t n)
{
    if (o->n + n <= o->cap) {
        memcpy(o->p + o->n, s, n);
        o->n += n;
    }
}

static const char replacement[] = "\xEF\xBF\xBD";   /* U+FFFD */

/* Feeds one byte; complete sequences go out, each maximal ill-formed subpart becomes U+FFFD. */
static void detok_byte(detok_stream *s, uint8_t b, out_buf *o)
{
    if (s->n_pending > 0) {
        if (utf8_continues(s->pending, s->n_pending, b)) {
            s->pending[s->n_pending++] = (char)b;
            if (s->n_pending == utf8_need((uint8_t)s->pending[0])) {
                put(o, s->pending, (size_t)s->n_pending);
                s->n_pending = 0;
            }
            return;
        }
        put(o, replacement, 3);
        s->n_pending = 0;
    }
    int need = utf8_need(b);
    if (need == 1)
        put(o, (const char *)&b, 1);
    else if (need == 0)
        put(o, replacement, 3);
    else
        s->pending[s->n_pending++] = (char)b;
}

size_t detok_push(detok_stream *s, const tokenizer *t, int32_t id, char *out, size_t cap)
{
    char local[256];
    char *piece = local;
    size_t n = tokenizer_piece(t, id, s->special, local, sizeof local);
    if (n > sizeof local) {
        piece = malloc(n);
        if (!piece)
            return 0;
        tokenizer_piece(t, id, s->special, piece, n);
    }
    size_t start = 0;
    /* The SPM space prefix added when encoding is not part of the text. */
    if (s->first && t->model == TOK_MODEL_SPM && t->add_space_prefix && n > 0 && piece[0] == ' ')
        start = 1;
    s->first = false;
    out_buf o = {out, 0, cap};
    for (size_t i = start; i < n; i++)
        detok_byte(s, (uint8_t)piece[i], &o);
    if (piece != local)
        free(piece);
    return o.n;
}

size_t detok_flush(detok_stream *s, char *out, size_t cap)
{
    out_buf o = {out, 0, cap};
    if (s->n_pending > 0)
        put(&o, replacement, 3);
    s->n_pending = 0;
    return o.n;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **out)
{
    return encode(t, text, len, add_special, parse_special, NULL, out);
}

int tokenizer_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_special,
                            const uint8_t *plain, int32_t **out)
{
    return encode(t, text, len, add_special, true, plain, out);
}
