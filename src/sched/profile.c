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
    sysmem m = {.available = p->mem_available, .cgroup_limit = p->cgroup_limit,
                .cgroup_usage = p->cgroup_usage, .cgroup_reclaimable = p->cgroup_reclaimable};
    return sysmem_room(&m);
}

double parse_cpu_quota(const char *quota, const char *period, double *period_s)
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

uint64_t parse_cpu_throttled_ns(const char *cpu_stat)
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

cJSON *profile_to_json(const dev_profile *p)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "name", p->name);
    cJSON_AddStringToObject(j, "os", os_class_name(p->os));
    cJSON_AddNumberToObject(j, "noise", p->noise);

    cJSON *cpu = cJSON_AddObjectToObject(j, "cpu");
    cJSON_AddNumberToObject(cpu, "cores", p->cores);
    cJSON_AddNumberToObject(cpu, "threads", p->threads);
    cJSON_AddNumberToObject(cpu, "quota", p->cpu_quota);
    if (p->cpu_quota > 0)
        cJSON_AddNumberToObject(cpu, "quota_period", p->cpu_quota_period);
    cJSON_AddNumberToObject(cpu, "dispatch", p->dispatch);
    cJSON_AddNumberToObject(cpu, "vector", p->vector);
    cJSON_AddStringToObject(cpu, "simd", p->simd);
    cJSON_AddItemToObject(cpu, "types", rates_to_json(p->cpu));

    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddNumberToObject(mem, "total", (double)p->mem_total);
    cJSON_AddNumberToObject(mem, "available", (double)p->mem_available);
    cJSON_AddNumberToObject(mem, "reclaimable", (double)p->mem_reclaimable);
    cJSON_AddNumberToObject(mem, "swap_total", (double)p->swap_total);
    cJSON_AddNumberToObject(mem, "swap_free", (double)p->swap_free);
    cJSON_AddNumberToObject(mem, "cgroup_limit", (double)p->cgroup_limit);
    cJSON_AddNumberToObject(mem, "cgroup_usage", (double)p->cgroup_usage);
    cJSON_AddNumberToObject(mem, "cgroup_reclaimable", (double)p->cgroup_reclaimable);
    cJSON_AddNumberToObject(mem, "bandwidth", p->mem_bw);

    cJSON *disk = cJSON_AddObjectToObject(j, "disk");
    cJSON_AddNumberToObject(disk, "sequential", p->disk_seq);
    cJSON_AddNumberToObject(disk, "random", p->disk_rand);
    cJSON_AddStringToObject(disk, "method", p->disk_method);

    cJSON *gpu = cJSON_AddObjectToObject(j, "gpu");
    cJSON_AddBoolToObject(gpu, "present", p->gpu_present);
    cJSON_AddBoolToObject(gpu, "unified", p->gpu_unified);
    cJSON_AddStringToObject(gpu, "name", p->gpu_name);
    cJSON_AddNumberToObject(gpu, "vram_total", (double)p->vram_total);
    cJSON_AddNumberToObject(gpu, "vram_free", (double)p->vram_free);
    cJSON_AddNumberToObject(gpu, "bandwidth", p->gpu_bw);
    cJSON_AddBoolToObject(gpu, "software", p->gpu_software);
    cJSON_AddNumberToObject(gpu, "upload", p->gpu_upload);
    cJSON_AddNumberToObject(gpu, "download", p->gpu_download);
    cJSON_AddNumberToObject(gpu, "submit", p->gpu_submit);
    cJSON_AddNumberToObject(gpu, "dispatch", p->gpu_dispatch);
    cJSON_AddItemToObject(gpu, "types", rates_to_json(p->gpu));

    cJSON *net = cJSON_AddObjectToObject(j, "network");
    cJSON_AddNumberToObject(net, "rtt", p->net_rtt);
    cJSON_AddNumberToObject(net, "throughput", p->net_bw);
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

/* Sizes and rates beyond these are not a real device: they catch corrupted or hostile input
 * before it reaches the solver's arithmetic. */
#define MAX_BYTES 1e15   /* 1 PB */
#define MAX_RATE 1e16    /* weights or bytes per second */
#define MAX_RTT 60.0     /* seconds */

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
    jr_str(&r, j, "profile", "name", p->name, sizeof p->name);
    char os[16] = "";
    jr_str(&r, j, "profile", "os", os, sizeof os);
    int osc = os_class_from_name(os);
    if (!r.failed && osc < 0) {
        snprintf(err, errlen, "%s: os \"%s\" is not linux, android or macos", what, os);
        return -1;
    }
    p->os = osc < 0 ? OS_LINUX : (enum os_class)osc;
    p->noise = jr_num(&r, j, "profile", "noise", 1e6);

    const cJSON *cpu = jr_obj(&r, j, "cpu");
    p->cores = (int)jr_num(&r, cpu, "cpu", "cores", 65536);
    p->threads = (int)jr_num(&r, cpu, "cpu", "threads", 65536);
    p->cpu_quota = jr_num(&r, cpu, "cpu", "quota", 65536);
    /* saved since issue 15; before, the kernel's default */
    bool has_period = cpu && cJSON_GetObjectItemCaseSensitive(cpu, "quota_period");
    p->cpu_quota_period = has_period ? jr_num(&r, cpu, "cpu", "quota_period", 1) :
                          p->cpu_quota > 0 ? CFS_DEFAULT_PERIOD : 0;
    p->dispatch = jr_num(&r, cpu, "cpu", "dispatch", MAX_RTT);
    if (cpu && cJSON_GetObjectItemCaseSensitive(cpu, "vector"))   /* measured since issue 15 */
        p->vector = jr_num(&r, cpu, "cpu", "vector", MAX_RATE);
    jr_str(&r, cpu, "cpu", "simd", p->simd, sizeof p->simd);
    jr_rates(&r, cpu, "cpu", p->cpu);

    const cJSON *mem = jr_obj(&r, j, "memory");
    p->mem_total = (uint64_t)jr_num(&r, mem, "memory", "total", MAX_BYTES);
    p->mem_available = (uint64_t)jr_num(&r, mem, "memory", "available", MAX_BYTES);
    p->mem_reclaimable = (uint64_t)jr_num(&r, mem, "memory", "reclaimable", MAX_BYTES);
    p->swap_total = (uint64_t)jr_num(&r, mem, "memory", "swap_total", MAX_BYTES);
    p->swap_free = (uint64_t)jr_num(&r, mem, "memory", "swap_free", MAX_BYTES);
    p->cgroup_limit = (uint64_t)jr_num(&r, mem, "memory", "cgroup_limit", MAX_BYTES);
    p->cgroup_usage = (uint64_t)jr_num(&r, mem, "memory", "cgroup_usage", MAX_BYTES);
    p->cgroup_reclaimable = (uint64_t)jr_num(&r, mem, "memory", "cgroup_reclaimable", MAX_BYTES);
    p->mem_bw = jr_num(&r, mem, "memory", "bandwidth", MAX_RATE);

    const cJSON *disk = jr_obj(&r, j, "disk");
    p->disk_seq = jr_num(&r, disk, "disk", "sequential", MAX_RATE);
    p->disk_rand = jr_num(&r, disk, "disk", "random", MAX_RATE);
    jr_str(&r, disk, "disk", "method", p->disk_method, sizeof p->disk_method);

    const cJSON *gpu = jr_obj(&r, j, "gpu");
    p->gpu_present = jr_bool(&r, gpu, "gpu", "present");
    p->gpu_unified = jr_bool(&r, gpu, "gpu", "unified");
    jr_str(&r, gpu, "gpu", "name", p->gpu_name, sizeof p->gpu_name);
    p->vram_total = (uint64_t)jr_num(&r, gpu, "gpu", "vram_total", MAX_BYTES);
    p->vram_free = (uint64_t)jr_num(&r, gpu, "gpu", "vram_free", MAX_BYTES);
    p->gpu_bw = jr_num(&r, gpu, "gpu", "bandwidth", MAX_RATE);
    /* measured since the GPU backend exists: profiles saved before it lack them (0) */
    if (gpu && cJSON_GetObjectItemCaseSensitive(gpu, "submit")) {
        p->gpu_software = jr_bool(&r, gpu, "gpu", "software");
        p->gpu_upload = jr_num(&r, gpu, "gpu", "upload", MAX_RATE);
        p->gpu_download = jr_num(&r, gpu, "gpu", "download", MAX_RATE);
        p->gpu_submit = jr_num(&r, gpu, "gpu", "submit", MAX_RTT);
    }
    if (gpu && cJSON_GetObjectItemCaseSensitive(gpu, "dispatch"))   /* measured since rings use GPUs */
        p->gpu_dispatch = jr_num(&r, gpu, "gpu", "dispatch", MAX_RTT);
    jr_rates(&r, gpu, "gpu", p->gpu);

    const cJSON *net = jr_obj(&r, j, "network");
    p->net_rtt = jr_num(&r, net, "network", "rtt", MAX_RTT);
    p->net_bw = jr_num(&r, net, "network", "throughput", MAX_RATE);

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
