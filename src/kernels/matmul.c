/* matmul.c — y = W x for a batch of tokens, split across the pool.
 *
 * The activations are quantized once per call to the weight type's activation format (in
 * parallel, block ranges per thread). The output is then cut into row blocks handed out from a
 * shared counter, so a thread slowed by a neighbour on a busy machine just takes fewer blocks.
 * Inside a row block the tokens are walked in blocks too:
 *   - decode (one token, or up to MM_STREAM_TOKENS): row blocks are small and each weight row is
 *     streamed exactly once, every token of the batch taking it from L1;
 *   - prefill: a row block's weights (sized for L2) are reused by every token block (sized for
 *     L2 as well), and the tile kernel reuses each loaded weight across several tokens in
 *     registers, so prefill is bound by arithmetic rather than by memory. Where the path packs
 *     the type (mm_packed, types.h) the thread first packs its row block into panels in its own
 *     scratch, and the token blocks run over those.
 * A matrix kept packed (kern_keep) is already panels: every batch runs the kept form's tile over
 * its row blocks, packing nothing, except that a wide batch unpacks each row block into the
 * packed tiles' panels first (mm_kept.wide_tokens).
 * Each output element is computed by one tile call whose arithmetic does not depend on where the
 * tile sits (types.h), so results are identical for any thread count and any batch size. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kern_impl.h"

/* Cache budgets for one prefill row block: the weights it reuses and the activations of one
 * token block, together comfortably inside a 1 MB L2 (and still useful on 512 KB). */
#define WEIGHT_BLOCK_BYTES (192 * 1024)
#define ACT_BLOCK_BYTES (192 * 1024)
/* Decode row blocks: large enough to stream well, small enough to balance. */
#define DECODE_BLOCK_BYTES (64 * 1024)

struct quant_job {
    act_quantize_fn quantize;
    const float *x;
    uint8_t *dst;
    int64_t n_blocks;
    int block_size, block_bytes;
};

static void quantize_worker(void *arg, int ith, int nth)
{
    struct quant_job *J = arg;
    int64_t b0 = J->n_blocks * ith / nth, b1 = J->n_blocks * (ith + 1) / nth;
    if (b1 > b0)
        J->quantize(J->x + b0 * J->block_size, J->dst + b0 * J->block_bytes,
                      (b1 - b0) * J->block_size);
}

/* The packed tiles' own form of the activations (mm_packed.act_prep), tokens split by thread. */
struct prep_job {
    const mm_packed *packed;
    const uint8_t *a;
    uint8_t *dst;
    size_t a_stride, dst_stride;
    int n, n_tokens;
};

static void prep_worker(void *arg, int ith, int nth)
{
    struct prep_job *J = arg;
    for (int t = J->n_tokens * ith / nth; t < J->n_tokens * (ith + 1) / nth; t++)
        J->packed->act_prep(J->n, J->a + (size_t)t * J->a_stride, J->dst + (size_t)t * J->dst_stride);
}

/* The row blocks thread i owns at first: [next, end). Padded so that threads claiming blocks do
 * not contend for one cache line. */
struct mm_range {
    _Atomic int next;
    int end;
    char pad[64 - sizeof(_Atomic int) - sizeof(int)];
};

struct mm_job {
    const mm_kernel *kernel; /* NULL: one vec_dot per output */
    const mm_packed *packed; /* non-NULL: this batch runs packed tiles */
    const mm_kept *kept;     /* non-NULL: w is this form's panels (kern_keep) */
    bool unpack;             /* kept panels unpacked into packed's first */
    vec_dot_fn vec_dot;
    const uint8_t *w, *a;
    size_t w_stride, a_stride;
    float *y;
    int n_in, n_out, n_tokens;
    int rows_per_block, tokens_per_block, n_units;
    struct mm_range *range; /* one per thread, in the context's scratch */
    uint8_t *panels;        /* packed: thread i's panels at i * thread_panel_bytes */
    size_t panel_bytes, thread_panel_bytes, kept_bytes; /* one panel: packed's, kept's */
};

static void run_tile(const struct mm_job *J, int r0, int nr, int t0, int nt)
{
    const uint8_t *w = J->w + (size_t)r0 * J->w_stride, *a = J->a + (size_t)t0 * J->a_stride;
    float *y = J->y + (size_t)t0 * J->n_out + r0;
    if (J->kernel) {
        J->kernel->tile(J->n_in, nr, nt, w, J->w_stride, a, J->a_stride, y, (size_t)J->n_out);
        return;
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            J->vec_dot(J->n_in, &y[(size_t)t * J->n_out + r], w + (size_t)r * J->w_stride,
                       a + (size_t)t * J->a_stride);
}

static inline int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* Claim a row block: from this thread's own range while it lasts (one contiguous stream of
 * weights per thread, which the hardware prefetchers follow best), then from the others' (a
 * thread slowed down by a neighbour on a busy machine gets help). -1 when all are taken. */
static int claim_block(struct mm_job *J, int ith, int nth)
{
    for (int k = 0; k < nth; k++) {
        struct mm_range *r = &J->range[(ith + k) % nth];
        if (atomic_load_explicit(&r->next, memory_order_relaxed) >= r->end)
            continue;
        int u = atomic_fetch_add(&r->next, 1);
        if (u < r->end)
            return u;
    }
    return -1;
}

/* Rows [r_begin, r_end) packed into this thread's panels (or a kept matrix's own panels), then
 * every token block over them (a batch of one tile's tokens streams, where the path can:
 * mm_packed.stream). */
static void run_packed_block(const struct mm_job *J, int ith, int r_begin, int r_end)
{
    const mm_packed *P = J->packed;
    const uint8_t *panels;
    if (J->kept) {
        const uint8_t *src = J->w + (size_t)(r_begin / P->rows) * J->kept_bytes;
        uint8_t *own = J->panels + (size_t)ith * J->thread_panel_bytes;
        for (int r = r_begin, p = 0; J->unpack && r < r_end; r += P->rows, p++)
            J->kept->unpack(J->n_in, src + (size_t)p * J->kept_bytes, own + (size_t)p * J->panel_bytes);
        panels = J->unpack ? own : src;
    } else if (P->stream && J->n_tokens <= P->tokens) {
        for (int r = r_begin; r < r_end; r += P->rows)
            P->stream(J->n_in, min_int(P->rows, r_end - r), J->n_tokens, J->w + (size_t)r * J->w_stride,
                      J->w_stride, J->a, J->a_stride, J->y + r, (size_t)J->n_out);
        return;
    } else {
        uint8_t *own = J->panels + (size_t)ith * J->thread_panel_bytes;
        for (int r = r_begin, p = 0; r < r_end; r += P->rows, p++)
            P->pack(J->n_in, min_int(P->rows, r_end - r), J->w + (size_t)r * J->w_stride, J->w_stride,
                    own + (size_t)p * J->panel_bytes);
        panels = own;
    }
    for (int tb = 0; tb < J->n_tokens; tb += J->tokens_per_block) {
        int tb_end = min_int(tb + J->tokens_per_block, J->n_tokens);
        for (int r = r_begin, p = 0; r < r_end; r += P->rows, p++)
            for (int t = tb; t < tb_end; t += P->tokens)
                P->tile(J->n_in, min_int(P->rows, r_end - r), min_int(P->tokens, tb_end - t),
                        panels + (size_t)p * J->panel_bytes, J->a + (size_t)t * J->a_stride,
                        J->a_stride, J->y + (size_t)t * J->n_out + r, (size_t)J->n_out);
    }
}

static void matmul_worker(void *arg, int ith, int nth)
{
    struct mm_job *J = arg;
    if (J->packed) {
        for (int u; (u = claim_block(J, ith, nth)) >= 0;) {
            int r_begin = u * J->rows_per_block;
            run_packed_block(J, ith, r_begin, min_int(r_begin + J->rows_per_block, J->n_out));
        }
        return;
    }
    int tile_rows = !J->kernel ? 1
                    : J->n_tokens > MM_STREAM_TOKENS ? J->kernel->rows
                                                     : J->kernel->decode_rows;
    int tile_tokens = J->kernel ? J->kernel->tokens : 1;
    for (;;) {
        int u = claim_block(J, ith, nth);
        if (u < 0)
            return;
        int r_begin = u * J->rows_per_block, r_end = min_int(r_begin + J->rows_per_block, J->n_out);
        for (int tb = 0; tb < J->n_tokens; tb += J->tokens_per_block) {
            int tb_end = min_int(tb + J->tokens_per_block, J->n_tokens);
            for (int r = r_begin; r < r_end; r += tile_rows)
                for (int t = tb; t < tb_end; t += tile_tokens)
                    run_tile(J, r, min_int(tile_rows, r_end - r), t, min_int(tile_tokens, tb_end - t));
        }
    }
}

/* Round v down to a multiple of m, but not below m. */
static int round_block(long v, int m)
{
    return v < m ? m : (int)(v / m * m);
}

/* Whether a batch of n_tokens from kept panels unpacks them into the packed tiles' panels. */
static bool kept_unpacks(const mm_kept *K, int n_tokens)
{
    return K->wide_tokens > 0 && n_tokens >= K->wide_tokens;
}

/* The packed tiles a batch of n_tokens of this weight type runs, or NULL; from kept panels
 * (kept), the kept form's, or the packed tiles' for a batch that unpacks. */
static const mm_packed *packed_for(const kern_type *kt, int n_tokens, bool kept)
{
    if (!kt->tile)
        return NULL;
    const mm_kept *K = kt->tile->kept;
    if (kept)
        return !K ? NULL : kept_unpacks(K, n_tokens) ? kt->tile->packed : &K->form;
    const mm_packed *P = kt->tile->packed;
    return P && n_tokens >= P->min_tokens ? P : NULL;
}

/* The most rows a prefill row block of this type holds (the balancing in kern_matmul only
 * shrinks it): what sizes the packed panels' scratch. */
static int prefill_block_rows(enum dtype wt, int n_in, int tile_rows)
{
    return round_block((long)(WEIGHT_BLOCK_BYTES / dtype_row_bytes(wt, (uint64_t)n_in)), tile_rows);
}

/* Bytes of quantized activations for n_tokens rows of n_in inputs, of one thread's packed
 * panels and of the packed tiles' activations, over every weight type. */
static void scratch_bytes(int n_in, int n_tokens, size_t *act, size_t *panels, size_t *prep)
{
    *act = *panels = *prep = 0;
    for (int t = 0; t < DT_COUNT; t++) {
        const kern_type *kt = kern_type_get((enum dtype)t);
        if (!kt)
            continue;
        if (kt->act_type != DT_F32) {
            size_t b = dtype_row_bytes(kt->act_type, (uint64_t)n_in) * (size_t)n_tokens;
            *act = b > *act ? b : *act;
        }
        if (dtype_row_bytes((enum dtype)t, (uint64_t)n_in) == 0)
            continue;
        const mm_packed *P = packed_for(kt, n_tokens, false);
        if (P) {
            int rows = prefill_block_rows((enum dtype)t, n_in, P->rows);
            size_t b = (size_t)((rows + P->rows - 1) / P->rows) * P->bytes(n_in);
            *panels = b > *panels ? b : *panels;
        }
        for (int kept = 0; kept < 2; kept++) {
            P = packed_for(kt, n_tokens, kept);
            size_t b = P && P->act_prep ? P->act_bytes(n_in) * (size_t)n_tokens : 0;
            *prep = b > *prep ? b : *prep;
        }
    }
}

int kern_ctx_reserve(kern_ctx *c, int n_in, int n_tokens)
{
    size_t act, panels, prep;
    scratch_bytes(n_in, n_tokens, &act, &panels, &prep);
    size_t nth = (size_t)kern_ctx_threads(c);
    return (act == 0 || kern_scratch_get(c, KERN_SCRATCH_ACT, act)) &&
                   (panels == 0 || kern_scratch_get(c, KERN_SCRATCH_PANELS, panels * nth)) &&
                   (prep == 0 || kern_scratch_get(c, KERN_SCRATCH_PREP, prep)) &&
                   kern_scratch_get(c, KERN_SCRATCH_RANGES, sizeof(struct mm_range) * nth)
               ? 0
               : -1;
}

void kern_ctx_release(kern_ctx *c, int n_in, int n_tokens)
{
    size_t act, panels, prep;
    scratch_bytes(n_in, n_tokens, &act, &panels, &prep);
    kern_scratch_release(c, KERN_SCRATCH_ACT, act);
    kern_scratch_release(c, KERN_SCRATCH_PREP, prep);
    kern_scratch_release(c, KERN_SCRATCH_PANELS, panels * (size_t)kern_ctx_threads(c));
}

int kern_matmul_jobs(enum dtype wt)
{
    return kern_type_require(wt)->act_type != DT_F32 ? 2 : 1;
}

/* kern_matmul, or kern_matmul_kept when kept (w: the kept panels). */
static int matmul_run(kern_ctx *c, const void *w, enum dtype wt, bool kept, int n_in, int n_out,
                      const float *x, int n_tokens, float *y)
{
    const kern_type *kt = kern_type_require(wt);
    int nth = kern_ctx_threads(c);
    size_t w_stride = dtype_row_bytes(wt, (uint64_t)n_in);
    if (w_stride == 0) {
        /* Model loaders check tensor shapes; reaching this is a bug. */
        fprintf(stderr, "prima: matmul: a row of %d is not whole blocks of %s\n", n_in,
                dtype_get((uint32_t)wt)->name);
        abort();
    }

    const uint8_t *a = (const uint8_t *)x;
    size_t a_stride = sizeof(float) * (size_t)n_in;
    if (kt->act_type != DT_F32) {
        const kern_type *at = kern_type_require(kt->act_type);
        const dtype_info *ai = dtype_get((uint32_t)kt->act_type);
        a_stride = dtype_row_bytes(kt->act_type, (uint64_t)n_in);
        uint8_t *q = kern_scratch_get(c, KERN_SCRATCH_ACT, a_stride * (size_t)n_tokens);
        if (!q)
            return -1;
        struct quant_job qj = {at->quantize, x, q,
                               (int64_t)n_tokens * n_in / ai->block_size,
                               (int)ai->block_size, (int)ai->block_bytes};
        kern_parallel(c, quantize_worker, &qj);
        a = q;
    }

    const mm_kernel *kernel = kt->tile;
    const mm_packed *packed = packed_for(kt, n_tokens, kept);
    const mm_kept *K = kept && kernel ? kernel->kept : NULL;
    if (kept && !K) { /* kern_keep_bytes said 0: a bug */
        fprintf(stderr, "prima: matmul: no kept form of %s on this path\n", dtype_get((uint32_t)wt)->name);
        abort();
    }
    if (packed && packed->act_prep) {
        size_t stride = packed->act_bytes(n_in);
        uint8_t *p = kern_scratch_get(c, KERN_SCRATCH_PREP, stride * (size_t)n_tokens);
        if (!p)
            return -1;
        struct prep_job pj = {packed, a, p, a_stride, stride, n_in, n_tokens};
        kern_parallel(c, prep_worker, &pj);
        a = p;
        a_stride = stride;
    }
    int tile_rows = packed ? packed->rows : kernel ? kernel->rows : 1;
    int tile_tokens = packed ? packed->tokens : kernel ? kernel->tokens : 1;

    int rows_per_block, tokens_per_block;
    if (n_tokens <= MM_STREAM_TOKENS) {
        rows_per_block = round_block((long)(DECODE_BLOCK_BYTES / w_stride), tile_rows);
        tokens_per_block = n_tokens;
    } else {
        rows_per_block = prefill_block_rows(wt, n_in, tile_rows);
        tokens_per_block = min_int(n_tokens, round_block((long)(ACT_BLOCK_BYTES / a_stride), tile_tokens));
    }
    /* Enough blocks that every thread gets several, for balance. */
    while (rows_per_block > tile_rows && (n_out + rows_per_block - 1) / rows_per_block < 4 * nth)
        rows_per_block = round_block(rows_per_block / 2, tile_rows);

    struct mm_job J = {
        .kernel = kernel, .vec_dot = kt->vec_dot, .w = w, .a = a,
        .w_stride = w_stride, .a_stride = a_stride, .y = y,
        .n_in = n_in, .n_out = n_out, .n_tokens = n_tokens,
        .rows_per_block = rows_per_block, .tokens_per_block = tokens_per_block,
        .n_units = (n_out + rows_per_block - 1) / rows_per_block,
        .range = kern_scratch_get(c, KERN_SCRATCH_RANGES, sizeof(struct mm_range) * (size_t)nth),
        .packed = packed, .kept = K, .unpack = K && packed != &K->form,
    };
    if (!J.range)
        return -1;
    if (K && !J.unpack) {
        J.kept_bytes = J.panel_bytes = K->form.bytes(n_in);
    } else if (packed) {
        J.kept_bytes = K ? K->form.bytes(n_in) : 0;
        J.panel_bytes = packed->bytes(n_in);
        J.thread_panel_bytes = (size_t)((rows_per_block + packed->rows - 1) / packed->rows) * J.panel_bytes;
        J.panels = kern_scratch_get(c, KERN_SCRATCH_PANELS, J.thread_panel_bytes * (size_t)nth);
        if (!J.panels)
            return -1;
    }
    for (int i = 0; i < nth; i++) {
        atomic_init(&J.range[i].next, (int)((long)J.n_units * i / nth));
        J.range[i].end = (int)((long)J.n_units * (i + 1) / nth);
    }
    kern_parallel(c, matmul_worker, &J);
    return 0;
}

int kern_matmul(kern_ctx *c, const void *w, enum dtype wt, int n_in, int n_out,
                const float *x, int n_tokens, float *y)
{
    return matmul_run(c, w, wt, false, n_in, n_out, x, n_tokens, y);
}

int kern_matmul_kept(kern_ctx *c, const void *kept, enum dtype wt, int n_in, int n_out,
                     const float *x, int n_tokens, float *y)
{
    return matmul_run(c, kept, wt, true, n_in, n_out, x, n_tokens, y);
}

/* The bound path's kept form of wt, or NULL. */
static const mm_packed *kept_form(enum dtype wt)
{
    const kern_type *kt = kern_type_get(wt);
    return kt && kt->tile && kt->tile->kept ? &kt->tile->kept->form : NULL;
}

const char *kern_keep_layout(void)
{
    for (int t = 0; t < DT_COUNT; t++) {
        const kern_type *kt = kern_type_get((enum dtype)t);
        if (kt && kt->tile && kt->tile->kept)
            return kt->tile->kept->layout;
    }
    return "";
}

size_t kern_keep_bytes(enum dtype wt, int n_in, int n_out)
{
    const mm_packed *P = kept_form(wt);
    if (!P || n_in <= 0 || n_out <= 0 || dtype_row_bytes(wt, (uint64_t)n_in) == 0)
        return 0;
    return (size_t)((n_out + P->rows - 1) / P->rows) * P->bytes(n_in);
}

struct keep_job {
    const mm_packed *P;
    const uint8_t *w;
    uint8_t *dst;
    size_t w_stride;
    int n_in, n_out;
};

static void keep_worker(void *arg, int ith, int nth)
{
    const struct keep_job *J = arg;
    const mm_packed *P = J->P;
    int n_panels = (J->n_out + P->rows - 1) / P->rows;
    for (int p = n_panels * ith / nth; p < n_panels * (ith + 1) / nth; p++)
        P->pack(J->n_in, min_int(P->rows, J->n_out - p * P->rows),
                J->w + (size_t)p * (size_t)P->rows * J->w_stride, J->w_stride,
                J->dst + (size_t)p * P->bytes(J->n_in));
}

void kern_keep(kern_ctx *c, const void *w, enum dtype wt, int n_in, int n_out, void *dst)
{
    struct keep_job J = {kept_form(wt), w, dst, dtype_row_bytes(wt, (uint64_t)n_in), n_in, n_out};
    kern_parallel(c, keep_worker, &J);
}
