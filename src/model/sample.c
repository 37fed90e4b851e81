/* sample.c — the sampler chain (sample.h) over a xoshiro256** stream of its own, seeded through
 * splitmix64, so that a seed gives the same tokens on every device and a DECODE can carry the
 * stream's state to another. */
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/sample.h"

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct sampler {
    sampler_params p;
    int n_vocab;
    cand *c;            /* n_vocab candidates */
    int32_t *window;    /* ring buffer of the last repeat_last_n tokens */
    int32_t *counting;  /* sorted copy of the window */
    int win_len, win_next;
    uint64_t rng[4];    /* xoshiro256** state */
};

void sampler_params_default(sampler_params *p)
{
    *p = (sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                          .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0};
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(sampler *s)
{
    uint64_t *st = s->rng;
    uint64_t result = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

/* uniform in [0, 1) with 53 random bits */
static double next_uniform(sampler *s)
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

sampler *sampler_create(const sampler_params *p, int n_vocab)
{
    sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *p;
    if (s->p.repeat_last_n < 0)
        s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    s->c = malloc(sizeof(cand) * (size_t)n_vocab);
    s->window = malloc(sizeof(int32_t) * (size_t)(s->p.repeat_last_n + 1));
    s->counting = malloc(sizeof(int32_t) * (size_t)(s->p.repeat_last_n + 1));
    if (!s->c || !s->window || !s->counting) {
        sampler_free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    return s;
}

void sampler_free(sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->window);
    free(s->counting);
    free(s);
}

void sampler_accept(sampler *s, int32_t token)
{
    int cap = s->p.repeat_last_n;
    if (cap == 0)
        return;
    s->window[s->win_next] = token;
    s->win_next = (s->win_next + 1) % cap;
    if (s->win_len < cap)
        s->win_len++;
}

void sampler_reset(sampler *s)
{
    s->win_len = s->win_next = 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Candidates are still indexed by id here. */
static void apply_penalties(sampler *s)
{
    const sampler_params *p = &s->p;
    if (s->win_len == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    memcpy(s->counting, s->window, sizeof(int32_t) * (size_t)s->win_len);
    qsort(s->counting, (size_t)s->win_len, sizeof(int32_t), cmp_i32);
    for (int i = 0; i < s->win_len;) {
        int j = i;
        while (j < s->win_len && s->counting[j] == s->counting[i])
            j++;
        int32_t id = s->counting[i];
        if (id >= 0 && id < s->n_vocab) {
            float *l = &s->c[id].logit;
            if (p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f)
                *l = *l > 0.0f ? *l / p->repeat_penalty : *l * p->repeat_penalty;
            *l -= (float)(j - i) * p->frequency_penalty + p->presence_penalty;
        }
        i = j;
    }
}

/* a ranks before b: larger logit, then lower id */
static int better(const cand *a, const cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b)
{
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static void sift_down(cand *h, int n, int i)
{
    for (;;) {
        int w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && better(&h[w], &h[l]))
            w = l;
        if (r < n && better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k best of c[0..n) into c[0..k), sorted best first: a heap of the k best seen, whose root
 * is the worst of them, costs O(n log k) instead of sorting the whole vocabulary. */
static void top_k(cand *c, int n, int k)
{
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int i = k; i < n; i++)
        if (better(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof(cand), cmp_cand);
}

/* The first of the largest logits (ties -> lowest id while c is in id order). */
static int argmax(const cand *c, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (c[i].logit > c[best].logit)
            best = i;
    return best;
}

/* The chain after the penalties (temp > 0): the candidates that may be drawn, in c[0..n). */
static int filter(sampler *s)
{
    const sampler_params *p = &s->p;
    cand *c = s->c;
    int n = s->n_vocab;
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }
    if (p->top_p < 1.0f && n > 1) {
        if (!sorted)
            qsort(c, (size_t)n, sizeof(cand), cmp_cand);
        sorted = true;
        double sum = 0.0, cum = 0.0;
        for (int i = 0; i < n; i++)
            sum += exp((double)(c[i].logit - c[0].logit));
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += exp((double)(c[i].logit - c[0].logit)) / sum;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f && n > 1) {
        float max = c[0].logit;
        for (int i = 1; !sorted && i < n; i++)
            if (c[i].logit > max)
                max = c[i].logit;
        /* p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p); the best one always stays
         * (with no NaN left, max >= floor: at least one candidate remains) */
        float floor = max + logf(p->min_p);
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit >= floor)
                c[kept++] = c[i];
        n = kept;
    }
    return n;
}

/* A candidate's unnormalised probability: exp((logit - max) / temp). */
static double weight(const sampler *s, const cand *c, float max)
{
    return exp((double)((c->logit - max) / s->p.temp));
}

/* The whole chain: the candidates left in c[0..n), their largest logit and the sum of their
 * weights; *sum 0: a point mass on c[0] (greedy, or an infinity on top). Returns n. */
static int chain(sampler *s, const float *logits, float *max, double *sum)
{
    cand *c = s->c;
    /* A NaN compares false with everything, so one would defeat every filter (min-p would keep
     * nothing); it ranks below every number instead. */
    for (int i = 0; i < s->n_vocab; i++)
        c[i] = (cand){i, isnan(logits[i]) ? -INFINITY : logits[i]};
    apply_penalties(s);
    *sum = 0.0;
    if (s->p.temp <= 0.0f) {
        c[0] = c[argmax(c, s->n_vocab)];
        return 1;
    }
    int n = filter(s);
    int best = argmax(c, n);
    *max = c[best].logit;
    if (!isfinite(*max)) { /* an infinity on top (or only -inf): no distribution to draw from */
        c[0] = c[best];
        return 1;
    }
    for (int i = 0; i < n; i++)
        *sum += weight(s, &c[i], *max);
    return n;
}

int32_t sampler_sample(sampler *s, const float *logits)
{
    float max;
    double sum;
    int n = chain(s, logits, &max, &sum);
    const cand *c = s->c;
    if (sum <= 0.0)
        return c[0].id;
    double r = next_uniform(s) * sum, cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += weight(s, &c[i], max);
        if (r < cum)
            return c[i].id;
    }
    return c[n - 1].id;
}

void sampler_probs(sampler *s, const float *logits, double *probs)
{
    memset(probs, 0, sizeof(double) * (size_t)s->n_vocab);
    float max;
    double sum;
    int n = chain(s, logits, &max, &sum);
    const cand *c = s->c;
    if (sum <= 0.0) {
        probs[c[0].id] = 1.0;
        return;
    }
    for (int i = 0; i < n; i++)
        probs[c[i].id] = weight(s, &c[i], max) / sum;
}

double sampler_uniform(sampler *s)
{
    return next_uniform(s);
}

int32_t sampler_draw(sampler *s, const double *w)
{
    double sum = 0.0;
    int32_t last = -1;
    for (int i = 0; i < s->n_vocab; i++)
        if (w[i] > 0.0) {
            sum += w[i];
            last = i;
        }
    if (last < 0)
        return -1;
    double r = next_uniform(s) * sum, cum = 0.0;
    for (int i = 0; i < last; i++) {
        cum += w[i] > 0.0 ? w[i] : 0.0;
        if (r < cum)
            return i;
    }
    return last;
}

int sampler_mirror(sampler *dst, const sampler *src)
{
    const int cap = src->p.repeat_last_n;
    if (cap != dst->p.repeat_last_n) {
        int32_t *w = malloc(sizeof(int32_t) * (size_t)(cap + 1));
        int32_t *c = malloc(sizeof(int32_t) * (size_t)(cap + 1));
        if (!w || !c) {
            free(w);
            free(c);
            return -1;
        }
        free(dst->window);
        free(dst->counting);
        dst->window = w;
        dst->counting = c;
    }
    uint64_t seed = dst->p.seed;
    dst->p = src->p;
    dst->p.seed = seed;
    memcpy(dst->window, src->window, sizeof(int32_t) * (size_t)cap);
    dst->win_len = src->win_len;
    dst->win_next = src->win_next;
    return 0;
}

const sampler_params *sampler_get_params(const sampler *s)
{
    return &s->p;
}

int sampler_window(const sampler *s, int32_t *out)
{
    /* win_next is the oldest once the ring buffer is full, else 0 */
    int cap = s->p.repeat_last_n, first = s->win_len < cap ? 0 : s->win_next;
    for (int i = 0; i < s->win_len; i++)
        out[i] = s->window[(first + i) % cap];
    return s->win_len;
}

void sampler_get_rng(const sampler *s, uint64_t state[4])
{
    memcpy(state, s->rng, sizeof s->rng);
}

void sampler_set_rng(sampler *s, const uint64_t state[4])
{
    memcpy(s->rng, state, sizeof s->rng);
}
