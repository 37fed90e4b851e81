/* plan.c — layer windows on a ring (plan.h): which layers each device owns in each round, how
 * many rounds a set of windows needs, checking a plan, and the plan by free memory used when
 * no scheduler plans. */
#include <stdio.h>
#include <string.h>

#include "cluster/plan.h"

static int total_window(const ring_plan *p)
{
    int w = 0;
    for (int d = 0; d < p->n_dev; d++)
        w += p->window[d];
    return w;
}

int plan_rounds_needed(const int *window, int n_dev, int n_layer)
{
    int w = 0;
    for (int d = 0; d < n_dev; d++)
        w += window[d];
    return w > 0 ? (n_layer + w - 1) / w : 0;
}

int plan_from_windows(ring_plan *p, int n_dev, int n_layer, const int *window, const int *gpu,
                      int k, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->n_dev = n_dev;
    p->n_layer = n_layer;
    char lw[PRIMA_MAX_DEVICES * 12] = "";
    int total = 0;
    for (int d = 0, at = 0; d < n_dev && d < PRIMA_MAX_DEVICES; d++) {
        p->window[d] = window[d];
        p->gpu_layers[d] = gpu ? gpu[d] : 0;
        at += snprintf(lw + at, sizeof lw - (size_t)at, "%s%d", d ? "," : "", window[d]);
        total += window[d] > 0 && window[d] <= n_layer ? window[d] : 0;
    }
    p->k = plan_rounds_needed(p->window, n_dev > 0 && n_dev <= PRIMA_MAX_DEVICES ? n_dev : 0, n_layer);
    char why[256];
    if (plan_validate(p, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", lw, why);
        return -1;
    }
    if (k > 0 && k != p->k) {
        snprintf(err, errlen, "%s: k = %d does not match: windows of %d layers in total cover "
                 "the model's %d layers in %d round(s)", lw, k, total, n_layer, p->k);
        return -1;
    }
    p->decode_alone = p->window[0] == 0;
    return 0;
}

int plan_validate(const ring_plan *p, char *err, size_t errlen)
{
    if (p->n_dev < 1 || p->n_dev > PRIMA_MAX_DEVICES) {
        snprintf(err, errlen, "plan: %d devices (must be 1..%d)", p->n_dev, PRIMA_MAX_DEVICES);
        return -1;
    }
    if (p->n_layer < 1) {
        snprintf(err, errlen, "plan: a model of %d layers", p->n_layer);
        return -1;
    }
    /* Each window is checked against the model before any sum, so the sums cannot overflow. */
    for (int d = 0; d < p->n_dev; d++) {
        if (p->window[d] < 0 || p->window[d] > p->n_layer) {
            snprintf(err, errlen, "device %d%s has a window of %d layers, but the model has %d "
                     "(a window is 0..%d layers)", d, d ? "" : " (the head)", p->window[d],
                     p->n_layer, p->n_layer);
            return -1;
        }
        if (p->gpu_layers[d] < 0 || p->gpu_layers[d] > p->window[d]) {
            snprintf(err, errlen, "device %d has %d GPU layers in a window of %d layers", d,
                     p->gpu_layers[d], p->window[d]);
            return -1;
        }
    }
    int w = total_window(p);
    if (w == 0) {
        snprintf(err, errlen, "every window is 0 layers: at least one device must compute");
        return -1;
    }
    if (p->k < 1 || p->k != plan_rounds_needed(p->window, p->n_dev, p->n_layer)) {
        snprintf(err, errlen, "plan: %d rounds of %d layers do not cover %d layers (need %d rounds)",
                 p->k, w, p->n_layer, plan_rounds_needed(p->window, p->n_dev, p->n_layer));
        return -1;
    }
    return 0;
}

void plan_range(const ring_plan *p, int dev, int round, int *first, int *last)
{
    int start = round * total_window(p);
    for (int d = 0; d < dev; d++)
        start += p->window[d];
    int end = start + p->window[dev];
    if (start > p->n_layer)
        start = p->n_layer;
    if (end > p->n_layer)
        end = p->n_layer;
    *first = start;
    *last = end;
}

void plan_owned_layers(const ring_plan *p, int dev, bool *owns)
{
    for (int il = 0; il < p->n_layer; il++)
        owns[il] = false;
    for (int r = 0; r < p->k; r++) {
        int a, b;
        plan_range(p, dev, r, &a, &b);
        for (int il = a; il < b; il++)
            owns[il] = true;
    }
}

int plan_gpu_mask(const ring_plan *p, int dev, bool *on_gpu)
{
    int n = 0;
    for (int il = 0; il < p->n_layer; il++)
        on_gpu[il] = false;
    for (int r = 0; r < p->k; r++) {
        int a, b;
        plan_range(p, dev, r, &a, &b);
        for (int il = b - p->gpu_layers[dev] > a ? b - p->gpu_layers[dev] : a; il < b; il++) {
            on_gpu[il] = true;
            n++;
        }
    }
    return n;
}

int plan_by_memory(ring_plan *p, int n_dev, int n_layer, int k, const uint64_t *mem, char *err,
                   size_t errlen)
{
    if (n_dev < 1 || n_dev > PRIMA_MAX_DEVICES || n_layer < 1) {
        snprintf(err, errlen, "plan: %d devices for %d layers", n_dev, n_layer);
        return -1;
    }
    if (k < 1)
        k = 1;
    if (k > n_layer) {
        snprintf(err, errlen, "plan: %d rounds for %d layers", k, n_layer);
        return -1;
    }
    int total = (n_layer + k - 1) / k;
    long double sum = 0;
    for (int d = 0; d < n_dev; d++)
        sum += (long double)mem[d];
    long double share[PRIMA_MAX_DEVICES];
    int given = 0;
    memset(p, 0, sizeof *p);
    for (int d = 0; d < n_dev; d++) {
        share[d] = sum > 0 ? total * (long double)mem[d] / sum : (long double)total / n_dev;
        p->window[d] = (int)share[d];
        share[d] -= p->window[d];
        given += p->window[d];
    }
    /* Hand out what rounding down left, largest remainder first (lower rank on ties). */
    for (; given < total; given++) {
        int best = 0;
        for (int d = 1; d < n_dev; d++)
            if (share[d] > share[best])
                best = d;
        p->window[best]++;
        share[best] = -1;
    }
    p->n_dev = n_dev;
    p->n_layer = n_layer;
    p->k = plan_rounds_needed(p->window, n_dev, n_layer);
    return plan_validate(p, err, errlen);
}

void plan_format_layers(const ring_plan *p, int dev, char *out, size_t cap)
{
    size_t off = 0;
    out[0] = 0;
    for (int r = 0; r < p->k && off < cap; r++) {
        int a, b;
        plan_range(p, dev, r, &a, &b);
        if (a == b)
            continue;
        const char *sep = off ? " " : "";
        if (b - a == 1)
            off += (size_t)snprintf(out + off, cap - off, "%s%d", sep, a);
        else
            off += (size_t)snprintf(out + off, cap - off, "%s%d-%d", sep, a, b - 1);
    }
    if (!off)
        snprintf(out, cap, "none");
}
