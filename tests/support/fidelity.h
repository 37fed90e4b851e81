/* fidelity.h — reading the reference cases of the fixtures (reference/MODEL.CASE.json and
 * .logits.f32) and applying the tolerance rule of the fixtures README to candidate logits. */
#ifndef PRIMA_TEST_FIDELITY_H
#define PRIMA_TEST_FIDELITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct fid_top5 {
    double row_sd;
    int32_t ids[5];
    double logits[5];
} fid_top5;

typedef struct fid_case {
    char model_file[256];
    char name[64];
    char *prompt_text;        /* NULL for token-id prompts */
    bool add_special, parse_special;
    int32_t *prompt;          /* prompt_tokens */
    int n_prompt;
    int32_t *greedy;          /* greedy_tokens */
    int n_greedy;
    fid_top5 *greedy_top5;    /* n_greedy */
    int n_vocab;
    float *logits;            /* reference, n_prompt x n_vocab */
} fid_case;

/* Load dir/NAME.json and its logits file. Returns 0, or -1 with a message. */
int fid_case_load(const char *dir, const char *json_name, fid_case *c, char *err, size_t errlen);
void fid_case_free(fid_case *c);

/* The case's model file from fixtures/models: NULL with err. */
/* Whether a fixture model is on tests/data/not-yet-supported.txt (an architecture prima does
 * not run yet: its load fails, and the tests say so instead of checking it). */
bool fid_not_yet(const char *model_file);
struct model *fid_load_model(const char *fixtures, const fid_case *c, char *err, size_t errlen);
/* Whether the case's model is a trained one (not a random-weight synth- file). */
bool fid_trained(const fid_case *c);

/* The README's weight classes and their parameters. */
enum fid_class { FID_FLOAT, FID_BF16, FID_QUANT };
typedef struct fid_tol {
    double min_cos, max_dev, near_tie; /* X, A, Y */
} fid_tol;
enum fid_class fid_weight_class(const gguf_file *f);
const char *fid_class_name(enum fid_class c);
fid_tol fid_tolerance(enum fid_class c);

/* Argmax with ties to the lowest index. */
int fid_argmax(const float *x, int n);

typedef struct fid_row {
    double cos, dev;          /* cosine; max |r - c| / sd(r) */
    int ref_argmax, argmax;
    bool ok;
} fid_row;
/* Compare a candidate row with a reference row by the tolerance rule. */
fid_row fid_compare_row(const float *ref, const float *cand, int n, const fid_tol *tol);

/* Every prompt row of a case's candidate logits (n_prompt x n_vocab) by the rule: returns the
 * number of rows that fail, prints each (prefixed by what) to stderr, and gives the worst cosine
 * and deviation. */
int fid_compare_rows(const fid_case *c, const float *logits, const fid_tol *tol,
                     const char *what, double *worst_cos, double *worst_dev);

/* The reference cases (*.json) in refdir, sorted; returns how many (at most max), names strdup'd. */
int fid_list_cases(const char *refdir, char **names, int max);

/* Greedy tokens: trained models must match all of them; random models may diverge once at a
 * near-tie of the reference (the comparison ends there). Returns true if accepted; msg says
 * where and why not. */
bool fid_compare_greedy(const fid_case *c, const int32_t *cand, bool trained, const fid_tol *tol,
                        char *msg, size_t msglen);

#endif
