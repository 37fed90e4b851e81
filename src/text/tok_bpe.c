/* tok_bpe.c — byte-level BPE ("gpt2" vocabularies).
 *
 * The text is split into words by the pre-tokenizer regexes that tokenizer.ggml.pre names, each
 * byte of a word becomes one printable character (the GPT-2 byte-to-unicode table), and adjacent
 * symbols are merged by the lowest-ranked rule of tokenizer.ggml.merges (leftmost on ties).
 * Merges are keyed by the id pair of their two sides, so each candidate pair costs one integer
 * hash probe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tok_internal.h"

#define BPE_MAX_REGEX 6

struct bpe_pretok {
    int n;
    pcre2_code *re[BPE_MAX_REGEX];
};

/* ---- the GPT-2 byte <-> character table ---- */

/* Printable bytes stand for themselves; the others are moved to U+0100.. in byte order. */
static uint32_t byte_to_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    if (b <= 32)
        return 256u + b;
    if (b <= 160)
        return 256u + 33 + (b - 127u);
    return 256u + 33 + 34;   /* 173 */
}

static int cp_to_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 33)
        return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 33 + 34)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 33 + 34)
        return 173;
    return -1;
}

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the sequence at s (n bytes left) by its structure alone: a lead byte and the
 * continuation bytes it announces. Returns the length, or 0 if the structure is broken. */
static size_t get_utf8(const uint8_t *s, size_t n, uint32_t *cp)
{
    size_t len = utf8_seq_len(s[0]);
    if (s[0] >= 0x80 && (len == 1 || s[0] >= 0xF8))
        return 0;
    if (len > n)
        return 0;
    uint32_t v = len == 1 ? s[0] : len == 2 ? s[0] & 0x1Fu : len == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
}

size_t bpe_decode_text(const char *s, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = get_utf8((const uint8_t *)s + i, n - i, &cp);
        int b = len ? cp_to_byte(cp) : -1;
        if (b >= 0) {
            if (k < cap)
                buf[k] = (char)b;
            k++;
        } else {   /* not a byte-level character: keep it as it is */
            len = len ? len : 1;
            for (size_t j = 0; j < len; j++, k++)
                if (k < cap)
                    buf[k] = s[i + j];
        }
        i += len;
    }
    return k;
}

/* Re-encodes text as well-formed UTF-8 for the regexes: a sequence with a broken structure
 * gives U+FFFD for its first byte and decoding resumes at the next byte; overlong forms are
 * written canonically; surrogates and values above U+10FFFF become U+FFFD. out must hold 3*len. */
static size_t sanitize_utf8(const char *text, size_t len, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = get_utf8((const uint8_t *)text + i, len - i, &cp);
        if (!n) {
            cp = 0xFFFD;
            n = 1;
        } else if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            cp = 0xFFFD;
        }
        k += put_utf8(cp, out + k);
        i += n;
    }
    return k;
}

/* ---- pre-tokenizers: the split regexes of each model family's tokenizer.json ---- */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static const char *const re_llama3[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};

static const char *const re_qwen2[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};

static const char *const re_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL};

/* The cased letters (Lu, Ll, Lt) of the Unicode version the DeepSeek LLM tokenizer was made with. */
static const char *const re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z"
    "\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
    NULL};

static const char *const re_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}", NULL};

/* What the reference uses for a BPE vocabulary that names no pre-tokenizer. */
static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    NULL};

static const struct pretok_def {
    const char *name;
    const char *const *regex;
    bool ignore_merges, add_bos;
} pretok_defs[] = {
    {"default", re_default, false, false},
    {"llama-bpe", re_llama3, true, true},
    {"llama3", re_llama3, true, true},
    {"llama-v3", re_llama3, true, true},
    {"qwen2", re_qwen2, false, false},
    {"deepseek-r1-qwen", re_qwen2, false, false},
    {"deepseek-llm", re_deepseek_llm, false, false},
    {"deepseek-coder", re_deepseek_coder, false, false},
    {"gpt-2", re_gpt2, false, false},
    {"phi-2", re_gpt2, false, false},
};

static int compile_pretok(tokenizer *t, const struct pretok_def *def, const char *path, char *err, size_t errlen)
{
    t->pretok = calloc(1, sizeof *t->pretok);
    if (!t->pretok) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; def->regex[i]; i++) {
        int code;
        PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &at, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            snprintf(err, errlen, "%s: pre-tokenizer '%s' regex %d: %s at %zu", path, def->name, i,
                     (const char *)msg, (size_t)at);
            return -1;
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* without JIT the interpreter is used */
        t->pretok->re[t->pretok->n++] = re;
    }
    return 0;
}

/* ---- merges ---- */

static merge_slot *merge_find(merge_slot *m, uint32_t mask, int32_t left, int32_t right)
{
    uint64_t h = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;   /* splitmix64's finalizer */
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask)
        if (m[i].left < 0 || (m[i].left == left && m[i].right == right))
            return &m[i];
}

/* Ranks keyed by the ids of the two sides. A side that is not a token gets an id all the same:
 * another merge may build it. (The merged text needs no id here: it is looked up when a merge
 * is applied, and if it has none, no rule can extend it.) */
static int load_merges(tokenizer *t, const gguf_file *f, char *err, size_t errlen)
{
    const gguf_array *a = gguf_get_arr(f, "tokenizer.ggml.merges");
    if (!a || a->type != GGUF_STRING) {
        snprintf(err, errlen, "%s: tokenizer.ggml.merges is missing or not a list of strings", f->path);
        return -1;
    }
    if (a->n > INT32_MAX / 4) {
        snprintf(err, errlen, "%s: tokenizer.ggml.merges has %llu entries (too many)", f->path,
                 (unsigned long long)a->n);
        return -1;
    }
    uint32_t cap = 64;
    while (cap / 4 * 3 < a->n)   /* at most 3/4 full */
        cap *= 2;
    t->merges = malloc(sizeof *t->merges * cap);
    if (!t->merges)
        goto oom;
    t->merge_mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++)
        t->merges[i].left = -1;
    for (uint64_t r = 0; r < a->n; r++) {
        const char *s = a->strs[r].ptr;
        size_t n = a->strs[r].len;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            snprintf(err, errlen, "%s: merge %llu is not two texts separated by a space", f->path,
                     (unsigned long long)r);
            return -1;
        }
        int32_t left = tok_intern(t, s, (size_t)(sp - s), false);
        int32_t right = tok_intern(t, sp + 1, n - (size_t)(sp - s) - 1, false);
        if (left < 0 || right < 0)
            goto oom;
        merge_slot *m = merge_find(t->merges, t->merge_mask, left, right);
        if (m->left < 0)   /* the first rank of a repeated rule counts */
            *m = (merge_slot){left, right, (int32_t)r};
    }
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory loading %llu merges", f->path, (unsigned long long)a->n);
    return -1;
}

int bpe_load(tokenizer *t, const gguf_file *f, char *err, size_t errlen)
{
    char pre[64] = "default";
    gguf_get_str(f, "tokenizer.ggml.pre", pre, sizeof pre);
    const struct pretok_def *def = NULL;
    for (size_t i = 0; i < sizeof pretok_defs / sizeof *pretok_defs; i++)
        if (!strcmp(pretok_defs[i].name, pre))
            def = &pretok_defs[i];
    if (!def) {
        snprintf(err, errlen, "%s: pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported", f->path, pre);
        return -1;
    }
    t->ignore_merges = def->ignore_merges;
    t->add_bos = def->add_bos;
    if (compile_pretok(t, def, f->path, err, errlen) < 0 || load_merges(t, f, err, errlen) < 0)
        return -1;
    for (int b = 0; b < 256; b++) {
        char c[4];
        t->byte_char_id[b] = tok_lookup(t, c, put_utf8(byte_to_cp((uint8_t)b), c));
    }
    return 0;
}

void bpe_free(tokenizer *t)
{
    if (t->pretok)
        for (int i = 0; i < t->pretok->n; i++)
            pcre2_code_free(t->pretok->re[i]);
    free(t->pretok);
    free(t->merges);
}

/* ---- encoding ---- */

typedef struct span {
    size_t off, len;
} span;

typedef struct span_vec {
    span *v;
    size_t n, cap;
} span_vec;

static bool span_push(span_vec *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, sizeof *v * cap);
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){off, len};
    return true;
}

/* Splits every span of `in` by one regex: the matches and the text between them all become
 * spans. Each span is matched on its own, so anchors and look-arounds stop at its edges. */
static int split_spans(const pcre2_code *re, pcre2_match_data *md, const char *text, const span_vec *in,
                       span_vec *out)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        PCRE2_SPTR subj = (PCRE2_SPTR)(text + in->v[i].off);
        size_t len = in->v[i].len, pos = 0, done = 0;
        while (pos < len) {
            int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   /* the interpreter keeps its state on the heap */
                rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0)
                return TOK_ERR_PATTERN;
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) {   /* an empty match: step over one character */
                if (ov[0] >= len)
                    break;
                pos = ov[0] + utf8_seq_len(subj[ov[0]]);
                continue;
            }
            if (ov[0] > done && !span_push(out, in->v[i].off + done, ov[0] - done))
                return TOK_ERR_NOMEM;
            if (!span_push(out, in->v[i].off + ov[0], ov[1] - ov[0]))
                return TOK_ERR_NOMEM;
            pos = done = ov[1];
        }
        if (done < len && !span_push(out, in->v[i].off + done, len - done))
            return TOK_ERR_NOMEM;
    }
    return 0;
}

typedef struct bpe_work {
    const tokenizer *t;
    tok_symbol *sym;
    tok_heap heap;
    char *mapped;               /* a word in byte-level characters */
    bool oom;
} bpe_work;

static void try_merge(bpe_work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0 || w->sym[left].id < 0 || w->sym[right].id < 0)
        return;
    const merge_slot *m = merge_find(w->t->merges, w->t->merge_mask, w->sym[left].id, w->sym[right].id);
    if (m->left < 0)
        return;
    tok_bigram b = {(double)m->rank, left, right, w->sym[left].n + w->sym[right].n};
    if (!tok_heap_push(&w->heap, b))
        w->oom = true;
}

static size_t map_bytes(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += put_utf8(byte_to_cp((uint8_t)s[i]), out + k);
    return k;
}

static void encode_word(bpe_work *w, const char *word, size_t n, tok_vec *out)
{
    const tokenizer *t = w->t;
    if (t->ignore_merges) {
        int32_t id = tok_lookup(t, w->mapped, map_bytes(word, n, w->mapped));
        if (id >= 0 && id < t->n_vocab) {
            tok_vec_push(out, id);
            return;
        }
    }
    tok_symbol *sym = w->sym;
    for (size_t i = 0; i < n; i++)
        sym[i] = (tok_symbol){(int32_t)i - 1, (int32_t)i + 1, (uint32_t)i, 1, t->byte_char_id[(uint8_t)word[i]]};
    sym[n - 1].next = -1;
    w->heap.n = 0;
    for (size_t i = 1; i < n; i++)
        try_merge(w, (int32_t)i - 1, (int32_t)i);
    while (w->heap.n && !w->oom) {
        tok_bigram b = tok_heap_pop(&w->heap);
        tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (!l->n || !r->n || l->n + r->n != b.size)
            continue;   /* one side changed since this pair was queued */
        l->n += r->n;
        l->id = tok_lookup(t, w->mapped, map_bytes(word + l->start, l->n, w->mapped));
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        try_merge(w, l->prev, b.left);
        try_merge(w, b.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].id >= 0 && sym[i].id < t->n_vocab) {
            tok_vec_push(out, sym[i].id);
            continue;
        }
        /* Not a token (a vocabulary without all byte characters): single-byte tokens, if any. */
        size_t k = map_bytes(word + sym[i].start, sym[i].n, w->mapped);
        for (size_t j = 0; j < k; j++) {
            int32_t id = tok_lookup(t, w->mapped + j, 1);
            if (id >= 0 && id < t->n_vocab)
                tok_vec_push(out, id);
        }
    }
}

int bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out)
{
    int rc = TOK_ERR_NOMEM;
    char *clean = malloc(len * 3);
    span_vec a = {0}, b = {0};
    bpe_work w = {.t = t};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!clean || !md)
        goto done;
    size_t n = sanitize_utf8(text, len, clean);
    if (!span_push(&a, 0, n))
        goto done;
    for (int i = 0; i < t->pretok->n; i++) {
        if ((rc = split_spans(t->pretok->re[i], md, clean, &a, &b)) < 0)
            goto done;
        span_vec tmp = a;
        a = b;
        b = tmp;
    }
    size_t longest = 0;
    for (size_t i = 0; i < a.n; i++)
        longest = a.v[i].len > longest ? a.v[i].len : longest;
    rc = TOK_ERR_NOMEM;
    w.sym = malloc(sizeof *w.sym * longest);
    w.mapped = malloc(longest * 2);
    if (!w.sym || !w.mapped)
        goto done;
    for (size_t i = 0; i < a.n && !w.oom && !out->oom; i++)
        encode_word(&w, clean + a.v[i].off, a.v[i].len, out);
    rc = w.oom ? TOK_ERR_NOMEM : 0;
done:
    pcre2_match_data_free(md);
    free(clean);
    free(a.v);
    free(b.v);
    free(w.sym);
    free(w.mapped);
    free(w.heap.v);
    return rc;
}
