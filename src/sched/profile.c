/* profile.c — device profiles: parsing the system's memory files, and the JSON form. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/profile.h"
#include "util/sysmem.h"

static const char *const os_names[] = {[OS_LINUX] = "linux", [OS_ANDROID] = "android",
                                       [OS_MACOS] = "macos"};

const char *os_class_name(enum os_class os)
{
    return os_names[os];
}

/* Parse "linux" / "android" / "macos"; -1 if unknown. */
static int os_class_from_name(const char *name)
{
    for (int i = 0; i < (int)(sizeof os_names / sizeof os_names[0]); i++)
        if (!strcmp(name, os_names[i]))
            return i;
    return -1;
}

uint64_t profile_available(const dev_profile *p)
{
    sysmem m = {.total = p->mem_total, .available = p->mem_available,
                .cgroup_limit = p->cgroup_limit, .cgroup_usage = p->cgroup_usage,
                .cgroup_reclaimable = p->cgroup_reclaimable, .android = p->os == OS_ANDROID};
    return sysmem_room(&m);
}

double profile_parse_cpu_quota(const char *quota, const char *period, double *period_s)
{
    char *end;
    double q = strtod(quota, &end);
    if (end == quota || q <= 0)   /* "max" (v2) or -1 (v1): no quota */
        return 0;
    /* v2 has both in one file: "QUOTA PERIOD" */
    const char *ps = period ? period : end;
    double per = strtod(ps, &end);
    if (end == ps || per <= 0)
        return 0;
    if (period_s)
        *period_s = per / 1e6;
    return q / per;
}

uint64_t profile_parse_cpu_throttled_ns(const char *cpu_stat)
{
    uint64_t v;
    if (sysmem_stat_field(cpu_stat, "throttled_usec", &v))   /* v2 */
        return v * 1000;
    return sysmem_stat_field(cpu_stat, "throttled_time", &v) ? v : 0;   /* v1, nanoseconds */
}

double profile_quota_share(const dev_profile *p)
{
    return p->cpu_quota > 0 && p->cpu_quota < p->threads ? p->cpu_quota / p->threads : 1;
}

/* ---- JSON ---- */

static cJSON *rates_to_json(const type_rate *r)
{
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < DT_COUNT; t++) {
        if (!r[t].matvec && !r[t].matmul)
            continue;
        cJSON *e = cJSON_AddObjectToObject(o, dtype_get((uint32_t)t)->name);
        cJSON_AddNumberToObject(e, "matvec", r[t].matvec);
        cJSON_AddNumberToObject(e, "matmul", r[t].matmul);
    }
    return o;
}

/* Sizes and rates beyond these are not a real device: they catch corrupted or hostile input
 * before it reaches the solver's arithmetic. */
#define MAX_BYTES 1e15   /* 1 PB */
#define MAX_RATE 1e16    /* weights or bytes per second */
#define MAX_RTT 60.0     /* seconds */

/* The profile's fields in file order, one table for writing and for reading with validation, so
 * that the two cannot drift apart. */
enum pkind { PK_NUM, PK_INT, PK_U64, PK_BOOL, PK_STR, PK_OS, PK_RATES };

typedef struct pfield {
    const char *sect;      /* the object holding it; NULL: the top level */
    const char *key;
    enum pkind kind;
    size_t off, len;       /* the dev_profile member */
    double max;            /* numbers: the largest value accepted */
    /* Read only when the section has this key: fields added after profiles were first saved,
     * which older ones lack (they stay 0). NULL: always there. */
    const char *since;
    bool with_quota;       /* written only when there is a CPU quota */
} pfield;

#define MEMBER(m) offsetof(dev_profile, m), sizeof(((dev_profile *)0)->m)

static const pfield fields[] = {
    {NULL, "name", PK_STR, MEMBER(name), 0, NULL, false},
    {NULL, "os", PK_OS, MEMBER(os), 0, NULL, false},
    {NULL, "noise", PK_NUM, MEMBER(noise), 1e6, NULL, false},
    {"cpu", "cores", PK_INT, MEMBER(cores), 65536, NULL, false},
    {"cpu", "threads", PK_INT, MEMBER(threads), 65536, NULL, false},
    {"cpu", "quota", PK_NUM, MEMBER(cpu_quota), 65536, NULL, false},
    /* saved since issue 15; before, the kernel's default (profile_from_json) */
    {"cpu", "quota_period", PK_NUM, MEMBER(cpu_quota_period), 1, "quota_period", true},
    {"cpu", "dispatch", PK_NUM, MEMBER(dispatch), MAX_RTT, NULL, false},
    {"cpu", "vector", PK_NUM, MEMBER(vector), MAX_RATE, "vector", false},   /* since issue 15 */
    {"cpu", "simd", PK_STR, MEMBER(simd), 0, NULL, false},
    {"cpu", "types", PK_RATES, MEMBER(cpu), 0, NULL, false},
    {"memory", "total", PK_U64, MEMBER(mem_total), MAX_BYTES, NULL, false},
    {"memory", "available", PK_U64, MEMBER(mem_available), MAX_BYTES, NULL, false},
    {"memory", "reclaimable", PK_U64, MEMBER(mem_reclaimable), MAX_BYTES, NULL, false},
    {"memory", "swap_total", PK_U64, MEMBER(swap_total), MAX_BYTES, NULL, false},
    {"memory", "swap_free", PK_U64, MEMBER(swap_free), MAX_BYTES, NULL, false},
    {"memory", "cgroup_limit", PK_U64, MEMBER(cgroup_limit), MAX_BYTES, NULL, false},
    {"memory", "cgroup_usage", PK_U64, MEMBER(cgroup_usage), MAX_BYTES, NULL, false},
    {"memory", "cgroup_reclaimable", PK_U64, MEMBER(cgroup_reclaimable), MAX_BYTES, NULL, false},
    {"memory", "bandwidth", PK_NUM, MEMBER(mem_bw), MAX_RATE, NULL, false},
    {"disk", "sequential", PK_NUM, MEMBER(disk_seq), MAX_RATE, NULL, false},
    {"disk", "random", PK_NUM, MEMBER(disk_rand), MAX_RATE, NULL, false},
    {"disk", "method", PK_STR, MEMBER(disk_method), 0, NULL, false},
    {"gpu", "present", PK_BOOL, MEMBER(gpu_present), 0, NULL, false},
    {"gpu", "unified", PK_BOOL, MEMBER(gpu_unified), 0, NULL, false},
    {"gpu", "name", PK_STR, MEMBER(gpu_name), 0, NULL, false},
    {"gpu", "vram_total", PK_U64, MEMBER(vram_total), MAX_BYTES, NULL, false},
    {"gpu", "vram_free", PK_U64, MEMBER(vram_free), MAX_BYTES, NULL, false},
    {"gpu", "bandwidth", PK_NUM, MEMBER(gpu_bw), MAX_RATE, NULL, false},
    /* measured since the GPU backend exists: profiles saved before it lack them */
    {"gpu", "software", PK_BOOL, MEMBER(gpu_software), 0, "submit", false},
    {"gpu", "upload", PK_NUM, MEMBER(gpu_upload), MAX_RATE, "submit", false},
    {"gpu", "download", PK_NUM, MEMBER(gpu_download), MAX_RATE, "submit", false},
    {"gpu", "submit", PK_NUM, MEMBER(gpu_submit), MAX_RTT, "submit", false},
    /* measured since rings use GPUs */
    {"gpu", "dispatch", PK_NUM, MEMBER(gpu_dispatch), MAX_RTT, "dispatch", false},
    {"gpu", "types", PK_RATES, MEMBER(gpu), 0, NULL, false},
    {"network", "rtt", PK_NUM, MEMBER(net_rtt), MAX_RTT, NULL, false},
    {"network", "throughput", PK_NUM, MEMBER(net_bw), MAX_RATE, NULL, false},
};

cJSON *profile_to_json(const dev_profile *p)
{
    cJSON *j = cJSON_CreateObject(), *o = j;
    cJSON_AddNumberToObject(j, "version", 1);
    const char *sect = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const pfield *f = &fields[i];
        const void *v = (const char *)p + f->off;
        if (f->sect && (!sect || strcmp(sect, f->sect)))
            o = cJSON_AddObjectToObject(j, f->sect);
        sect = f->sect;
        if (f->with_quota && !(p->cpu_quota > 0))
            continue;
        switch (f->kind) {
        case PK_NUM: cJSON_AddNumberToObject(o, f->key, *(const double *)v); break;
        case PK_INT: cJSON_AddNumberToObject(o, f->key, *(const int *)v); break;
        case PK_U64: cJSON_AddNumberToObject(o, f->key, (double)*(const uint64_t *)v); break;
        case PK_BOOL: cJSON_AddBoolToObject(o, f->key, *(const bool *)v); break;
        case PK_STR: cJSON_AddStringToObject(o, f->key, v); break;
        case PK_OS:
            cJSON_AddStringToObject(o, f->key, os_class_name(*(const enum os_class *)v));
            break;
        case PK_RATES: cJSON_AddItemToObject(o, f->key, rates_to_json(v)); break;
        }
    }
    return j;
}

/* Reading with validation: each getter writes a one-line error naming the source and field. */
typedef struct jreader {
    const char *what;
    char *err;
    size_t errlen;
    int failed;
} jreader;

static const cJSON *jr_obj(jreader *r, const cJSON *parent, const char *key)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (!cJSON_IsObject(o)) {
        if (!r->failed++)
            snprintf(r->err, r->errlen, "%s: \"%s\" is missing or not an object", r->what, key);
        return NULL;
    }
    return o;
}

static double jr_num(jreader *r, const cJSON *o, const char *sect, const char *key, double max)
{
    if (!o)
        return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > max) {
        if (!r->failed++)
            snprintf(r->err, r->errlen, "%s: %s.%s is missing or not a number in [0, %g]", r->what,
                     sect, key, max);
        return 0;
    }
    return v->valuedouble;
}

static void jr_str(jreader *r, const cJSON *o, const char *sect, const char *key, char *buf, size_t len)
{
    if (!o)
        return;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= len) {
        if (!r->failed++)
            snprintf(r->err, r->errlen, "%s: %s.%s is missing or not a string of under %zu bytes",
                     r->what, sect, key, len);
        return;
    }
    strcpy(buf, v->valuestring);
}

static bool jr_bool(jreader *r, const cJSON *o, const char *sect, const char *key)
{
    if (!o)
        return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsBool(v)) {
        if (!r->failed++)
            snprintf(r->err, r->errlen, "%s: %s.%s is missing or not true/false", r->what, sect, key);
        return false;
    }
    return cJSON_IsTrue(v);
}

static void jr_rates(jreader *r, const cJSON *o, const char *sect, type_rate *rates)
{
    const cJSON *types = o ? cJSON_GetObjectItemCaseSensitive(o, "types") : NULL;
    if (o && !cJSON_IsObject(types)) {
        if (!r->failed++)
            snprintf(r->err, r->errlen, "%s: %s.types is missing or not an object", r->what, sect);
        return;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, types) {
        int t = dtype_from_name(e->string);
        if (t < 0) {
            if (!r->failed++)
                snprintf(r->err, r->errlen, "%s: %s.types has unknown weight type \"%s\"", r->what,
                         sect, e->string);
            return;
        }
        char where[64];
        snprintf(where, sizeof where, "%s.types.%s", sect, e->string);
        rates[t].matvec = jr_num(r, e, where, "matvec", MAX_RATE);
        rates[t].matmul = jr_num(r, e, where, "matmul", MAX_RATE);
    }
}

int profile_from_json(const cJSON *j, dev_profile *p, const char *what, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    jreader r = {what, err, errlen, 0};
    if (!cJSON_IsObject(j)) {
        snprintf(err, errlen, "%s: not a JSON object", what);
        return -1;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        snprintf(err, errlen, "%s: \"version\" must be 1 (a prima device profile)", what);
        return -1;
    }
    const cJSON *o = j;
    const char *sect = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const pfield *f = &fields[i];
        void *v = (char *)p + f->off;
        if (f->sect && (!sect || strcmp(sect, f->sect)))
            o = jr_obj(&r, j, f->sect);
        sect = f->sect;
        const char *name = sect ? sect : "profile";
        if (f->since && !(o && cJSON_GetObjectItemCaseSensitive(o, f->since)))
            continue;
        switch (f->kind) {
        case PK_NUM: *(double *)v = jr_num(&r, o, name, f->key, f->max); break;
        case PK_INT: *(int *)v = (int)jr_num(&r, o, name, f->key, f->max); break;
        case PK_U64: *(uint64_t *)v = (uint64_t)jr_num(&r, o, name, f->key, f->max); break;
        case PK_BOOL: *(bool *)v = jr_bool(&r, o, name, f->key); break;
        case PK_STR: jr_str(&r, o, name, f->key, v, f->len); break;
        case PK_RATES: jr_rates(&r, o, name, v); break;
        case PK_OS: {
            char os[16] = "";
            jr_str(&r, o, name, f->key, os, sizeof os);
            int osc = os_class_from_name(os);
            if (!r.failed && osc < 0) {
                snprintf(err, errlen, "%s: os \"%s\" is not linux, android or macos", what, os);
                return -1;
            }
            *(enum os_class *)v = osc < 0 ? OS_LINUX : (enum os_class)osc;
            break;
        }
        }
    }
    /* a quota saved before its period was: the kernel's default period */
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(j, "cpu");
    if (p->cpu_quota > 0 && !(cpu && cJSON_GetObjectItemCaseSensitive(cpu, "quota_period")))
        p->cpu_quota_period = CFS_DEFAULT_PERIOD;

    if (!r.failed && p->mem_total == 0) {
        snprintf(err, errlen, "%s: memory.total is 0", what);
        return -1;
    }
    if (!r.failed && p->mem_available > p->mem_total) {
        snprintf(err, errlen, "%s: memory.available exceeds memory.total", what);
        return -1;
    }
    return r.failed ? -1 : 0;
}
