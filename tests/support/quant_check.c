/* Every computable type's product on one path against the scalar path, on:
 *  - row lengths of 1..33 blocks (odd counts, counts that are not multiples of any unroll) and,
 *    for the float types, lengths that are not multiples of the vector width;
 *  - several rows of a matrix back to back, so rows start at every alignment the format allows;
 *  - weight blocks of random *bytes* (any level and scale bit pattern a file may hold, only the
 *    fp16 scale fields kept finite) as well as quantized Gaussian data of varying scale.
 * The path's product is its tile kernel where it has one (what kern_matmul runs), else its dot.
 * Tolerance: |path - scalar| <= 2e-5 * sum_i |w_i * a_i| (dequantized operands) — float
 * summation in a different order; the integer parts of the quantized dots are exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dtype.h"
#include "kernels/cpu.h"
#include "support/quant_check.h"
#include "support/rng.h"
#include "test.h"

#define TOLERANCE 2e-5

/* Where each block type keeps its fp16 scales (byte offsets), so random blocks stay finite. */
struct half_fields {
    enum dtype t;
    int n, off[2];
};

static const struct half_fields halves[] = {
    {DT_Q4_0, 1, {0}},       {DT_Q8_0, 1, {0}},       {DT_IQ4_NL, 1, {0}},
    {DT_MXFP4, 0, {0}},      /* its exponent byte: random_blocks */
    {DT_Q2_K, 2, {80, 82}},  {DT_Q3_K, 1, {108}},     {DT_Q4_K, 2, {0, 2}},
    {DT_Q5_K, 2, {0, 2}},    {DT_Q6_K, 1, {208}},
};

/* Fill `nblk` blocks of type t with random bytes; false if t has no known scale layout. */
static int random_blocks(test_rng *r, enum dtype t, uint8_t *dst, int nblk)
{
    const dtype_info *di = dtype_get(t);
    const struct half_fields *hf = NULL;
    for (size_t i = 0; i < sizeof halves / sizeof halves[0]; i++)
        if (halves[i].t == t)
            hf = &halves[i];
    if (!hf)
        return 0;
    for (size_t i = 0; i < (size_t)nblk * di->block_bytes; i++)
        dst[i] = (uint8_t)rng_next(r);
    /* MXFP4's scale is an exponent byte: keep it near 2^0 */
    for (int b = 0; t == DT_MXFP4 && b < nblk; b++)
        dst[(size_t)b * di->block_bytes] = (uint8_t)(120 + rng_next(r) % 12);
    for (int b = 0; b < nblk; b++)
        for (int k = 0; k < hf->n; k++) {
            uint16_t h = fp32_to_fp16((float)(rng_uniform(r) * 0.01));
            memcpy(dst + (size_t)b * di->block_bytes + hf->off[k], &h, 2);
        }
    return 1;
}

static void random_floats(test_rng *r, float *x, int n)
{
    float scale = 1;
    for (int i = 0; i < n; i++) {
        if (i % 32 == 0)
            scale = (float)pow(10.0, 2 * rng_uniform(r) - 1);
        x[i] = scale * rng_gauss(r);
    }
}

struct dot_case {
    const kern_type *k, *ka;
    int n, rows;
    const uint8_t *wq, *aq;
    const float *wd, *ad;   /* dequantized, for the tolerance scale */
};

/* The bound path's product of every row with the activation row: its tile kernel where it has
 * one (as kern_matmul calls it: all rows in one tile, and each row alone, which must agree bit
 * for bit), else its vec_dot. Returns the failures. */
static int path_products(const struct dot_case *c, float *got)
{
    size_t row_bytes = dtype_row_bytes(c->k->type, (uint64_t)c->n);
    size_t a_bytes = dtype_row_bytes(c->ka->type, (uint64_t)c->n);
    if (!c->k->tile) {
        for (int r = 0; r < c->rows; r++)
            c->k->vec_dot(c->n, &got[r], c->wq + r * row_bytes, c->aq);
        return 0;
    }
    int failures = 0;
    c->k->tile->tile(c->n, c->rows, 1, c->wq, row_bytes, c->aq, a_bytes, got, 1);
    for (int r = 0; r < c->rows; r++) {
        float one;
        c->k->tile->tile(c->n, 1, 1, c->wq + r * row_bytes, row_bytes, c->aq, a_bytes, &one, 1);
        if (memcmp(&one, &got[r], sizeof one)) {
            fprintf(stderr, "%s n=%d row %d: %.9g in a tile of %d rows, %.9g alone\n",
                    dtype_get(c->k->type)->name, c->n, r, got[r], c->rows, one);
            failures++;
        }
    }
    return failures;
}

/* Compare the bound path with the scalar dot product on every row. */
static int compare_rows(const struct dot_case *c, vec_dot_fn scalar_dot, const char *what)
{
    size_t row_bytes = dtype_row_bytes(c->k->type, (uint64_t)c->n);
    float got[8];
    int failures = path_products(c, got);
    for (int r = 0; r < c->rows; r++) {
        float want;
        scalar_dot(c->n, &want, c->wq + r * row_bytes, c->aq);
        double mag = 0;
        for (int i = 0; i < c->n; i++)
            mag += fabs((double)c->wd[(size_t)r * c->n + i] * c->ad[i]);
        if (!(fabs((double)got[r] - want) <= TOLERANCE * mag)) {
            fprintf(stderr, "%s %s n=%d row %d: %.9g, scalar %.9g (scale %.3g)\n",
                    dtype_get(c->k->type)->name, what, c->n, r, got[r], want, mag);
            failures++;
        }
    }
    return failures;
}

static int check_type(enum kern_path path, enum dtype t, test_rng *r)
{
    static const int nblocks[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33};
    static const int nfloat[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 100, 257, 1001};
    const int rows = 3;
    int failures = 0;
    kern_use_path(KERN_SCALAR);
    const kern_type scalar = *kern_type_get(t);
    kern_use_path(path);
    const kern_type *k = kern_type_get(t), *ka = kern_type_get(k->act_type);
    const dtype_info *di = dtype_get(t);
    int is_float = di->block_size == 1;
    int ncases = is_float ? (int)(sizeof nfloat / sizeof nfloat[0]) : (int)(sizeof nblocks / sizeof nblocks[0]);
    for (int ci = 0; ci < ncases; ci++) {
        int n = is_float ? nfloat[ci] : nblocks[ci] * (int)di->block_size;
        size_t wbytes = dtype_row_bytes(t, (uint64_t)n) * rows;
        float *w = malloc(sizeof(float) * n * rows), *wd = malloc(sizeof(float) * n * rows);
        float *act = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
        uint8_t *wq = malloc(wbytes), *aq = malloc(dtype_row_bytes(k->act_type, (uint64_t)n));
        random_floats(r, act, n);
        ka->from_float(act, aq, n);
        ka->to_float(aq, ad, n);
        struct dot_case c = {k, ka, n, rows, wq, aq, wd, ad};
        /* quantized Gaussian weights */
        random_floats(r, w, n * rows);
        k->from_float(w, wq, (int64_t)n * rows);
        k->to_float(wq, wd, (int64_t)n * rows);
        failures += compare_rows(&c, scalar.vec_dot, "quantized data");
        /* arbitrary block bytes */
        if (random_blocks(r, t, wq, n / (int)di->block_size * rows)) {
            k->to_float(wq, wd, (int64_t)n * rows);
            failures += compare_rows(&c, scalar.vec_dot, "random bytes");
        }
        free(w), free(wd), free(act), free(ad), free(wq), free(aq);
    }
    return failures;
}

int quant_check_path(enum kern_path path)
{
    if (kern_use_path(path) != 0) {
        char feats[256];
        cpu_features_str(cpu_features_get(), feats, sizeof feats);
        SKIP("the %s path cannot run here (CPU features: %s)", kern_path_name(path), feats);
    }
    printf("checking the %s path against scalar\n", kern_path_name(path));
    test_rng r = {1234 + path};
    int failures = 0, types = 0;
    for (int t = 0; t < DT_COUNT; t++) {
        if (!kern_type_get((enum dtype)t))
            continue;
        types++;
        failures += check_type(path, (enum dtype)t, &r);
    }
    if (types < 12) {
        fprintf(stderr, "only %d computable types\n", types);
        failures++;
    }
    kern_init();
    return failures;
}
