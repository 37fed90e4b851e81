/* model.c — a transformer's hyper-parameters and weight tensors, read from GGUF metadata.
 *
 * Everything the forward pass will touch is checked here, once: every tensor exists, has the
 * shape the hyper-parameters imply, and a type the kernels can compute with. After model_load
 * succeeds the engine can index weights without further checks. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "util/mem.h"

/* Loader state: the file, its name for messages, and the caller's error buffer. */
typedef struct loader {
    const gguf_file *f;
    const char *path;
    const char *arch;
    const arch_desc *arch_row;
    char *err;
    size_t errlen;
    bool failed;
} loader;

__attribute__((format(printf, 2, 3))) static void fail(loader *ld, const char *fmt, ...)
{
    if (ld->failed)
        return; /* keep the first error: later ones are usually consequences */
    ld->failed = true;
    int n = snprintf(ld->err, ld->errlen, "%s: ", ld->path);
    if (n < 0 || (size_t)n >= ld->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static int64_t arch_int(loader *ld, const char *suffix, int64_t def, bool required)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    if (!gguf_find(ld->f, key)) {
        if (required)
            fail(ld, "missing metadata key '%s'", key);
        return def;
    }
    const int64_t bad = INT64_MIN;
    int64_t v = gguf_get_int(ld->f, key, bad);
    if (v == bad || v < 0 || v > INT32_MAX) {
        fail(ld, "metadata key '%s' is not a valid count", key);
        return def;
    }
    return v;
}

static double arch_float(loader *ld, const char *suffix, double def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    if (!gguf_find(ld->f, key))
        return def;
    double v = gguf_get_float(ld->f, key, NAN);
    if (!isfinite(v)) {
        fail(ld, "metadata key '%s' is not a finite number", key);
        return def;
    }
    return v;
}

/* The dims of a shape as "[a, b, c]", n of them. */
static void shape_str(char *buf, size_t len, const uint64_t *ne, int n)
{
    int off = snprintf(buf, len, "[");
    for (int d = 0; d < n && off > 0 && (size_t)off < len; d++)
        off += snprintf(buf + off, len - (size_t)off, "%s%llu", d ? ", " : "",
                        (unsigned long long)ne[d]);
    if (off > 0 && (size_t)off < len)
        snprintf(buf + off, len - (size_t)off, "]");
}

/* A tensor that must exist with exactly the dimensions given (n_dims of want, innermost
 * first). matrix: it is multiplied by the kernels, so its type must be computable. */
static const gguf_tensor *tensor(loader *ld, const char *name, bool required, bool matrix,
                                 int n_dims, const uint64_t want[3])
{
    const gguf_tensor *t = gguf_tensor_find(ld->f, name);
    if (!t) {
        if (required)
            fail(ld, "missing tensor '%s'", name);
        return NULL;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] != (d < n_dims ? want[d] : 1)) {
            char has[96], exp[96];
            shape_str(has, sizeof has, t->ne, n_dims > 2 ? 3 : 2 + (t->ne[2] > 1));
            shape_str(exp, sizeof exp, want, n_dims);
            fail(ld, "tensor '%s' has shape %s, expected %s", name, has, exp);
            return NULL;
        }
    const dtype_info *di = dtype_get(t->type);
    const char *tname = di ? di->name : "unknown";
    if (matrix) {
        if (!kern_type_get(t->type)) {
            fail(ld, "tensor '%s' has type %s, which the kernels cannot compute with", name, tname);
            return NULL;
        }
    } else if (t->type != DT_F32) {
        /* norms, biases and rope factors are applied as F32 vectors */
        fail(ld, "tensor '%s' has type %s, expected F32", name, tname);
        return NULL;
    }
    return t;
}

static const gguf_tensor *vec_tensor(loader *ld, const char *name, bool required, uint64_t ne0)
{
    return tensor(ld, name, required, false, 1, (const uint64_t[3]){ne0, 1, 1});
}

/* Llama 3.1 frequency scaling given as metadata keys instead of a rope_freqs tensor: long
 * wavelengths are slowed by `factor`, short ones kept, and the band between interpolated. */
static float *llama3_freq_factors(int n_rot, float base, float factor, float low, float high,
                                  float orig_ctx)
{
    float *ff = malloc(sizeof(float) * (size_t)(n_rot / 2));
    if (!ff)
        return NULL;
    const float low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;
    for (int i = 0; i < n_rot / 2; i++) {
        float freq = powf(base, -2.0f * (float)i / (float)n_rot);
        float wavelen = 2.0f * (float)M_PI / freq;
        if (wavelen < high_wavelen) {
            ff[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            ff[i] = factor;
        } else {
            float smooth = (orig_ctx / wavelen - low) / (high - low);
            ff[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
    return ff;
}

static void load_rope(loader *ld, model *m, float **owned_factors)
{
    model_hparams *hp = &m->hp;
    rope_params *rope = &hp->rope[0];
    rope->n_rot = (int)arch_int(ld, "rope.dimension_count", hp->head_dim, false);
    if (rope->n_rot <= 0 || rope->n_rot > hp->head_dim || rope->n_rot % 2) {
        fail(ld, "%s.rope.dimension_count = %d does not fit head size %d", ld->arch,
             rope->n_rot, hp->head_dim);
        return;
    }
    rope->freq_base = (float)arch_float(ld, "rope.freq_base", 10000.0);
    rope->freq_scale = 1.0f;

    char key[128], type[32] = "none";
    snprintf(key, sizeof key, "%s.rope.scaling.type", ld->arch);
    gguf_get_str(ld->f, key, type, sizeof type);
    double factor = arch_float(ld, "rope.scaling.factor", 0.0);
    if (!strcmp(type, "none") || !strcmp(type, "linear")) {
        /* older files give linear scaling as rope.scale_linear */
        if (factor == 0.0)
            factor = arch_float(ld, "rope.scale_linear", 0.0);
        if (!strcmp(type, "linear") || factor > 0.0)
            rope->freq_scale = factor > 0.0 ? (float)(1.0 / factor) : 1.0f;
    } else if (!strcmp(type, "yarn")) {
        if (factor <= 0.0) {
            fail(ld, "rope scaling 'yarn' needs %s.rope.scaling.factor > 0", ld->arch);
            return;
        }
        rope->freq_scale = (float)(1.0 / factor);
        rope->ext_factor = (float)arch_float(ld, "rope.scaling.yarn_ext_factor", 1.0);
        rope->beta_fast = (float)arch_float(ld, "rope.scaling.yarn_beta_fast", 32.0);
        rope->beta_slow = (float)arch_float(ld, "rope.scaling.yarn_beta_slow", 1.0);
        rope->n_ctx_orig = (int)arch_int(ld, "rope.scaling.original_context_length",
                                         hp->n_ctx_train, false);
        if (!(rope->beta_fast > rope->beta_slow) || rope->beta_slow <= 0 || rope->n_ctx_orig < 1) {
            fail(ld, "rope scaling 'yarn' has invalid parameters");
            return;
        }
    } else if (!strcmp(type, "llama3")) {
        if (factor <= 0.0) {
            fail(ld, "rope scaling 'llama3' needs %s.rope.scaling.factor > 0", ld->arch);
            return;
        }
        float low = (float)arch_float(ld, "rope.scaling.low_freq_factor", 1.0);
        float high = (float)arch_float(ld, "rope.scaling.high_freq_factor", 4.0);
        float orig = (float)arch_float(ld, "rope.scaling.original_context_length", 8192.0);
        if (!(high > low) || low <= 0.0f || orig <= 0.0f) {
            fail(ld, "rope scaling 'llama3' has invalid frequency factors");
            return;
        }
        *owned_factors =
            llama3_freq_factors(rope->n_rot, rope->freq_base, (float)factor, low, high, orig);
        if (!*owned_factors) {
            fail(ld, "out of memory");
            return;
        }
    } else {
        fail(ld, "rope scaling type '%s' is not supported", type);
        return;
    }

    /* A rope_freqs tensor (Llama 3.1/3.2 files) carries the same factors precomputed. */
    const gguf_tensor *rf = vec_tensor(ld, "rope_freqs.weight", false, (uint64_t)rope->n_rot / 2);
    if (rf)
        rope->freq_factors = rf->data;
    else if (*owned_factors)
        rope->freq_factors = *owned_factors;

    /* sliding layers: their own base and no scaling, or the same rotation */
    hp->rope[1] = *rope;
    if (m->arch->swa_rope_base > 0.0f)
        hp->rope[1] = (rope_params){
            .n_rot = rope->n_rot, .freq_scale = 1.0f, .neox = rope->neox,
            .freq_base = (float)arch_float(ld, "rope.freq_base_swa", m->arch->swa_rope_base)};
}

static void load_hparams(loader *ld, model *m)
{
    model_hparams *hp = &m->hp;
    const arch_desc *ad = m->arch;
    hp->arch = arch_id(ad);
    hp->n_layer = (int)arch_int(ld, "block_count", 0, true);
    hp->n_embd = (int)arch_int(ld, "embedding_length", 0, true);
    hp->n_ff = (int)arch_int(ld, "feed_forward_length", 0, true);
    hp->n_head = (int)arch_int(ld, "attention.head_count", 0, true);
    hp->n_head_kv = (int)arch_int(ld, "attention.head_count_kv", hp->n_head, false);
    hp->n_ctx_train = (int)arch_int(ld, "context_length", 2048, false);
    if (ld->failed)
        return;
    if (hp->n_layer < 1 || hp->n_embd < 1 || hp->n_ff < 1 || hp->n_head < 1 ||
        hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv) {
        fail(ld, "invalid hyper-parameters: %d layers, n_embd %d, n_ff %d, %d heads / %d kv heads",
             hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv);
        return;
    }
    int def_hd = hp->n_embd % hp->n_head ? 0 : hp->n_embd / hp->n_head;
    hp->head_dim = (int)arch_int(ld, "attention.key_length", def_hd, false);
    int v_dim = (int)arch_int(ld, "attention.value_length", hp->head_dim, false);
    if (hp->head_dim < 2 || hp->head_dim % 2 || hp->head_dim > KERN_MAX_HEAD_DIM ||
        v_dim != hp->head_dim) {
        fail(ld, "unsupported head size: key %d, value %d (even, at most %d)", hp->head_dim,
             v_dim, KERN_MAX_HEAD_DIM);
        return;
    }
    hp->rms_eps = (float)arch_float(ld, "attention.layer_norm_rms_epsilon", 1e-5);
    if (!(hp->rms_eps > 0.0f)) {
        fail(ld, "%s.attention.layer_norm_rms_epsilon must be positive", ld->arch);
        return;
    }
    hp->rope[0].neox = ad->neox;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = ad->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->n_swa = (int)arch_int(ld, "attention.sliding_window", 0, false);
    hp->n_expert = (int)arch_int(ld, "expert_count", 0, false);
    hp->n_expert_used = (int)arch_int(ld, "expert_used_count", 0, false);
    if (hp->n_expert_used > hp->n_expert || hp->n_expert > LOP_MAX_EXPERTS) {
        fail(ld, "%d experts, %d used per token: unsupported (at most %d, used at most all)",
             hp->n_expert, hp->n_expert_used, LOP_MAX_EXPERTS);
        return;
    }
    /* the experts' width (the dense FFN's feed_forward_length goes unused in such files) */
    if (hp->n_expert)
        hp->n_ff = (int)arch_int(ld, "expert_feed_forward_length", hp->n_ff, false);
    if (ad->hparams)
        ad->hparams(hp);
}

static uint64_t dim_size(const model_hparams *hp, enum arch_dim d)
{
    switch (d) {
    case DIM_EMBD: return (uint64_t)hp->n_embd;
    case DIM_Q: return (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    case DIM_KV: return (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    case DIM_FF: return (uint64_t)hp->n_ff;
    case DIM_HEAD: return (uint64_t)hp->head_dim;
    case DIM_EXPERT: return (uint64_t)hp->n_expert;
    case DIM_HEADS: return (uint64_t)hp->n_head;
    case DIM_ONE: break;
    }
    return 1;
}

/* Whether layer il slides: the pattern of the architecture, or of the file when it says. */
static bool layer_slides(loader *ld, const model_hparams *hp, int il)
{
    if (hp->n_swa <= 0)
        return false;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ld->arch);
    int64_t pattern = gguf_get_int(ld->f, key, ld->arch_row->swa_pattern);
    if (pattern <= 1)
        return pattern == 1;
    return il % pattern < pattern - 1;
}

static void load_layers(loader *ld, model *m)
{
    const model_hparams *hp = &m->hp;
    const arch_desc *ad = m->arch;
    for (int il = 0; il < hp->n_layer && !ld->failed; il++) {
        model_layer *L = &m->layers[il];
        bool has[LT_COUNT];
        for (int s = 0; s < LT_COUNT; s++) {
            const slot_desc *sd = arch_slot((enum layer_slot)s);
            bool required = ad->required & (1u << s);
            has[s] = false;
            if (!required && !(ad->optional & (1u << s)))
                continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, sd->name);
            const uint64_t want[3] = {dim_size(hp, sd->ne0), dim_size(hp, sd->ne1),
                                      dim_size(hp, sd->ne2)};
            int n_dims = sd->ne2 != DIM_ONE ? 3 : sd->ne1 != DIM_ONE ? 2 : 1;
            L->t[s] = tensor(ld, name, required, sd->matrix, n_dims, want);
            has[s] = L->t[s] != NULL;
        }
        if (ld->failed)
            return;
        ad->build(ad, has, &L->prog);
        /* an optional tensor the program uses is required after all (a layer of experts
         * without one of them, say) */
        for (int i = 0; i < L->prog.n_op; i++) {
            const layer_op *op = &L->prog.op[i];
            const int n_w = op->kind == LOP_MOE ? 4 : 1;
            for (int k = 0; k < 2 * n_w; k++) {
                int s = k < n_w ? (op->w == LOP_NONE ? -1 : op->w + k)
                                : (op->b == LOP_NONE ? -1 : op->b + k - n_w);
                if (s >= 0 && !L->t[s]) {
                    fail(ld, "missing tensor 'blk.%d.%s'", il, arch_slot((enum layer_slot)s)->name);
                    return;
                }
            }
            if (op->kind == LOP_MOE && !hp->n_expert_used) {
                fail(ld, "layer %d has experts, but %s.expert_count or %s.expert_used_count is "
                         "missing", il, ld->arch, ld->arch);
                return;
            }
        }
        L->prog.window = layer_slides(ld, hp, il) ? hp->n_swa : 0;
        L->prog.rope = L->prog.window ? 1 : 0;
    }
}

/* The model owns the factors it computed from metadata; they live just past the layers. */
struct model_alloc {
    model m;
    float *rope_factors;
    /* the mappings model_keep_weights made, one per call */
    struct kept_map { void *p; size_t bytes; } *kept;
    int n_kept;
    uint64_t kept_bytes;
};

/* A separate token embedding is read a row per token, at random: without readahead, a new
 * token reads the pages of its row, not the megabytes around it (the 14B-like on the
 * emulator's desktop: 2-4 MiB per new token with readahead and 2 MB folios, 4-8 KiB without),
 * and the rows the text uses are what stays in memory (model_head_bytes). Tied to the output
 * matrix, it is read whole every token. */
static void advise_embedding(const model *m)
{
    if (m->output == m->tok_embd)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)m->tok_embd->data, b = a + m->tok_embd->nbytes;
    a = (a + page - 1) & ~(page - 1);   /* whole pages of its own only */
    b &= ~(page - 1);
    if (b > a) {   /* hints: failing only costs reads */
        madvise((void *)a, b - a, MADV_NOHUGEPAGE);   /* the mapping asked for 2 MB folios */
        madvise((void *)a, b - a, MADV_RANDOM);
    }
}

model *model_load(const char *path, char *err, size_t errlen)
{
    gguf_file *f = gguf_open(path, err, errlen);
    if (!f)
        return NULL;
    struct model_alloc *ma = calloc(1, sizeof *ma);
    if (!ma) {
        gguf_close(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    model *m = &ma->m;
    m->file = f;
    m->kv_type[0] = m->kv_type[1] = DT_F16;
    loader ld = {.f = f, .path = path, .err = err, .errlen = errlen};

    char arch[64] = "";
    if (!gguf_get_str(f, "general.architecture", arch, sizeof arch)) {
        fail(&ld, "missing metadata key 'general.architecture'");
        goto fail;
    }
    m->arch = arch_find(arch);
    if (!m->arch) {
        char names[128] = "";
        for (int a = 0; a < ARCH_COUNT; a++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", a ? ", " : "",
                     arch_get(a)->name);
        fail(&ld, "unknown model architecture '%s' (supported: %s)", arch, names);
        goto fail;
    }
    ld.arch = m->arch->name;
    ld.arch_row = m->arch;
    load_hparams(&ld, m);
    if (ld.failed)
        goto fail;
    load_rope(&ld, m, &ma->rope_factors);
    if (ld.failed)
        goto fail;

    const gguf_tensor *te = gguf_tensor_find(f, "token_embd.weight");
    if (!te) {
        fail(&ld, "missing tensor 'token_embd.weight'");
        goto fail;
    }
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        fail(&ld, "tensor 'token_embd.weight' has an invalid vocabulary size");
        goto fail;
    }
    m->hp.n_vocab = (int)te->ne[1];
    const uint64_t e = (uint64_t)m->hp.n_embd, nv = (uint64_t)m->hp.n_vocab;
    m->tok_embd = tensor(&ld, "token_embd.weight", true, true, 2, (const uint64_t[3]){e, nv, 1});
    m->output_norm = vec_tensor(&ld, "output_norm.weight", true, e);
    m->output = tensor(&ld, "output.weight", false, true, 2, (const uint64_t[3]){e, nv, 1});
    if (!m->output && !ld.failed)
        m->output = m->tok_embd; /* tied embeddings */
    if (ld.failed)
        goto fail;

    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        fail(&ld, "out of memory");
        goto fail;
    }
    load_layers(&ld, m);
    if (ld.failed)
        goto fail;
    advise_embedding(m);
    return m;

fail:
    model_free(m);
    return NULL;
}

void model_free(model *m)
{
    if (!m)
        return;
    struct model_alloc *ma = (struct model_alloc *)m;
    for (int i = 0; i < ma->n_kept; i++)
        munmap(ma->kept[i].p, ma->kept[i].bytes);
    free(ma->kept);
    gguf_close(m->file);
    free(m->layers);
    free(ma->rope_factors);
    free(ma);
}

/* A file of kept forms: the header's page, then the kept forms (model_keep_weights). */
#define KEEP_HEADER 4096

/* The bytes of w's kept form, 0 when it has none or it is not a matrix. */
static size_t kept_size(const gguf_tensor *w)
{
    if (!w || w->n_dims != 2 || w->ne[0] > INT32_MAX || w->ne[1] > INT32_MAX)
        return 0;
    return kern_keep_bytes(w->type, (int)w->ne[0], (int)w->ne[1]);
}

/* Every matrix of the model with a kept form, in a fixed order (the layers' slots, then the
 * output), as visit(w, slot, wanted, arg): slot is where its kept form goes, wanted whether the
 * caller asked for it (layers, output) and it is not kept yet. */
typedef void keep_visit_fn(const gguf_tensor *w, const void **slot, bool wanted, void *arg);
static void keep_walk(model *m, const bool *layers, bool output, keep_visit_fn *visit, void *arg)
{
    for (int il = 0; il < m->hp.n_layer; il++)
        for (int s = 0; s < LT_COUNT; s++)
            if (kept_size(m->layers[il].t[s]))
                visit(m->layers[il].t[s], &m->layers[il].kept[s],
                      (!layers || layers[il]) && !m->layers[il].kept[s], arg);
    if (kept_size(m->output))
        visit(m->output, &m->output_kept, output && !m->output_kept, arg);
}

/* One walk: where the kept forms go (at + their offsets, or a file), and what is done. */
struct keep_pass {
    kern_ctx *kc;
    bool all;         /* every matrix (a file holds them all), not only the wanted ones */
    uint8_t *at;      /* pack into memory here / point the wanted slots into it */
    int fd;           /* >= 0: pack into this file at header + offset, through buf */
    uint8_t *buf;
    size_t offset;    /* the next kept form's */
    int wanted, failed_errno;
};

/* Offsets are multiples of 64 (the panels are aligned). */
static size_t keep_span(const gguf_tensor *w)
{
    return (kept_size(w) + 63) & ~(size_t)63;
}

/* The file's pages of w, no longer read here once its kept form is: out of this process's
 * resident set, they are page cache the OS reclaims first. */
static void release_source(const gguf_tensor *w)
{
    mem_release((void *)w->data, (size_t)w->nbytes);
}

static void keep_visit(const gguf_tensor *w, const void **slot, bool wanted, void *arg)
{
    struct keep_pass *k = arg;
    const size_t span = keep_span(w);
    k->wanted += wanted;
    if (k->fd >= 0 && !k->failed_errno) {
        kern_keep(k->kc, w->data, w->type, (int)w->ne[0], (int)w->ne[1], k->buf);
        for (size_t done = 0; done < span && !k->failed_errno;) {
            ssize_t n = pwrite(k->fd, k->buf + done, span - done, (off_t)(KEEP_HEADER + k->offset + done));
            if (n > 0)
                done += (size_t)n;
            else if (n == 0 || errno != EINTR)
                k->failed_errno = n == 0 ? EIO : errno;
        }
    } else if (k->at && (wanted || k->all)) {
        if (!k->all)
            kern_keep(k->kc, w->data, w->type, (int)w->ne[0], (int)w->ne[1], k->at + k->offset);
        if (wanted) {
            *slot = k->at + k->offset;
            release_source(w);
        }
    }
    if (k->all || wanted)
        k->offset += span;
}

/* A file of kept forms starts with this header (KEEP_HEADER bytes): what it was made from. */
struct keep_header {
    char magic[8];        /* "PRIMAKPT" */
    uint32_t version, pad;
    char layout[32];      /* kern_keep_layout() */
    uint64_t model_bytes; /* the model file's size and modification time */
    int64_t model_mtime_ns;
    uint64_t data_bytes;  /* after the header */
};

static struct keep_header keep_header_of(const struct stat *st, size_t data_bytes)
{
    struct keep_header h = {.magic = "PRIMAKPT", .version = 1, .model_bytes = (uint64_t)st->st_size,
                            .model_mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
                            .data_bytes = data_bytes};
    snprintf(h.layout, sizeof h.layout, "%s", kern_keep_layout());
    return h;
}

/* Map the kept forms' file at path when it is the one `want` describes: its data, or NULL. */
static void *keep_file_map(const char *path, const struct keep_header *want)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct keep_header h;
    struct stat st;
    void *p = MAP_FAILED;
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(&h, want, sizeof h) &&
        fstat(fd, &st) == 0 && (uint64_t)st.st_size == KEEP_HEADER + h.data_bytes)
        p = mmap(NULL, KEEP_HEADER + h.data_bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* The file of kept forms for m in dir, made when missing or stale (written under a temporary
 * name, then renamed: a run that stops half way leaves no damaged file behind). Its mapping
 * (header included), or NULL with err. */
static uint8_t *keep_file(model *m, kern_ctx *kc, const char *dir, size_t data_bytes, char *err,
                          size_t errlen)
{
    struct stat st;
    if (stat(m->file->path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", m->file->path, strerror(errno));
        return NULL;
    }
    const struct keep_header want = keep_header_of(&st, data_bytes);
    /* named by the model's path and the layout: FNV-1a over both */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = m->file->path; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    for (const char *s = want.layout; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    const char *base = strrchr(m->file->path, '/');
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%.200s.%016llx.kept", dir, base ? base + 1 : m->file->path,
             (unsigned long long)h);
    uint8_t *p = keep_file_map(path, &want);
    if (p)
        return p;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    size_t largest = keep_span(m->output);
    for (int il = 0; il < m->hp.n_layer; il++)
        for (int s = 0; s < LT_COUNT; s++)
            largest = keep_span(m->layers[il].t[s]) > largest ? keep_span(m->layers[il].t[s]) : largest;
    struct keep_pass k = {.kc = kc, .all = true, .fd = -1, .buf = aligned_alloc(64, largest)};
    int e = k.buf ? 0 : ENOMEM;
    if (!e && (k.fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        e = errno;
    if (!e) {
        keep_walk(m, NULL, false, keep_visit, &k);
        e = k.failed_errno;
        if (!e && pwrite(k.fd, &want, sizeof want, 0) != (ssize_t)sizeof want)
            e = errno ? errno : EIO;
    }
    free(k.buf);
    if (k.fd >= 0 && close(k.fd) != 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) != 0)
        e = errno;
    if (e) {
        unlink(tmp);
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return NULL;
    }
    if (!(p = keep_file_map(path, &want)))
        snprintf(err, errlen, "%s: cannot map it again", path);
    return p;
}

int64_t model_keep_weights(model *m, kern_ctx *kc, const bool *layers, bool output,
                           const char *cache_dir, char *err, size_t errlen)
{
    struct model_alloc *ma = (struct model_alloc *)m;
    struct keep_pass k = {.kc = kc, .all = cache_dir != NULL, .fd = -1};
    keep_walk(m, layers, output, keep_visit, &k); /* counts */
    if (k.wanted == 0)
        return 0;
    const size_t bytes = k.offset, map_bytes = (cache_dir ? KEEP_HEADER : 0) + bytes;
    struct kept_map *list = realloc(ma->kept, sizeof *list * (size_t)(ma->n_kept + 1));
    if (!list) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ma->kept = list;
    uint8_t *p;
    if (cache_dir) {
        if (!(p = keep_file(m, kc, cache_dir, bytes, err, errlen)))
            return -1;
        k = (struct keep_pass){.kc = kc, .all = true, .at = p + KEEP_HEADER, .fd = -1};
    } else {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "%s: out of memory for %zu MiB of repacked weights",
                     m->file->path, bytes >> 20);
            return -1;
        }
        madvise(p, bytes, MADV_HUGEPAGE); /* read in full every token: the TLB would be the limit */
        k = (struct keep_pass){.kc = kc, .at = p, .fd = -1};
    }
    keep_walk(m, layers, output, keep_visit, &k);
    if (!cache_dir)
        mprotect(p, bytes, PROT_READ);
    ma->kept[ma->n_kept++] = (struct kept_map){p, map_bytes};
    ma->kept_bytes += bytes;
    return (int64_t)bytes;
}

uint64_t model_kept_bytes(const model *m)
{
    return ((const struct model_alloc *)m)->kept_bytes;
}

int model_mlock(const model *m, char *err, size_t errlen)
{
    if (mlock(m->file->map, m->file->size) != 0) {
        snprintf(err, errlen, "%s: cannot lock %llu bytes in memory: %s (see ulimit -l)",
                 m->file->path, (unsigned long long)m->file->size, strerror(errno));
        return -1;
    }
    return 0;
}

/* The tensors of layer il present in the file. */
static int layer_tensors(const model *m, int il, const gguf_tensor **out)
{
    int n = 0;
    for (int s = 0; s < LT_COUNT; s++)
        if (m->layers[il].t[s])
            out[n++] = m->layers[il].t[s];
    return n;
}

uint32_t model_buffers(const model *m)
{
    uint32_t used = 1u << LB_X;   /* the final norm's */
    for (int il = 0; il < m->hp.n_layer; il++)
        used |= lop_buffers(&m->layers[il].prog);
    return used;
}

int model_set_kv_types(model *m, enum dtype k, enum dtype v, char *err, size_t errlen)
{
    const enum dtype t[2] = {k, v};
    for (int i = 0; i < 2; i++)
        if (!kern_kv_type_ok(t[i], m->hp.head_dim)) {
            snprintf(err, errlen, "%s cache type %s: %s", i ? "V" : "K", dtype_get(t[i])->name,
                     t[i] == DT_Q8_0 || t[i] == DT_Q4_0
                         ? "needs a head size that is a multiple of 32"
                         : "not a KV cache type (f16, q8_0, q4_0)");
            return -1;
        }
    m->kv_type[0] = k;
    m->kv_type[1] = v;
    return 0;
}

double model_kv_row_bytes(const model *m)
{
    const uint64_t kv_dim = (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim;
    return (double)(dtype_row_bytes(m->kv_type[0], kv_dim) +
                    dtype_row_bytes(m->kv_type[1], kv_dim));
}

int model_kv_rows(const model *m, int il, int n_ctx, int max_batch)
{
    int window = m->layers[il].prog.window;
    /* a batch's keys are all stored before any of its queries attends */
    if (window > 0 && window + max_batch < n_ctx)
        return window + max_batch;
    return n_ctx;
}

int model_kv_resume(const model *m, int n_ctx, int max_batch, int filled, int p0)
{
    for (int il = 0; il < m->hp.n_layer; il++) {
        int rows = model_kv_rows(m, il, n_ctx, max_batch);
        /* a query at p0 reads positions from p0 - window + 1; the ring holds [filled - rows,
         * filled), and the batch from p0 on overwrites only positions older than that */
        if (rows < n_ctx && p0 > 0 && p0 - m->layers[il].prog.window + 1 < filled - rows)
            return 0;
    }
    return p0;
}

void model_layer_span(const model *m, int il, uint64_t *begin, uint64_t *end)
{
    const gguf_tensor *ts[LT_COUNT];
    int n = layer_tensors(m, il, ts);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = m->file->data_offset + ts[i]->offset;
        if (b < lo)
            lo = b;
        if (b + ts[i]->nbytes > hi)
            hi = b + ts[i]->nbytes;
    }
    *begin = lo;
    *end = hi;
}

int model_layer_experts(const model *m, int il, uint64_t begin[MODEL_EXPERT_TENSORS],
                        uint64_t slice[MODEL_EXPERT_TENSORS])
{
    const gguf_tensor *const *t = m->layers[il].t;
    if (!t[LT_FFN_GATE_INP] || !m->hp.n_expert)
        return 0;
    for (int j = 0; j < MODEL_EXPERT_TENSORS; j++) {
        const gguf_tensor *x = t[LT_FFN_GATE_EXPS + j];
        begin[j] = m->file->data_offset + x->offset;
        slice[j] = x->nbytes / (uint64_t)m->hp.n_expert;
    }
    return MODEL_EXPERT_TENSORS;
}

uint64_t model_layer_bytes(const model *m, int il)
{
    const gguf_tensor *ts[LT_COUNT];
    int n = layer_tensors(m, il, ts);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += ts[i]->nbytes;
    return sum;
}

double model_layer_token_bytes(const model *m, int il)
{
    const gguf_tensor *const *t = m->layers[il].t;
    double b = (double)model_layer_bytes(m, il);
    for (int s = LT_FFN_GATE_EXPS; s <= LT_FFN_DOWN_EXPS; s++)
        if (t[s])
            b -= (double)t[s]->nbytes * (1.0 - (double)m->hp.n_expert_used / m->hp.n_expert);
    return b;
}

uint64_t model_weight_bytes(const model *m)
{
    uint64_t bytes = model_head_bytes(m);
    for (int il = 0; il < m->hp.n_layer; il++)
        bytes += model_layer_bytes(m, il);
    return bytes;
}

uint64_t model_head_bytes(const model *m)
{
    uint64_t sum = m->tok_embd->nbytes + m->output_norm->nbytes;
    if (m->output == m->tok_embd)
        return sum;
    /* a separate embedding: the pages of the rows of MODEL_EMBD_ROWS tokens (a row starts
     * anywhere in a page and may end in the next) */
    uint64_t row = m->tok_embd->nbytes / (uint64_t)m->hp.n_vocab, page = 4096;
    uint64_t rows = (uint64_t)m->hp.n_vocab < MODEL_EMBD_ROWS ? (uint64_t)m->hp.n_vocab : MODEL_EMBD_ROWS;
    uint64_t used = rows * ((row + page - 1) / page + 1) * page;
    return m->output_norm->nbytes + m->output->nbytes +
           (used < m->tok_embd->nbytes ? used : m->tok_embd->nbytes);
}
