/* sysmem.c — the memory this device can give to inference (sysmem.h): /proc/meminfo and the
 * memory cgroup, read below a root directory so that tests can lay out fake ones. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "util/sysmem.h"

char *sysmem_read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 14, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1 || cap >= (4u << 20))
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* The value of "Key:" in kB text as bytes; false when the key is absent or malformed. */
static bool meminfo_field(const char *text, const char *key, uint64_t *bytes)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, klen) || line[klen] != ':')
            continue;
        char *end;
        unsigned long long v = strtoull(line + klen + 1, &end, 10);
        if (end == line + klen + 1)
            return false;
        while (*end == ' ')
            end++;
        uint64_t unit = strncmp(end, "kB", 2) ? 1 : 1024;
        *bytes = (uint64_t)v * unit;
        return true;
    }
    return false;
}

/* /proc/meminfo. Needs MemTotal; MemAvailable is estimated (free + reclaimable) on kernels that
 * lack it. */
static int parse_meminfo(const char *text, sysmem *mi, char *err, size_t errlen)
{
        uint64_t free_b = 0, cached = 0, buffers = 0, sreclaim = 0, shmem = 0;
    if (!meminfo_field(text, "MemTotal", &mi->total) || !mi->total) {
        snprintf(err, errlen, "/proc/meminfo: no MemTotal line");
        return -1;
    }
    meminfo_field(text, "MemFree", &free_b);
    meminfo_field(text, "Cached", &cached);
    meminfo_field(text, "Buffers", &buffers);
    meminfo_field(text, "SReclaimable", &sreclaim);
    meminfo_field(text, "Shmem", &shmem);
    meminfo_field(text, "SwapTotal", &mi->swap_total);
    meminfo_field(text, "SwapFree", &mi->swap_free);
    uint64_t page = cached + buffers + sreclaim;
    mi->reclaimable = page > shmem ? page - shmem : 0;
    if (!meminfo_field(text, "MemAvailable", &mi->available))
        mi->available = free_b + mi->reclaimable;   /* kernels before 3.14 */
    if (mi->available > mi->total)
        mi->available = mi->total;
    return 0;
}

/* The line of text at *p as a C string in buf (empty when it does not fit in len bytes), *p
 * moved past it; false at the end of the text. */
static bool next_line(const char **p, char *buf, size_t len)
{
    if (!**p)
        return false;
    const char *end = strchr(*p, '\n');
    if (!end)
        end = *p + strlen(*p);
    size_t n = (size_t)(end - *p);
    n = n < len ? n : 0;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p = *end ? end + 1 : end;
    return true;
}

/* Does the comma-separated list contain item? */
static bool list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
        if (!strncmp(p, item, n) && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* The cgroup path of the process for a v1 controller (version 1) or the unified hierarchy
 * (version 2), from /proc/self/cgroup. */
static bool cgroup_path(const char *proc_cgroup, int version, const char *controller, char *path,
                        size_t len)
{
    char line[1024];
    for (const char *p = proc_cgroup; next_line(&p, line, sizeof line);) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        /* v2: "0::PATH" (hierarchy 0, no controller list); v1: "N:memory:PATH" */
        bool match = version == 2 ? !strcmp(line, "0:") : list_has(c1 + 1, controller);
        if (match && strlen(c2 + 1) < len) {
            strcpy(path, c2 + 1);
            return true;
        }
    }
    return false;
}

/* Find the mount of a cgroup hierarchy in mountinfo: fstype "cgroup2" (version 2) or "cgroup"
 * with the controller in its super options (version 1). */
static bool cgroup_mount(const char *mountinfo, int version, const char *controller, char *root,
                         char *mnt, size_t len)
{
    char line[2048];
    for (const char *p = mountinfo; next_line(&p, line, sizeof line);) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
        char *f[5], *save = NULL, *tok = strtok_r(line, " ", &save);
        int nf = 0;
        while (tok && nf < 5) {
            f[nf++] = tok;
            tok = strtok_r(NULL, " ", &save);
        }
        while (tok && strcmp(tok, "-"))
            tok = strtok_r(NULL, " ", &save);
        char *fstype = tok ? strtok_r(NULL, " ", &save) : NULL;
        char *source = fstype ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        bool match = nf == 5 && fstype &&
                     (version == 2 ? !strcmp(fstype, "cgroup2")
                                   : !strcmp(fstype, "cgroup") && super &&
                                         list_has(super, controller));
        if (match && strlen(f[3]) < len && strlen(f[4]) < len) {
            strcpy(root, f[3]);
            strcpy(mnt, f[4]);
            return true;
        }
    }
    return false;
}

/* sysmem_cgroup_dir from the texts of /proc/self/cgroup and /proc/self/mountinfo. */
static int cgroup_dir_of(const char *root, const char *proc_cgroup, const char *mountinfo,
                         const char *controller, char *dir, size_t dirlen)
{
    char path[1024], mroot[1024], mnt[1024];
    /* A controller on a v1 hierarchy takes precedence: on hybrid systems the unified hierarchy
     * exists but does not have the controllers v1 holds. */
    for (int version = 1; version <= 2; version++) {
        if (!cgroup_path(proc_cgroup, version, controller, path, sizeof path) ||
            !cgroup_mount(mountinfo, version, controller, mroot, mnt, sizeof mnt))
            continue;
        /* The mount shows the hierarchy from mroot down (a container sees its own subtree);
         * a path outside it is not visible here. */
        size_t rl = strlen(mroot);
        const char *rest;
        if (!strcmp(mroot, "/"))
            rest = path;
        else if (!strncmp(path, mroot, rl) && (path[rl] == '/' || path[rl] == '\0'))
            rest = path + rl;
        else
            continue;
        if (!strcmp(rest, "/"))
            rest = "";
        if ((size_t)snprintf(dir, dirlen, "%s%s%s", root, mnt, rest) >= dirlen)
            return 0;
        return version;
    }
    return 0;
}

int sysmem_cgroup_dir(const char *root, const char *controller, char *dir, size_t dirlen)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    char *cg = sysmem_read_text(path);
    snprintf(path, sizeof path, "%s/proc/self/mountinfo", root);
    char *mounts = sysmem_read_text(path);
    int version = cg && mounts ? cgroup_dir_of(root, cg, mounts, controller, dir, dirlen) : 0;
    free(cg);
    free(mounts);
    return version;
}

/* A limit file: "max" (v2) or a number; values at or above 2^62 (v1's "unlimited") mean none.
 * The limit, or 0 for none or unreadable text. */
static uint64_t parse_cgroup_limit(const char *text)
{
    while (*text == ' ' || *text == '\n')
        text++;
    if (!strncmp(text, "max", 3))
        return 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || v >= (1ULL << 62))
        return 0;
    return (uint64_t)v;
}

bool sysmem_stat_field(const char *text, const char *key, uint64_t *v)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (!strncmp(line, key, klen) && line[klen] == ' ') {
            *v = strtoull(line + klen + 1, NULL, 10);
            return true;
        }
    }
    return false;
}

/* What memory.stat adds: the droppable file pages (v2 "inactive_file" + "active_file", v1 the
 * hierarchical "total_" ones, else the local ones) and v1's "hierarchical_memory_limit" (0 when
 * none). */
static void parse_cgroup_stat(const char *memory_stat, uint64_t *reclaimable,
                              uint64_t *hier_limit)
{
    uint64_t inact = 0, act = 0;
    if (sysmem_stat_field(memory_stat, "total_inactive_file", &inact))
        sysmem_stat_field(memory_stat, "total_active_file", &act);
    else {
        sysmem_stat_field(memory_stat, "inactive_file", &inact);
        sysmem_stat_field(memory_stat, "active_file", &act);
    }
    *reclaimable = inact + act;
    uint64_t lim = 0;
    *hier_limit =
        sysmem_stat_field(memory_stat, "hierarchical_memory_limit", &lim) && lim < (1ULL << 62)
            ? lim : 0;
}

/* A limit or counter file of the memory cgroup, in bytes (0 if absent or no limit). */
static uint64_t read_cgroup_value(const char *dir, const char *file)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *t = sysmem_read_text(path);
    uint64_t v = t ? parse_cgroup_limit(t) : 0;
    free(t);
    return v;
}

static uint64_t min_limit(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

/* The lowest limit of the cgroup and its visible ancestors: each caps its whole subtree. */
static uint64_t cgroup_limit(char *dir, int version)
{
    uint64_t lim = 0;
    char path[1200];
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", dir,
                 version == 2 ? "memory.max" : "memory.limit_in_bytes");
        if (access(path, R_OK))
            break;   /* above the cgroup mount */
        if (version == 2) {
            lim = min_limit(lim, read_cgroup_value(dir, "memory.max"));
            lim = min_limit(lim, read_cgroup_value(dir, "memory.high"));  /* reclaim starts here */
        } else
            lim = min_limit(lim, read_cgroup_value(dir, "memory.limit_in_bytes"));
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
    return lim;
}

bool sysmem_android(const char *root)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/system/build.prop", root);
    return access(path, F_OK) == 0 || (!*root && getenv("ANDROID_ROOT"));
}

uint64_t sysmem_android_margin(uint64_t total)
{
    uint64_t share = (uint64_t)((double)total * SYSMEM_ANDROID_MARGIN_SHARE);
    return share > SYSMEM_ANDROID_MARGIN_MIN ? share : SYSMEM_ANDROID_MARGIN_MIN;
}

/* Android apps may be denied /proc/meminfo: the kernel's own counters, without the page cache
 * (sysinfo has none), so what is available errs low, as the margin does. */
static int read_sysinfo(sysmem *m, char *err, size_t errlen)
{
    struct sysinfo si;
    if (sysinfo(&si) || !si.totalram) {
        snprintf(err, errlen, "cannot read /proc/meminfo, nor sysinfo()");
        return -1;
    }
    uint64_t unit = si.mem_unit ? si.mem_unit : 1;
    m->total = (uint64_t)si.totalram * unit;
    m->available = ((uint64_t)si.freeram + si.bufferram) * unit;
    m->swap_total = (uint64_t)si.totalswap * unit;
    m->swap_free = (uint64_t)si.freeswap * unit;
    return 0;
}

int sysmem_read(const char *root, sysmem *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->android = sysmem_android(root);
    char path[1100];
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    char *text = sysmem_read_text(path);
    if (!text && m->android) {
        if (read_sysinfo(m, err, errlen))
            return -1;
    } else if (!text) {
        snprintf(err, errlen, "cannot read %s (memory is measured on Linux and Android only)",
                 path);
        return -1;
    } else {
        int rc = parse_meminfo(text, m, err, errlen);
        free(text);
        if (rc)
            return -1;
    }

    char dir[1024];
    int version = sysmem_cgroup_dir(root, "memory", dir, sizeof dir);
    if (!version)
        return 0;
    char stat_path[1100];
    snprintf(stat_path, sizeof stat_path, "%s/memory.stat", dir);
    char *stat = sysmem_read_text(stat_path);
    uint64_t reclaimable = 0, hier_limit = 0;
    if (stat)
        parse_cgroup_stat(stat, &reclaimable, &hier_limit);
    free(stat);
    uint64_t usage =
        read_cgroup_value(dir, version == 2 ? "memory.current" : "memory.usage_in_bytes");
    uint64_t lim = min_limit(cgroup_limit(dir, version), hier_limit);
    if (lim && lim < m->total) {
        m->cgroup_limit = lim;
        m->cgroup_usage = usage;
        m->cgroup_reclaimable = reclaimable < usage ? reclaimable : usage;
    }
    return 0;
}

uint64_t sysmem_room(const sysmem *m)
{
    uint64_t avail = m->available;
    if (m->android) {
        uint64_t margin = sysmem_android_margin(m->total);
        avail = avail > margin ? avail - margin : 0;
    }
    if (m->cgroup_limit) {
        uint64_t used = m->cgroup_usage > m->cgroup_reclaimable
                            ? m->cgroup_usage - m->cgroup_reclaimable : 0;
        uint64_t left = m->cgroup_limit > used ? m->cgroup_limit - used : 0;
        if (left < avail)
            avail = left;
    }
    return avail;
}

uint64_t sysmem_budget(void)
{
    sysmem m;
    char err[256];
    return sysmem_read("", &m, err, sizeof err) ? 0 : sysmem_room(&m);
}

uint64_t sysmem_weight_budget(void)
{
    return (uint64_t)((double)sysmem_budget() * (1 - SYSMEM_RESERVE));
}
