/* The memory budget's one rule (util/sysmem.h), read from fake system roots: /proc/meminfo of a
 * recent and of an old kernel, no cgroup, cgroup v1 (the tightest limit up the hierarchy and the
 * hierarchical limit, the total_ file pages), cgroup v2 (memory.high below memory.max in an
 * ancestor; file pages on the LRU, not "file", count as reclaimable), a container that sees
 * only its own subtree, a cgroup outside the mounted subtree, a limit above the machine, and
 * Android (found by its build.prop; the low-memory killer's margin; no /proc/meminfo). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "util/sysmem.h"

#define GIB (1ULL << 30)
#define MIB (1ULL << 20)

/* A Linux 6.x desktop (values in kB). */
static const char meminfo_modern[] =
    "MemTotal:       16318412 kB\n"
    "MemFree:         1204388 kB\n"
    "MemAvailable:    9874120 kB\n"
    "Buffers:          402116 kB\n"
    "Cached:          8391780 kB\n"
    "SwapCached:         1024 kB\n"
    "Active:          6012332 kB\n"
    "Inactive:        6873316 kB\n"
    "SwapTotal:       2097148 kB\n"
    "SwapFree:        2061052 kB\n"
    "Shmem:            612440 kB\n"
    "KReclaimable:     390284 kB\n"
    "SReclaimable:     390284 kB\n"
    "SUnreclaim:       160072 kB\n"
    "HugePages_Total:       0\n"
    "Hugepagesize:       2048 kB\n";
#define MODERN_AVAILABLE (9874120ULL * 1024)

/* A 3.10 kernel: no MemAvailable line. */
static const char meminfo_old[] =
    "MemTotal:        2048000 kB\n"
    "MemFree:          100000 kB\n"
    "Buffers:           20000 kB\n"
    "Cached:           300000 kB\n"
    "SwapTotal:             0 kB\n"
    "SwapFree:              0 kB\n"
    "Shmem:             50000 kB\n"
    "SReclaimable:      30000 kB\n";

/* A cgroup v1 memory controller next to an unused unified hierarchy. */
#define V1_CG "/process_api/6c09c6bac4f99f9b5207d94bb1ce4255"
static const char cgroup_v1[] =
    "9:name=systemd:/\n"
    "8:pids:/\n"
    "4:memory:" V1_CG "\n"
    "2:cpuacct:/\n"
    "1:cpu:/\n"
    "0::/\n";
static const char mountinfo_v1[] =
    "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
static const char stat_v1[] =
    "cache 148148224\n"
    "rss 31449088\n"
    "inactive_file 98447360\n"
    "active_file 49700864\n"
    "hierarchical_memory_limit 536870912\n"
    "total_cache 148148224\n"
    "total_inactive_file 98447361\n"
    "total_active_file 49700865\n";

/* systemd with the unified hierarchy only. */
#define V2_CG "/user.slice/user-1000.slice/session-2.scope"
static const char cgroup_v2[] = "0::" V2_CG "\n";
static const char mountinfo_v2[] =
    "24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";
/* "file" counts shared memory and tmpfs too (1 GiB here), which the kernel cannot drop */
static const char stat_v2[] =
    "anon 1183744000\n"
    "file 4994920448\n"
    "shmem 1073741824\n"
    "active_anon 1073741824\n"
    "inactive_anon 110002176\n"
    "active_file 2147483648\n"
    "inactive_file 1773694976\n";

/* A container: the cgroup namespace root is the container's own cgroup. */
static const char cgroup_container[] = "0::/docker/4f1c2a\n";
static const char mountinfo_container[] =
    "500 400 0:70 /docker/4f1c2a /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n";

static char tmpdir[] = "/tmp/prima-sysmem.XXXXXX";

/* Write text to root/rel, making the directories on the way. */
static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

/* A fresh fake root in root (cap bytes) holding the given meminfo, cgroup and mountinfo (NULL:
 * the file is absent). */
static void fake_root(char *root, size_t cap, const char *meminfo, const char *cgroup,
                      const char *mountinfo)
{
    static int n;
    snprintf(root, cap, "%s/root%d", tmpdir, n++);
    REQUIRE(mkdir(root, 0755) == 0, "mkdir %s", root);
    if (meminfo)
        put(root, "proc/meminfo", meminfo);
    if (cgroup)
        put(root, "proc/self/cgroup", cgroup);
    if (mountinfo)
        put(root, "proc/self/mountinfo", mountinfo);
}

static void meminfo_only(void)
{
    char root[512], err[256];
    sysmem m;
    fake_root(root, sizeof root, meminfo_modern, NULL, NULL);
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.total == 16318412ULL * 1024, "total %llu", (unsigned long long)m.total);
    CHECK(m.available == MODERN_AVAILABLE, "available %llu", (unsigned long long)m.available);
    CHECK(m.swap_total == 2097148ULL * 1024 && m.swap_free == 2061052ULL * 1024, "swap");
    /* Cached + Buffers + SReclaimable - Shmem */
    CHECK(m.reclaimable == (8391780ULL + 402116 + 390284 - 612440) * 1024, "reclaimable %llu",
          (unsigned long long)m.reclaimable);
    CHECK(!m.cgroup_limit && !m.cgroup_usage && !m.cgroup_reclaimable, "a cgroup without files");
    CHECK(sysmem_room(&m) == MODERN_AVAILABLE, "room without a cgroup %llu",
          (unsigned long long)sysmem_room(&m));

    fake_root(root, sizeof root, meminfo_old, NULL, NULL);
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.available == (100000ULL + 300000 + 20000 + 30000 - 50000) * 1024,
          "estimated available %llu", (unsigned long long)m.available);

    fake_root(root, sizeof root, NULL, NULL, NULL);
    CHECK(sysmem_read(root, &m, err, sizeof err) == -1 && strstr(err, "/proc/meminfo"),
          "no meminfo: %s", err);
    fake_root(root, sizeof root, "MemFree: 100 kB\n", NULL, NULL);
    CHECK(sysmem_read(root, &m, err, sizeof err) == -1 && strstr(err, "MemTotal"),
          "missing MemTotal accepted");
    fake_root(root, sizeof root, "", NULL, NULL);
    CHECK(sysmem_read(root, &m, err, sizeof err) == -1, "empty meminfo accepted");
    /* "MemTotalX" must not be taken for MemTotal */
    fake_root(root, sizeof root, "MemTotalX: 5 kB\n", NULL, NULL);
    CHECK(sysmem_read(root, &m, err, sizeof err) == -1, "prefix key accepted");
}

static void cgroup_v1_layout(void)
{
    char root[512], dir[1024], want[1024], err[256];
    fake_root(root, sizeof root, meminfo_modern, cgroup_v1, mountinfo_v1);
    const char *mem = "sys/fs/cgroup/memory";
    char rel[512];
    snprintf(rel, sizeof rel, "%s" V1_CG "/memory.limit_in_bytes", mem);
    put(root, rel, "2147483648\n");
    snprintf(rel, sizeof rel, "%s" V1_CG "/memory.usage_in_bytes", mem);
    put(root, rel, "419430400\n");
    snprintf(rel, sizeof rel, "%s" V1_CG "/memory.stat", mem);
    put(root, rel, stat_v1);
    snprintf(rel, sizeof rel, "%s/process_api/memory.limit_in_bytes", mem);
    put(root, rel, "805306368\n");   /* the parent's 768 MiB caps the child's 2 GiB */
    snprintf(rel, sizeof rel, "%s/memory.limit_in_bytes", mem);
    put(root, rel, "9223372036854771712\n");   /* v1's "unlimited" */

    CHECK(sysmem_cgroup_dir(root, "memory", dir, sizeof dir) == 1, "v1 memory version");
    snprintf(want, sizeof want, "%s/%s" V1_CG, root, mem);
    CHECK(!strcmp(dir, want), "v1 dir %s", dir);
    CHECK(sysmem_cgroup_dir(root, "cpu", dir, sizeof dir) == 1, "v1 cpu version");
    snprintf(want, sizeof want, "%s/sys/fs/cgroup/cpu", root);
    CHECK(!strcmp(dir, want), "v1 cpu dir %s", dir);
    CHECK(sysmem_cgroup_dir(root, "memory", dir, 8) == 0, "truncated dir returned");

    sysmem m;
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    /* the hierarchical limit (512 MiB) is tighter than any file on the way up */
    CHECK(m.cgroup_limit == 512 * MIB, "v1 limit %llu", (unsigned long long)m.cgroup_limit);
    CHECK(m.cgroup_usage == 400 * MIB, "v1 usage %llu", (unsigned long long)m.cgroup_usage);
    CHECK(m.cgroup_reclaimable == 98447361ULL + 49700865ULL,
          "v1 reclaimable uses the total_ keys: %llu", (unsigned long long)m.cgroup_reclaimable);
    CHECK(sysmem_room(&m) == 512 * MIB - (400 * MIB - (98447361ULL + 49700865ULL)),
          "v1 room %llu", (unsigned long long)sysmem_room(&m));

    /* without the hierarchical line, the parent's limit is the tightest */
    snprintf(rel, sizeof rel, "%s" V1_CG "/memory.stat", mem);
    put(root, rel, "total_inactive_file 1000\ntotal_active_file 24\n");
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.cgroup_limit == 768 * MIB && m.cgroup_reclaimable == 1024, "v1 parent limit %llu",
          (unsigned long long)m.cgroup_limit);
}

static void cgroup_v2_layout(void)
{
    char root[512], dir[1024], want[1024], err[256];
    fake_root(root, sizeof root, meminfo_modern, cgroup_v2, mountinfo_v2);
    const char *scope = "sys/fs/cgroup" V2_CG, *slice = "sys/fs/cgroup/user.slice/user-1000.slice";
    char rel[512];
    snprintf(rel, sizeof rel, "%s/memory.max", scope);
    put(root, rel, "max\n");
    snprintf(rel, sizeof rel, "%s/memory.high", scope);
    put(root, rel, "max\n");
    snprintf(rel, sizeof rel, "%s/memory.current", scope);
    put(root, rel, "5368709120\n");
    snprintf(rel, sizeof rel, "%s/memory.stat", scope);
    put(root, rel, stat_v2);
    snprintf(rel, sizeof rel, "%s/memory.max", slice);
    put(root, rel, "8589934592\n");
    snprintf(rel, sizeof rel, "%s/memory.high", slice);
    put(root, rel, "6442450944\n");   /* reclaim starts at 6 GiB: the limit that counts */
    /* the hierarchy's root cgroup has no memory.max: the walk stops there */

    CHECK(sysmem_cgroup_dir(root, "memory", dir, sizeof dir) == 2, "v2 version");
    snprintf(want, sizeof want, "%s/%s", root, scope);
    CHECK(!strcmp(dir, want), "v2 dir %s", dir);
    CHECK(sysmem_cgroup_dir(root, "cpu", dir, sizeof dir) == 2 && !strcmp(dir, want),
          "v2 cpu dir %s", dir);

    sysmem m;
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.cgroup_limit == 6 * GIB, "v2 limit %llu", (unsigned long long)m.cgroup_limit);
    CHECK(m.cgroup_usage == 5 * GIB, "v2 usage %llu", (unsigned long long)m.cgroup_usage);
    /* active + inactive file, not "file" (which holds 1 GiB of shared memory) */
    CHECK(m.cgroup_reclaimable == 2147483648ULL + 1773694976ULL, "v2 reclaimable %llu",
          (unsigned long long)m.cgroup_reclaimable);
    CHECK(sysmem_room(&m) == 6 * GIB - (5 * GIB - (2147483648ULL + 1773694976ULL)),
          "v2 room %llu", (unsigned long long)sysmem_room(&m));

    /* a limit above the machine's memory is no limit */
    snprintf(rel, sizeof rel, "%s/memory.high", slice);
    put(root, rel, "max\n");
    snprintf(rel, sizeof rel, "%s/memory.max", slice);
    put(root, rel, "68719476736\n");
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(!m.cgroup_limit && sysmem_room(&m) == MODERN_AVAILABLE, "64 GiB limit: %llu",
          (unsigned long long)m.cgroup_limit);
}

static void container_layout(void)
{
    char root[512], dir[1024], want[1024], err[256];
    fake_root(root, sizeof root, meminfo_modern, cgroup_container, mountinfo_container);
    put(root, "sys/fs/cgroup/memory.max", "1073741824\n");
    put(root, "sys/fs/cgroup/memory.high", "max\n");
    put(root, "sys/fs/cgroup/memory.current", "268435456\n");
    put(root, "sys/fs/cgroup/memory.stat", "active_file 0\ninactive_file 0\n");
    CHECK(sysmem_cgroup_dir(root, "memory", dir, sizeof dir) == 2, "container version");
    snprintf(want, sizeof want, "%s/sys/fs/cgroup", root);
    CHECK(!strcmp(dir, want), "container dir %s", dir);
    sysmem m;
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.cgroup_limit == GIB && sysmem_room(&m) == 768 * MIB, "container room %llu",
          (unsigned long long)sysmem_room(&m));

    /* a cgroup outside the mounted subtree is not visible: no cgroup */
    fake_root(root, sizeof root, meminfo_modern, "0::/elsewhere\n", mountinfo_container);
    put(root, "sys/fs/cgroup/memory.max", "1073741824\n");
    CHECK(sysmem_cgroup_dir(root, "memory", dir, sizeof dir) == 0,
          "a cgroup outside the mounted subtree was resolved to %s", dir);
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(!m.cgroup_limit && sysmem_room(&m) == MODERN_AVAILABLE, "outside cgroup limit %llu",
          (unsigned long long)m.cgroup_limit);

    fake_root(root, sizeof root, meminfo_modern, "", "");
    CHECK(sysmem_cgroup_dir(root, "memory", dir, sizeof dir) == 0, "no cgroup resolved to %s", dir);
}

/* An Android phone (kernel 4.19, cgroup v1 memory controller at /dev/memcg, an app in its
 * per-app group with no limit): Android is found by its build.prop, and the room keeps the
 * low-memory killer's margin below MemAvailable. */
static const char meminfo_android[] =
    "MemTotal:        5745096 kB\n"
    "MemFree:          163912 kB\n"
    "MemAvailable:    2316604 kB\n"
    "Buffers:            4428 kB\n"
    "Cached:          2146504 kB\n"
    "SwapCached:        77376 kB\n"
    "SwapTotal:       2621436 kB\n"
    "SwapFree:         933340 kB\n"
    "Shmem:             21368 kB\n"
    "SReclaimable:     169112 kB\n"
    "CmaTotal:         200704 kB\n"
    "CmaFree:               0 kB\n";
#define ANDROID_CG "/apps/uid_10187/pid_4321"
static const char cgroup_android[] =
    "5:schedtune:/top-app\n"
    "4:memory:" ANDROID_CG "\n"
    "3:cpuset:/top-app\n"
    "2:cpu:/\n"
    "1:blkio:/\n"
    "0::/uid_10187/pid_4321\n";
static const char mountinfo_android[] =
    "1 0 253:0 / / ro,relatime - ext4 /dev/root ro,seclabel\n"
    "18 1 0:17 / /dev rw,nosuid,relatime - tmpfs tmpfs rw,seclabel,mode=755\n"
    "23 18 0:21 / /dev/memcg rw,nosuid,nodev,noexec,relatime - cgroup none rw,memory\n"
    "24 18 0:22 / /dev/cpuset rw,nosuid,nodev,noexec,relatime - cgroup none rw,cpuset\n";

static void android_layout(void)
{
    char root[512], err[256];
    sysmem m;
    fake_root(root, sizeof root, meminfo_android, cgroup_android, mountinfo_android);
    CHECK(!sysmem_android(root), "Android found without its build.prop");
    put(root, "system/build.prop", "ro.build.version.sdk=30\n");
    put(root, "dev/memcg/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "dev/memcg" ANDROID_CG "/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "dev/memcg" ANDROID_CG "/memory.usage_in_bytes", "356515840\n");
    CHECK(sysmem_android(root), "Android not found from its build.prop");
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.android, "sysmem_read did not mark Android");
    CHECK(m.available == 2316604ULL * 1024, "available %llu", (unsigned long long)m.available);
    CHECK(!m.cgroup_limit, "an unlimited app memcg read as a limit %llu",
          (unsigned long long)m.cgroup_limit);
    uint64_t total = 5745096ULL * 1024, margin = total / 10;
    CHECK(sysmem_android_margin(total) == (uint64_t)((double)total * 0.10), "margin %llu",
          (unsigned long long)sysmem_android_margin(total));
    CHECK(sysmem_room(&m) == m.available - sysmem_android_margin(total) &&
              sysmem_room(&m) + margin - 1 <= m.available,
          "room %llu, available %llu", (unsigned long long)sysmem_room(&m),
          (unsigned long long)m.available);
    /* the same figures on Linux keep no margin */
    m.android = false;
    CHECK(sysmem_room(&m) == m.available, "a margin outside Android");

    /* a small phone: the margin is at least 256 MiB, and the room never goes below zero */
    sysmem small = {.total = 1536 * MIB, .available = 300 * MIB, .android = true};
    CHECK(sysmem_android_margin(small.total) == 256 * MIB, "small margin %llu",
          (unsigned long long)sysmem_android_margin(small.total));
    CHECK(sysmem_room(&small) == 44 * MIB, "small room %llu",
          (unsigned long long)sysmem_room(&small));
    small.available = 200 * MIB;
    CHECK(sysmem_room(&small) == 0, "room below zero %llu", (unsigned long long)sysmem_room(&small));

    /* /proc/meminfo denied (an app's SELinux domain): sysinfo(2) stands in, on Android only */
    fake_root(root, sizeof root, NULL, NULL, NULL);
    CHECK(sysmem_read(root, &m, err, sizeof err) == -1, "no meminfo accepted outside Android");
    put(root, "system/build.prop", "ro.build.version.sdk=34\n");
    REQUIRE(sysmem_read(root, &m, err, sizeof err) == 0, "sysinfo fallback: %s", err);
    /* this machine's sysinfo (its totals may differ from a container's virtual meminfo) */
    CHECK(m.android && m.total > 0 && m.available > 0 && m.available <= m.total &&
              !m.reclaimable,
          "sysinfo: total %llu, available %llu, reclaimable %llu", (unsigned long long)m.total,
          (unsigned long long)m.available, (unsigned long long)m.reclaimable);
}

/* This machine: the runtime's budget is the planner's rule on the same files. */
static void this_system(void)
{
    sysmem m;
    char err[256];
    REQUIRE(sysmem_read("", &m, err, sizeof err) == 0, "%s", err);
    CHECK(m.total > 0 && m.available <= m.total, "available %llu of %llu",
          (unsigned long long)m.available, (unsigned long long)m.total);
    uint64_t budget = sysmem_budget(), room = sysmem_room(&m);
    /* read at two moments: allow what other processes change in between */
    double diff = budget > room ? (double)(budget - room) : (double)(room - budget);
    CHECK(budget > 0 && diff <= 0.1 * (double)m.total, "budget %llu, room %llu",
          (unsigned long long)budget, (unsigned long long)room);
}

int main(void)
{
    REQUIRE(mkdtemp(tmpdir), "mkdtemp");
    meminfo_only();
    cgroup_v1_layout();
    cgroup_v2_layout();
    container_layout();
    android_layout();
    this_system();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0, "removing %s", tmpdir);
    return test_done();
}
