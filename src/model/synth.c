/* synth.c — random-weight GGUF models, streamed to disk.
 *
 * Randomness is counter-based: element i of row r of tensor NAME is a function of (seed, NAME,
 * r, i) only, so threads can fill rows in any order and the result never depends on the thread
 * count; and the same seed gives the same underlying weights at every type.
 *
 * Quantizing tens of billions of weights with the reference K-quant quantizers would take hours
 * (they search for the best scales), so large quantized tensors are assembled instead from a
 * pool of blocks that *were* quantized from Gaussian data of the tensor's scale: each block of
 * the file is a pool block picked by the same counter-based generator. Every block is then a
 * genuine quantization of N(0, sigma^2) values, and writing runs at memory speed. Tensors of at
 * most POOL_BLOCKS blocks (every small model the tests make) are quantized element by element. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "kernels/kern.h"
#include "kernels/types.h"
#include "model/synth.h"

#define POOL_BLOCKS 2048
#define MAX_POOLS 16
#define CHUNK_BYTES (4u << 20)
#define MAX_VOCAB (1 << 20)
/* Generator threads: the one thread limit of every command (the kernels' pool size). */
#define MAX_THREADS KERN_MAX_THREADS

/* ---- parameters ---- */

static const struct preset {
    const char *name;
    enum model_arch arch;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx;
    float rope_base, rms_eps;
    int head_dim, n_expert, n_expert_used;   /* 0: n_embd / n_head; a dense model */
} presets[] = {
    {"llama3-8b", ARCH_LLAMA, 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0f, 1e-5f, 0, 0, 0},
    {"llama3-70b", ARCH_LLAMA, 80, 8192, 28672, 64, 8, 128256, 8192, 500000.0f, 1e-5f, 0, 0, 0},
    {"qwen2.5-14b", ARCH_QWEN2, 48, 5120, 13824, 40, 8, 152064, 32768, 1000000.0f, 1e-5f, 0, 0, 0},
    {"qwen2.5-32b", ARCH_QWEN2, 64, 5120, 27648, 40, 8, 152064, 32768, 1000000.0f, 1e-5f, 0, 0, 0},
    {"qwen2.5-72b", ARCH_QWEN2, 80, 8192, 29568, 64, 8, 152064, 32768, 1000000.0f, 1e-5f, 0, 0, 0},
    /* n_ff is an expert's width */
    {"qwen3-30b-a3b", ARCH_QWEN3MOE, 48, 2048, 768, 32, 4, 151936, 32768, 1000000.0f, 1e-6f,
     128, 128, 8},
    {"qwen3-235b-a22b", ARCH_QWEN3MOE, 94, 4096, 1536, 64, 4, 151936, 32768, 1000000.0f, 1e-6f,
     128, 128, 8},
};

static const struct ftype_info {
    const char *name;
    enum dtype base;       /* every matrix not named below */
    enum dtype output;     /* output.weight (and token_embd when tied) */
    enum dtype more_bits;  /* attn_v and ffn_down of the layers that get more bits */
    uint32_t file_type;    /* general.file_type (llama.cpp's numbering) */
} ftypes[SYNTH_FTYPE_COUNT] = {
    [SYNTH_F32] = {"f32", DT_F32, DT_F32, DT_F32, 0},
    [SYNTH_F16] = {"f16", DT_F16, DT_F16, DT_F16, 1},
    [SYNTH_BF16] = {"bf16", DT_BF16, DT_BF16, DT_BF16, 32},
    [SYNTH_Q8_0] = {"q8_0", DT_Q8_0, DT_Q8_0, DT_Q8_0, 7},
    [SYNTH_Q4_0] = {"q4_0", DT_Q4_0, DT_Q6_K, DT_Q4_0, 2},
    [SYNTH_Q4_K] = {"q4_k", DT_Q4_K, DT_Q6_K, DT_Q4_K, 14},
    [SYNTH_Q5_K] = {"q5_k", DT_Q5_K, DT_Q6_K, DT_Q5_K, 16},
    [SYNTH_Q6_K] = {"q6_k", DT_Q6_K, DT_Q6_K, DT_Q6_K, 18},
    [SYNTH_Q4_K_M] = {"q4_k_m", DT_Q4_K, DT_Q6_K, DT_Q6_K, 15},
    [SYNTH_Q5_K_M] = {"q5_k_m", DT_Q5_K, DT_Q6_K, DT_Q6_K, 17},
};

void synth_defaults(synth_params *p)
{
    *p = (synth_params){
        .arch = ARCH_LLAMA, .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 8,
        .n_head_kv = 4, .n_ctx = 4096, .n_vocab = 512, .rope_base = 500000.0f,
        .rms_eps = 1e-5f, .n_expert_used = 2, .ftype = SYNTH_F32, .seed = 1,
        .name = "synthetic", .n_threads = 2,
    };
}

int synth_preset(synth_params *p, const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const struct preset *s = &presets[i];
        if (strcmp(s->name, name))
            continue;
        p->arch = s->arch;
        p->n_layer = s->n_layer;
        p->n_embd = s->n_embd;
        p->n_ff = s->n_ff;
        p->n_head = s->n_head;
        p->n_head_kv = s->n_head_kv;
        p->head_dim = s->head_dim;
        p->n_expert = s->n_expert;
        p->n_expert_used = s->n_expert ? s->n_expert_used : p->n_expert_used;
        p->n_vocab = s->n_vocab;
        p->n_ctx = s->n_ctx;
        p->rope_base = s->rope_base;
        p->rms_eps = s->rms_eps;
        p->tied = false;
        return 0;
    }
    return -1;
}

const char *synth_preset_names(void)
{
    return "llama3-8b llama3-70b qwen2.5-14b qwen2.5-32b qwen2.5-72b qwen3-30b-a3b "
           "qwen3-235b-a22b";
}

int synth_ftype_from_name(const char *name)
{
    for (int i = 0; i < SYNTH_FTYPE_COUNT; i++)
        if (!strcmp(ftypes[i].name, name))
            return i;
    return -1;
}

const char *synth_ftype_name(enum synth_ftype t)
{
    return ftypes[t].name;
}

/* llama.cpp's rule for which layers of a mix get more bits: the first and last eighth of the
 * stack, and every third layer in between. */
static bool more_bits_layer(int layer, int n_layer)
{
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* The type a tensor gets under scheme t: role is the llama.cpp tensor name without "blk.N."
 * (e.g. "attn_v.weight", "output.weight"), layer its block (-1 for none), n_in its row length.
 * Rows that the preferred type's block size does not divide fall back to Q8_0, then F16. */
static enum dtype synth_tensor_type(enum synth_ftype t, const char *role, int layer, int n_layer,
                                    int64_t n_in, bool tied)
{
    const struct ftype_info *f = &ftypes[t];
    enum dtype type = f->base;
    if (!strcmp(role, "output.weight") || (tied && !strcmp(role, "token_embd.weight")))
        type = f->output;
    else if ((!strcmp(role, "attn_v.weight") || !strcmp(role, "ffn_down.weight")) &&
             more_bits_layer(layer, n_layer))
        type = f->more_bits;
    if (n_in % dtype_get(type)->block_size == 0)
        return type;
    return n_in % 32 == 0 && f->base != DT_F32 ? DT_Q8_0 : f->base == DT_F32 ? DT_F32 : DT_F16;
}

static int check_params(const synth_params *p, char *err, size_t errlen)
{
    /* Parameters are named as synth_params names them; a command line maps them to its flags. */
    const struct { const char *name; long long v, lo, hi; } r[] = {
        {"n_layer", p->n_layer, 1, 1024},     {"n_embd", p->n_embd, 1, 1 << 17},
        {"n_ff", p->n_ff, 1, 1 << 19},        {"n_head", p->n_head, 1, 4096},
        {"n_head_kv", p->n_head_kv, 1, 4096}, {"n_ctx", p->n_ctx, 1, 1 << 24},
        {"n_threads", p->n_threads, 1, MAX_THREADS},
        {"n_vocab", p->vocab_from ? 300 : p->n_vocab, 258, MAX_VOCAB},
        {"head_dim", p->head_dim, 0, 4096},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].v < r[i].lo || r[i].v > r[i].hi) {
            snprintf(err, errlen, "%s %lld is out of range (%lld..%lld)", r[i].name, r[i].v,
                     r[i].lo, r[i].hi);
            return -1;
        }
    if (p->n_head % p->n_head_kv) {
        snprintf(err, errlen, "n_head %d is not a multiple of n_head_kv %d", p->n_head,
                 p->n_head_kv);
        return -1;
    }
    if (!p->head_dim && p->n_embd % p->n_head) {
        snprintf(err, errlen, "n_embd %d is not a multiple of n_head %d (or give head_dim)",
                 p->n_embd, p->n_head);
        return -1;
    }
    int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    if (hd % 2) {
        snprintf(err, errlen, "head dimension %d is odd (rotary embeddings rotate pairs)", hd);
        return -1;
    }
    if (!(p->rope_base > 0) || !(p->rms_eps > 0) || !isfinite(p->rope_base) || !isfinite(p->rms_eps)) {
        snprintf(err, errlen, "rope_base and rms_eps must be positive");
        return -1;
    }
    if (p->n_swa < 0) {
        snprintf(err, errlen, "sliding window %d is negative", p->n_swa);
        return -1;
    }
    const arch_desc *ad = arch_get(p->arch);
    if (ad && (ad->required & (1u << LT_FFN_GATE_INP)) && p->n_expert < 1) {
        snprintf(err, errlen, "architecture %s needs n_expert", ad->name);
        return -1;
    }
    if (ad && p->n_expert && !((ad->required | ad->optional) & (1u << LT_FFN_GATE_INP))) {
        snprintf(err, errlen, "architecture %s has no experts", ad->name);
        return -1;
    }
    if (p->n_expert < 0 || p->n_expert > LOP_MAX_EXPERTS ||
        (p->n_expert && (p->n_expert_used < 1 || p->n_expert_used > p->n_expert))) {
        snprintf(err, errlen, "n_expert %d and n_expert_used %d: at most %d experts, of "
                 "which 1 to all are used", p->n_expert, p->n_expert_used, LOP_MAX_EXPERTS);
        return -1;
    }
    if ((unsigned)p->ftype >= SYNTH_FTYPE_COUNT || !arch_get(p->arch)) {
        snprintf(err, errlen, "invalid type scheme or architecture");
        return -1;
    }
    return 0;
}

/* ---- the tensor list ---- */

typedef struct tspec {
    char name[48];
    uint32_t n_dims;
    uint64_t ne[3];   /* rows of ne[0] values: ne[1] * ne[2] of them */
    enum dtype type;
    float mean, sigma;
} tspec;

typedef struct tlist {
    tspec *t;
    int n;
} tlist;

static void add(tlist *l, const synth_params *p, int layer, const char *role,
                const uint64_t ne[3], float mean, float sigma)
{
    tspec *t = &l->t[l->n++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, role);
    else
        snprintf(t->name, sizeof t->name, "%s", role);
    /* vectors (norms, biases) stay F32, as in every converted model */
    t->n_dims = ne[2] > 1 ? 3 : ne[1] > 1 ? 2 : 1;
    memcpy(t->ne, ne, sizeof t->ne);
    /* routers stay F32 too (llama.cpp's quantizer leaves them) */
    t->type = t->n_dims == 1 || strstr(role, "gate_inp")
                  ? DT_F32
                  : synth_tensor_type(p->ftype, role, layer, p->n_layer, (int64_t)ne[0], p->tied);
    t->mean = mean;
    t->sigma = sigma;
}

/* llama.cpp's tensor order: embedding, final norm, output, then each block's tensors in the
 * order of the layer slots (arch.h): those its program uses (the program its architecture
 * builds from what the row allows, experts when p asks for them). */
static tlist make_tensors(const synth_params *p, int n_vocab)
{
    const arch_desc *ad = arch_get(p->arch);
    const uint64_t hd = (uint64_t)(p->head_dim ? p->head_dim : p->n_embd / p->n_head);
    const uint64_t size[] = {
        [DIM_ONE] = 1, [DIM_EMBD] = (uint64_t)p->n_embd, [DIM_Q] = (uint64_t)p->n_head * hd,
        [DIM_KV] = (uint64_t)p->n_head_kv * hd, [DIM_FF] = (uint64_t)p->n_ff, [DIM_HEAD] = hd,
        [DIM_EXPERT] = (uint64_t)p->n_expert,
    };
    bool has[LT_COUNT];
    for (int s = 0; s < LT_COUNT; s++)
        has[s] = ((ad->required | ad->optional) & (1u << s)) &&
                 (s != LT_FFN_GATE_INP || p->n_expert > 0);
    layer_prog prog = {0};
    ad->build(ad, has, &prog);
    bool used[LT_COUNT] = {false};
    for (int i = 0; i < prog.n_op; i++) {
        const layer_op *op = &prog.op[i];
        for (int k = 0; k < (op->kind == LOP_MOE ? 4 : 1); k++) {
            if (op->w != LOP_NONE)
                used[op->w + k] = true;
            if (op->b != LOP_NONE)
                used[op->b + k] = true;
        }
    }
    tlist l = {calloc(3 + (size_t)p->n_layer * LT_COUNT, sizeof(tspec)), 0};
    if (!l.t)
        return l;
    const float norm_sd = 0.05f, bias_sd = 0.1f;
    const uint64_t e = (uint64_t)p->n_embd;
    add(&l, p, -1, "token_embd.weight", (const uint64_t[3]){e, (uint64_t)n_vocab, 1}, 0, 1);
    add(&l, p, -1, "output_norm.weight", (const uint64_t[3]){e, 1, 1}, 1, norm_sd);
    if (!p->tied)
        add(&l, p, -1, "output.weight", (const uint64_t[3]){e, (uint64_t)n_vocab, 1}, 0,
            1 / sqrtf((float)e));
    for (int i = 0; i < p->n_layer; i++)
        for (int s = 0; s < LT_COUNT; s++) {
            if (!used[s])
                continue;
            const slot_desc *sd = arch_slot((enum layer_slot)s);
            const uint64_t ne[3] = {size[sd->ne0], size[sd->ne1], size[sd->ne2]};
            if (sd->matrix)   /* N(0, 1/n_in) */
                add(&l, p, i, sd->name, ne, 0, 1 / sqrtf((float)ne[0]));
            else if (strstr(sd->name, "bias"))
                add(&l, p, i, sd->name, ne, 0, bias_sd);
            else              /* norms */
                add(&l, p, i, sd->name, ne, 1, norm_sd);
        }
    return l;
}

/* ---- counter-based random numbers ---- */

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The splitmix64 finalizer: a bijection that scrambles a counter into 64 random-looking bits. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *c = name; *c; c++)
        h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed));
}

static uint64_t row_key(uint64_t key, uint64_t row)
{
    return mix64(key + row * 0xd1b54a32d192ed03ull);
}

/* mean + sigma * (approximately) N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall), one
 * 64-bit draw per value. Its tails stop at 3.46 sigma, which random weights do not miss. */
static void fill_gaussian(float *x, int64_t n, uint64_t key, float mean, float sigma)
{
    const float scale = sigma / 37837.227f; /* sqrt(4 * (65536^2 - 1) / 12) */
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = mix64(key + (uint64_t)i * GOLDEN);
        uint32_t s = (uint32_t)(z & 0xffff) + (uint32_t)((z >> 16) & 0xffff) +
                     (uint32_t)((z >> 32) & 0xffff) + (uint32_t)(z >> 48);
        x[i] = mean + ((float)s - 131070.0f) * scale;
    }
}

/* ---- parallel generation ---- */

typedef void (*work_fn)(void *arg, int ith, int nth, float *scratch);

typedef struct worker {
    work_fn fn;
    void *arg;
    int ith, nth;
    float *scratch;
} worker;

static void *worker_main(void *a)
{
    worker *wk = a;
    wk->fn(wk->arg, wk->ith, wk->nth, wk->scratch);
    return NULL;
}

typedef struct pool {
    enum dtype type;
    float sigma;
    uint8_t *blocks; /* POOL_BLOCKS quantized blocks */
} pool;

typedef struct run {
    uint64_t seed;
    int nth;
    float *scratch[MAX_THREADS];
    pool pools[MAX_POOLS];
    int n_pools;
} run;

/* fn(arg, i, nth) for i < nth, on nth threads (the caller's included). A thread that cannot be
 * started has its share run by the caller: the result is the same either way. */
static void parallel(run *r, work_fn fn, void *arg)
{
    worker wk[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int i = 0; i < r->nth; i++)
        wk[i] = (worker){fn, arg, i, r->nth, r->scratch[i]};
    for (int i = 1; i < r->nth; i++)
        started[i] = !pthread_create(&th[i], NULL, worker_main, &wk[i]);
    for (int i = 0; i < r->nth; i++)
        if (!started[i])
            worker_main(&wk[i]);
    for (int i = 1; i < r->nth; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

typedef struct pool_job {
    pool *pl;
    const kern_type *kt;
    uint64_t key;
    uint32_t block_size, block_bytes;
} pool_job;

static void pool_work(void *arg, int ith, int nth, float *scratch)
{
    const pool_job *j = arg;
    for (uint64_t b = (uint64_t)POOL_BLOCKS * ith / nth; b < (uint64_t)POOL_BLOCKS * (ith + 1) / nth; b++) {
        fill_gaussian(scratch, j->block_size, row_key(j->key, b), 0, j->pl->sigma);
        j->kt->from_float(scratch, j->pl->blocks + b * j->block_bytes, j->block_size);
    }
}

/* The pool of blocks for (type, sigma), made on first use; NULL when the table is full (the
 * caller then quantizes directly: slower, never wrong). */
static const pool *get_pool(run *r, enum dtype type, float sigma)
{
    for (int i = 0; i < r->n_pools; i++)
        if (r->pools[i].type == type && r->pools[i].sigma == sigma)
            return &r->pools[i];
    const dtype_info *d = dtype_get(type);
    if (r->n_pools == MAX_POOLS)
        return NULL;
    pool *pl = &r->pools[r->n_pools];
    pl->blocks = malloc((size_t)POOL_BLOCKS * d->block_bytes);
    if (!pl->blocks)
        return NULL;
    pl->type = type;
    pl->sigma = sigma;
    uint32_t sigma_bits;
    memcpy(&sigma_bits, &sigma, 4);
    pool_job j = {pl, kern_type_get(type), mix64(r->seed ^ mix64((uint64_t)type << 32 | sigma_bits)),
                  d->block_size, d->block_bytes};
    parallel(r, pool_work, &j);
    r->n_pools++;
    return pl;
}

typedef struct rows_job {
    const tspec *t;
    const kern_type *kt;
    const pool *pl;
    uint64_t key, row0, nrows;
    size_t row_bytes;
    uint8_t *out;
} rows_job;

static void rows_work(void *arg, int ith, int nth, float *scratch)
{
    const rows_job *j = arg;
    const dtype_info *d = dtype_get(j->t->type);
    uint64_t n_blocks = j->t->ne[0] / d->block_size;
    for (uint64_t r = j->nrows * ith / nth; r < j->nrows * (ith + 1) / nth; r++) {
        uint64_t key = row_key(j->key, j->row0 + r);
        uint8_t *dst = j->out + r * j->row_bytes;
        if (j->pl) {
            for (uint64_t b = 0; b < n_blocks; b++) {
                uint64_t pick = mix64(key + b * GOLDEN) % POOL_BLOCKS;
                memcpy(dst + b * d->block_bytes, j->pl->blocks + pick * d->block_bytes, d->block_bytes);
            }
        } else {
            fill_gaussian(scratch, (int64_t)j->t->ne[0], key, j->t->mean, j->t->sigma);
            j->kt->from_float(scratch, dst, (int64_t)j->t->ne[0]);
        }
    }
}

static int write_tensor(run *r, gguf_writer *w, const tspec *t, uint8_t *chunk, size_t chunk_cap)
{
    const dtype_info *d = dtype_get(t->type);
    rows_job j = {.t = t, .kt = kern_type_get(t->type), .key = name_key(r->seed, t->name),
                  .row_bytes = (size_t)dtype_row_bytes(t->type, t->ne[0]), .out = chunk};
    const uint64_t rows = t->ne[1] * t->ne[2];
    if (d->block_size > 1 && t->ne[0] / d->block_size * rows > POOL_BLOCKS)
        j.pl = get_pool(r, t->type, t->sigma);
    uint64_t per_chunk = chunk_cap / j.row_bytes;
    for (uint64_t row0 = 0; row0 < rows; row0 += per_chunk) {
        j.row0 = row0;
        j.nrows = rows - row0 < per_chunk ? rows - row0 : per_chunk;
        parallel(r, rows_work, &j);
        if (gguf_writer_write(w, chunk, j.nrows * j.row_bytes))
            return -1;
    }
    return 0;
}

/* ---- vocabulary ---- */

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the others for
 * the code points from 256 upwards, in byte order. */
static int byte_token(uint8_t byte, char out[4])
{
    uint32_t cp = byte;
    if (!((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174)) {
        cp = 256;
        for (int b = 0; b < byte; b++)
            if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174))
                cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_UNUSED = 5, BUILTIN_BOS = 256, BUILTIN_EOS = 257 };

/* Byte-level BPE without merges: every byte is a token (ids 0..255), then BOS, EOS, and
 * unused padding up to n tokens. */
static int put_builtin_vocab(gguf_writer *w, int n, char *err, size_t errlen)
{
    char (*text)[24] = malloc((size_t)n * sizeof *text);
    const char **ptrs = malloc((size_t)n * sizeof *ptrs);
    int32_t *types = malloc((size_t)n * sizeof *types);
    if (!text || !ptrs || !types) {
        free(text);
        free(ptrs);
        free(types);
        snprintf(err, errlen, "out of memory for a vocabulary of %d tokens", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        ptrs[i] = text[i];
        if (i < 256) {
            text[i][byte_token((uint8_t)i, text[i])] = 0;
            types[i] = TOKEN_NORMAL;
        } else if (i == BUILTIN_BOS || i == BUILTIN_EOS) {
            snprintf(text[i], sizeof text[i], i == BUILTIN_BOS ? "<|begin_of_text|>" : "<|end_of_text|>");
            types[i] = TOKEN_CONTROL;
        } else {
            snprintf(text[i], sizeof text[i], "[PAD%d]", i);
            types[i] = TOKEN_UNUSED;
        }
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", ptrs, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)n);
    gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", NULL, 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", BUILTIN_BOS);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", BUILTIN_EOS);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    free(text);
    free(ptrs);
    free(types);
    return 0;
}

/* ---- the file ---- */

static void put_hparams(gguf_writer *w, const synth_params *p, int n_vocab, bool quantized)
{
    const char *arch = arch_get(p->arch)->name;
    int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    char key[96];
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", p->name ? p->name : "synthetic");
    gguf_writer_set_u32(w, "general.file_type", ftypes[p->ftype].file_type);
    if (quantized)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    const struct { const char *suffix; int v; } ints[] = {
        {"vocab_size", n_vocab},          {"context_length", p->n_ctx},
        {"embedding_length", p->n_embd},  {"block_count", p->n_layer},
        {"feed_forward_length", p->n_ff}, {"attention.head_count", p->n_head},
        {"attention.head_count_kv", p->n_head_kv}, {"attention.key_length", hd},
        {"attention.value_length", hd},   {"rope.dimension_count", hd},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, ints[i].suffix);
        gguf_writer_set_u32(w, key, (uint32_t)ints[i].v);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    gguf_writer_set_f32(w, key, p->rope_base);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_writer_set_f32(w, key, p->rms_eps);
    if (p->n_expert > 0) {
        const struct { const char *suffix; int v; } moe[] = {
            {"expert_count", p->n_expert}, {"expert_used_count", p->n_expert_used},
            {"expert_feed_forward_length", p->n_ff},
        };
        for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
            snprintf(key, sizeof key, "%s.%s", arch, moe[i].suffix);
            gguf_writer_set_u32(w, key, (uint32_t)moe[i].v);
        }
    }
    if (p->n_swa > 0) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        gguf_writer_set_u32(w, key, (uint32_t)p->n_swa);
    }
}

static gguf_file *open_vocab(const char *path, int *n_vocab, char *err, size_t errlen)
{
    gguf_file *v = gguf_open(path, err, errlen);
    if (!v)
        return NULL;
    const gguf_array *tokens = gguf_get_arr(v, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GGUF_STRING || tokens->n < 1 || tokens->n > MAX_VOCAB) {
        snprintf(err, errlen, "%s: no tokenizer.ggml.tokens list of 1..%d strings (not a vocabulary)",
                 path, MAX_VOCAB);
        gguf_close(v);
        return NULL;
    }
    *n_vocab = (int)tokens->n;
    return v;
}

static void free_run(run *r)
{
    for (int i = 0; i < r->n_pools; i++)
        free(r->pools[i].blocks);
    for (int i = 0; i < MAX_THREADS; i++)
        free(r->scratch[i]);
}

int synth_write(const synth_params *p, const char *path, synth_stats *stats, char *err,
                size_t errlen)
{
    if (check_params(p, err, errlen))
        return -1;
    int n_vocab = p->n_vocab;
    gguf_file *vocab = NULL;
    if (p->vocab_from && !(vocab = open_vocab(p->vocab_from, &n_vocab, err, errlen)))
        return -1;
    tlist tl = make_tensors(p, n_vocab);
    run r = {.seed = p->seed, .nth = p->n_threads};
    uint64_t max_row = 256, max_row_bytes = 0;
    bool quantized = false;
    for (int i = 0; tl.t && i < tl.n; i++) {
        max_row = tl.t[i].ne[0] > max_row ? tl.t[i].ne[0] : max_row;
        uint64_t rb = dtype_row_bytes(tl.t[i].type, tl.t[i].ne[0]);
        max_row_bytes = rb > max_row_bytes ? rb : max_row_bytes;
        quantized |= dtype_get(tl.t[i].type)->block_size > 1;
    }
    size_t chunk_cap = max_row_bytes > CHUNK_BYTES ? (size_t)max_row_bytes : CHUNK_BYTES;
    uint8_t *chunk = malloc(chunk_cap);
    bool ok = tl.t && chunk;
    for (int i = 0; ok && i < r.nth; i++)
        ok = (r.scratch[i] = malloc(max_row * sizeof(float))) != NULL;
    gguf_writer *w = NULL;
    if (!ok) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (int i = 0; i < tl.n && ok; i++)
            if (!kern_type_get(tl.t[i].type)) {
                snprintf(err, errlen, "tensor %s: the kernels cannot make %s data", tl.t[i].name,
                         dtype_get(tl.t[i].type)->name);
                ok = false;
            }
        if (ok)
            w = gguf_writer_create(path, 32, err, errlen);
    }
    int rc = -1;
    if (w) {
        put_hparams(w, p, n_vocab, quantized);
        if (vocab) {
            for (uint64_t i = 0; i < vocab->n_kv; i++)
                if (vocab->kv[i].key.len > 10 && !memcmp(vocab->kv[i].key.ptr, "tokenizer.", 10))
                    gguf_writer_copy_kv(w, &vocab->kv[i]);
        } else if (put_builtin_vocab(w, n_vocab, err, errlen)) {
            char ignored[8]; /* the vocabulary's error is the one to report */
            gguf_writer_finish(w, ignored, sizeof ignored);
            w = NULL;
        }
    }
    if (w) {
        for (int i = 0; i < tl.n; i++)
            gguf_writer_add_tensor(w, tl.t[i].name, tl.t[i].type, tl.t[i].n_dims, tl.t[i].ne);
        bool written = gguf_writer_begin_data(w) == 0;
        for (int i = 0; written && i < tl.n; i++)
            written = write_tensor(&r, w, &tl.t[i], chunk, chunk_cap) == 0;
        rc = gguf_writer_finish(w, err, errlen);
    }
    if (rc == 0 && stats) {
        struct stat st;
        *stats = (synth_stats){.n_tensors = (uint64_t)tl.n};
        for (int i = 0; i < tl.n; i++)
            stats->n_params += tl.t[i].ne[0] * tl.t[i].ne[1] * tl.t[i].ne[2];
        stats->n_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    gguf_close(vocab);
    free_run(&r);
    free(chunk);
    free(tl.t);
    return rc;
}
