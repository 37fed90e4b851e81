#include <stdio.h>
#include <string.h>

#include "cluster/sysmem.h"

static uint64_t read_u64_file(const char *path, uint64_t def)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return def;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;   /* "max" (v2, no limit) does not parse: default */
    fclose(f);
    return ok ? v : def;
}

/* A "key value" line of a stats file such as /proc/meminfo or memory.stat. */
static uint64_t read_stat(const char *path, const char *key, uint64_t def)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return def;
    char line[256];
    size_t kl = strlen(key);
    uint64_t v = def;
    while (fgets(line, sizeof line, f)) {
        unsigned long long x;
        if (!strncmp(line, key, kl) && (line[kl] == ' ' || line[kl] == ':') &&
            sscanf(line + kl + 1, " %llu", &x) == 1) {
            v = x;
            break;
        }
    }
    fclose(f);
    return v;
}

/* The memory cgroup's directory for this process, or "" when there is none. */
static void cgroup_dir(char *dir, size_t cap, int *v2)
{
    dir[0] = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return;
    char line[1024], v2path[1024] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        if (!strcmp(c1 + 1, "memory")) {
            snprintf(dir, cap, "/sys/fs/cgroup/memory%s", c2 + 1);
            *v2 = 0;
            break;
        }
        if (c1 == line + 1 && line[0] == '0' && c1[1] == 0)
            snprintf(v2path, sizeof v2path, "%s", c2 + 1);
    }
    fclose(f);
    if (!dir[0] && v2path[0]) {
        snprintf(dir, cap, "/sys/fs/cgroup%s", v2path);
        *v2 = 1;
    }
}

uint64_t sysmem_budget(void)
{
    uint64_t avail = read_stat("/proc/meminfo", "MemAvailable", 0) * 1024;
    char dir[1024], path[1200];
    int v2 = 0;
    cgroup_dir(dir, sizeof dir, &v2);
    if (!dir[0])
        return avail;
    /* The tightest limit from this cgroup up to the root. */
    uint64_t limit = UINT64_MAX;
    char walk[1024];
    snprintf(walk, sizeof walk, "%s", dir);
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", walk, v2 ? "memory.max" : "memory.limit_in_bytes");
        uint64_t l = read_u64_file(path, UINT64_MAX);
        if (l < limit)
            limit = l;
        char *slash = strrchr(walk, '/');
        if (!slash || slash - walk <= (long)strlen("/sys/fs/cgroup"))
            break;
        *slash = 0;
    }
    if (limit >= avail)
        return avail;
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    uint64_t usage = read_u64_file(path, 0);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    uint64_t cache = read_stat(path, v2 ? "file" : "total_cache", 0);
    uint64_t other = usage > cache ? usage - cache : 0;
    return limit > other ? limit - other : 0;
}

uint64_t sysmem_weight_budget(void)
{
    return (uint64_t)((double)sysmem_budget() * (1 - SYSMEM_RESERVE));
}
