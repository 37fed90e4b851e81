/* report.c — printing Halda's plan. */
#include <stddef.h>
#include <stdint.h>

#include "sched/report.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)
#define MS 1e3

/* The terms of a predicted time per token, once for the text and the JSON: the ring's (in
 * cost_result) and each device's (in dev_result); NONE where one of them lacks the term. */
#define NONE SIZE_MAX
static const struct term {
    const char *name;
    size_t ring, dev;
} terms[] = {
    {"compute", offsetof(cost_result, t_compute), offsetof(dev_result, t_compute)},
    {"memory", offsetof(cost_result, t_memory), offsetof(dev_result, t_memory)},
    {"gpu", offsetof(cost_result, t_gpu), offsetof(dev_result, t_gpu)},
    {"disk", offsetof(cost_result, t_disk), offsetof(dev_result, t_disk)},
    {"network", offsetof(cost_result, t_net), offsetof(dev_result, t_net)},
    {"head", offsetof(cost_result, t_head), NONE},
    {"wait", NONE, offsetof(dev_result, t_wait)},
};
#define N_TERMS (sizeof terms / sizeof terms[0])

static double term_at(const void *result, size_t off)
{
    return *(const double *)((const char *)result + off);
}

/* The terms of result (a cost_result, or with dev a dev_result) as a new object parent[key]. */
static void terms_json(cJSON *parent, const char *key, const void *result, bool dev)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    for (size_t i = 0; i < N_TERMS; i++) {
        size_t off = dev ? terms[i].dev : terms[i].ring;
        if (off != NONE)
            cJSON_AddNumberToObject(o, terms[i].name, term_at(result, off));
    }
}

void plan_report_text(FILE *out, const halda_result *r, const dev_cost *dc, int n_dev,
                      const sched_model *sm)
{
    if (!r->found) {
        fprintf(out, "%s\n", r->why);
        return;
    }
    const cost_result *c = &r->cost;
    fprintf(out, "plan: %d layers on %d device%s, k = %d round%s, predicted %.1f ms per token\n",
            sm->n_layer, n_dev, n_dev > 1 ? "s" : "", r->plan.k, r->plan.k > 1 ? "s" : "",
            c->tpot * MS);
    if (r->cut)
        fprintf(out, "  not proven the fastest: the search stopped at the solver's time limit, "
                     "and this is the best plan it found\n");
    fprintf(out, "  %-2s %-16s %-7s %-3s %6s %4s %6s %8s %10s %10s %10s %11s\n", "#", "device", "os",
            "set", "window", "gpu", "layers", "resident", "anon GiB", "page GiB", "budget GiB",
            "disk MiB/tok");
    for (int m = 0; m < n_dev; m++) {
        const dev_result *d = &c->dev[m];
        fprintf(out, "  %-2d %-16.16s %-7s %-3s %6d %4d %6d %8.1f %10.2f %10.2f %10.2f %11.1f%s\n", m,
                dc[m].name, os_class_name(dc[m].os), cost_device_set(&dc[m], d), r->plan.window[m],
                r->plan.gpu_layers[m], d->layers, d->resident_layers, d->anon / GIB,
                (d->page < d->budget - d->anon ? d->page : d->budget - d->anon) / GIB,
                d->budget / GIB, d->disk_bytes / MIB, m == 0 ? "  (head)" : "");
    }
    /* every device with a GPU, so that one left without GPU layers is seen to be */
    for (int m = 0; m < n_dev; m++)
        if (dc[m].has_gpu || c->dev[m].gpu_layers > 0)
            fprintf(out, "  %s: %d GPU layer%s, expected VRAM %.2f GiB of %.2f GiB%s\n",
                    dc[m].name, c->dev[m].gpu_layers, c->dev[m].gpu_layers != 1 ? "s" : "",
                    c->dev[m].vram / GIB, dc[m].vram / GIB,
                    dc[m].unified ? " (unified memory: the same RAM)" : "");
    fprintf(out, "  TPOT terms:");
    const char *sep = " ";
    for (size_t i = 0; i < N_TERMS; i++)
        if (terms[i].ring != NONE) {
            fprintf(out, "%s%s %.1f ms", sep, terms[i].name, term_at(c, terms[i].ring) * MS);
            sep = ", ";
        }
    fputc('\n', out);
    for (int m = 0; m < n_dev; m++)
        if (c->dev[m].burst)
            fprintf(out, "  %s: at full speed, its work within its CPU quota (%.2f of its threads "
                    "per %.0f ms)\n", dc[m].name, dc[m].burst, dc[m].burst_period * MS);
    for (int m = 1; m < n_dev; m++)
        if (r->left_out[m][0])
            fprintf(out, "  %s %s\n", dc[m].name, r->left_out[m]);
    if (r->one_device > 0) {
        fprintf(out, "  every layer on %s: %.1f ms per token, decoding there on its own (%.1f ms "
                "relayed through the head); the head alone: ", dc[r->one_device].name,
                r->one_device_tpot * MS, r->relay_tpot * MS);
        if (r->head_alone_tpot > 0)
            fprintf(out, "%.1f ms%s\n", r->head_alone_tpot * MS,
                    r->head_alone ? ", faster: the plan is the head alone" : "");
        else
            fprintf(out, "no plan\n");
    }
    if (!r->fits) {
        fprintf(out, "  no plan fits every memory budget; reading from disk every token:");
        for (int m = 0; m < n_dev; m++)
            if (c->dev[m].overloaded)
                fprintf(out, " %s %.0f MiB (%.1f ms)", dc[m].name, c->dev[m].disk_bytes / MIB,
                        c->dev[m].t_disk * MS);
        fputc('\n', out);
    }
    if (r->n_ilp > 0)
        fprintf(out, "  solved in %.3f s (%d integer programs%s)\n", r->seconds, r->n_ilp,
                r->cut ? ", cut short by the time limit" : "");
    else
        fprintf(out, "  the plan as given: not searched\n");
}

cJSON *plan_report_json(const halda_result *r, const dev_cost *dc, int n_dev, const sched_model *sm)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "found", r->found);
    if (!r->found) {
        cJSON_AddStringToObject(j, "why", r->why);
        return j;
    }
    const cost_result *c = &r->cost;
    cJSON_AddNumberToObject(j, "n_layer", sm->n_layer);
    cJSON_AddNumberToObject(j, "k", r->plan.k);
    cJSON_AddBoolToObject(j, "fits", r->fits);
    cJSON_AddNumberToObject(j, "tpot", c->tpot);
    terms_json(j, "terms", c, false);
    cJSON *devs = cJSON_AddArrayToObject(j, "devices");
    for (int m = 0; m < n_dev; m++) {
        const dev_result *d = &c->dev[m];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", dc[m].name);
        cJSON_AddStringToObject(o, "os", os_class_name(dc[m].os));
        cJSON_AddStringToObject(o, "set", cost_device_set(&dc[m], d));
        cJSON_AddNumberToObject(o, "window", r->plan.window[m]);
        cJSON_AddNumberToObject(o, "gpu_layers", r->plan.gpu_layers[m]);
        cJSON_AddNumberToObject(o, "layers", d->layers);
        cJSON_AddBoolToObject(o, "in_ring", d->in_ring);
        cJSON_AddBoolToObject(o, "overloaded", d->overloaded);
        cJSON_AddBoolToObject(o, "quota_burst", d->burst);
        cJSON_AddNumberToObject(o, "anon_bytes", d->anon);
        cJSON_AddNumberToObject(o, "page_bytes", d->page);
        cJSON_AddNumberToObject(o, "vram_bytes", d->vram);
        cJSON_AddNumberToObject(o, "budget_bytes", d->budget);
        cJSON_AddNumberToObject(o, "resident_layers", d->resident_layers);
        cJSON_AddNumberToObject(o, "disk_bytes_per_token", d->disk_bytes);
        terms_json(o, "time", d, true);
        if (r->left_out[m][0])
            cJSON_AddStringToObject(o, "left_out", r->left_out[m]);
        cJSON_AddItemToArray(devs, o);
    }
    if (r->one_device > 0) {
        cJSON *one = cJSON_AddObjectToObject(j, "one_device");
        cJSON_AddStringToObject(one, "name", dc[r->one_device].name);
        cJSON_AddNumberToObject(one, "tpot", r->one_device_tpot);
        cJSON_AddNumberToObject(one, "relay_tpot", r->relay_tpot);
        if (r->head_alone_tpot > 0)
            cJSON_AddNumberToObject(one, "head_alone_tpot", r->head_alone_tpot);
        else
            cJSON_AddNullToObject(one, "head_alone_tpot");
        cJSON_AddBoolToObject(one, "head_alone_chosen", r->head_alone);
    }
    cJSON_AddNumberToObject(j, "solve_seconds", r->seconds);
    cJSON_AddNumberToObject(j, "integer_programs", r->n_ilp);
    cJSON_AddBoolToObject(j, "cut_by_time_limit", r->cut);
    return j;
}
