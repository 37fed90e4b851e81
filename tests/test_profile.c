/* Device profiles: parsing recorded /proc/meminfo, /proc/self/cgroup, mountinfo and cgroup
 * v1/v2 memory files; the JSON round trip and its validation; the available-memory rule. */
#include <string.h>

#include "sched/profile.h"
#include "test.h"

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

static void meminfo_parsing(void)
{
    meminfo mi;
    char err[256];
    REQUIRE(parse_meminfo(meminfo_modern, &mi, err, sizeof err) == 0, "%s", err);
    CHECK(mi.total == 16318412ULL * 1024, "total %llu", (unsigned long long)mi.total);
    CHECK(mi.available == 9874120ULL * 1024, "available %llu", (unsigned long long)mi.available);
    CHECK(mi.swap_total == 2097148ULL * 1024 && mi.swap_free == 2061052ULL * 1024, "swap");
    /* Cached + Buffers + SReclaimable - Shmem */
    CHECK(mi.reclaimable == (8391780ULL + 402116 + 390284 - 612440) * 1024, "reclaimable %llu",
          (unsigned long long)mi.reclaimable);

    REQUIRE(parse_meminfo(meminfo_old, &mi, err, sizeof err) == 0, "%s", err);
    CHECK(mi.available == (100000ULL + 300000 + 20000 + 30000 - 50000) * 1024,
          "estimated available %llu", (unsigned long long)mi.available);

    CHECK(parse_meminfo("MemFree: 100 kB\n", &mi, err, sizeof err) == -1 && strstr(err, "MemTotal"),
          "missing MemTotal accepted");
    CHECK(parse_meminfo("", &mi, err, sizeof err) == -1, "empty meminfo accepted");
    /* "MemTotalX" must not be taken for MemTotal */
    CHECK(parse_meminfo("MemTotalX: 5 kB\n", &mi, err, sizeof err) == -1, "prefix key accepted");
}

/* This machine's layout: cgroup v1 memory controller next to an unused unified hierarchy. */
static const char cgroup_v1[] =
    "9:name=systemd:/\n"
    "8:pids:/\n"
    "4:memory:/process_api/6c09c6bac4f99f9b5207d94bb1ce4255\n"
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
static const char cgroup_v2[] = "0::/user.slice/user-1000.slice/session-2.scope\n";
static const char mountinfo_v2[] =
    "24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";
static const char stat_v2[] =
    "anon 1183744000\n"
    "file 3921178624\n"
    "active_anon 1073741824\n"
    "inactive_anon 110002176\n"
    "active_file 2147483648\n"
    "inactive_file 1773694976\n";

/* A container: the cgroup namespace root is the container's own cgroup. */
static const char cgroup_container[] = "0::/docker/4f1c2a\n";
static const char mountinfo_container[] =
    "500 400 0:70 /docker/4f1c2a /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n";

static void cgroup_parsing(void)
{
    char dir[512];
    CHECK(cgroup_dir(cgroup_v1, mountinfo_v1, "memory", dir, sizeof dir) == 1 &&
          !strcmp(dir, "/sys/fs/cgroup/memory/process_api/6c09c6bac4f99f9b5207d94bb1ce4255"),
          "v1 dir %s", dir);
    CHECK(cgroup_dir(cgroup_v2, mountinfo_v2, "memory", dir, sizeof dir) == 2 &&
          !strcmp(dir, "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"), "v2 dir %s", dir);
    CHECK(cgroup_dir(cgroup_container, mountinfo_container, "memory", dir, sizeof dir) == 2 &&
          !strcmp(dir, "/sys/fs/cgroup"), "container dir %s", dir);
    CHECK(cgroup_dir("0::/elsewhere\n", mountinfo_container, "memory", dir, sizeof dir) == 0,
          "a cgroup outside the mounted subtree was resolved to %s", dir);
    CHECK(cgroup_dir("", "", "memory", dir, sizeof dir) == 0, "no cgroup resolved to %s", dir);
    CHECK(cgroup_dir(cgroup_v1, mountinfo_v1, "memory", dir, 8) == 0, "truncated dir returned");

    /* the cpu controller of the same v1 layout, and of v2 */
    CHECK(cgroup_dir(cgroup_v1, mountinfo_v1, "cpu", dir, sizeof dir) == 1 &&
          !strcmp(dir, "/sys/fs/cgroup/cpu"), "v1 cpu dir %s", dir);
    CHECK(cgroup_dir(cgroup_v2, mountinfo_v2, "cpu", dir, sizeof dir) == 2 &&
          !strcmp(dir, "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"), "v2 cpu dir %s", dir);
    CHECK(parse_cpu_quota("50000 100000\n", NULL, NULL) == 0.5, "v2 cpu.max half a CPU");
    CHECK(parse_cpu_quota("max 100000\n", NULL, NULL) == 0, "v2 cpu.max unlimited");
    CHECK(parse_cpu_quota("250000\n", "100000\n", NULL) == 2.5, "v1 two and a half CPUs");
    CHECK(parse_cpu_quota("-1\n", "100000\n", NULL) == 0, "v1 unlimited");
    CHECK(parse_cpu_quota("", NULL, NULL) == 0, "empty cpu.max");
    double period = 0;
    CHECK(parse_cpu_quota("20000 50000\n", NULL, &period) == 0.4 && period == 0.05,
          "v2 cpu.max period %g s", period);
    CHECK(parse_cpu_quota("100000\n", "200000\n", &period) == 0.5 && period == 0.2,
          "v1 period %g s", period);

    CHECK(parse_cgroup_limit("max\n") == 0, "v2 max");
    CHECK(parse_cgroup_limit("9223372036854771712\n") == 0, "v1 unlimited");
    CHECK(parse_cgroup_limit("1073741824\n") == 1073741824ULL, "1 GiB");
    CHECK(parse_cgroup_limit("garbage") == 0, "garbage");

    cgroup_stat cs;
    parse_cgroup_stat(stat_v1, &cs);
    CHECK(cs.reclaimable == 98447361ULL + 49700865ULL, "v1 reclaimable uses the total_ keys: %llu",
          (unsigned long long)cs.reclaimable);
    CHECK(cs.hier_limit == 536870912ULL, "v1 hierarchical limit %llu", (unsigned long long)cs.hier_limit);
    parse_cgroup_stat(stat_v2, &cs);
    CHECK(cs.reclaimable == 2147483648ULL + 1773694976ULL && cs.hier_limit == 0, "v2 stat");
}

static void available_rule(void)
{
    dev_profile p = {.mem_total = 16ULL << 30, .mem_available = 8ULL << 30};
    CHECK(profile_available(&p) == 8ULL << 30, "no cgroup");
    p.cgroup_limit = 2ULL << 30;
    p.cgroup_usage = 1536ULL << 20;
    p.cgroup_reclaimable = 1ULL << 30;   /* 0.5 GiB used for real: 1.5 GiB left */
    CHECK(profile_available(&p) == 1536ULL << 20, "cgroup left %llu",
          (unsigned long long)profile_available(&p));
    p.cgroup_limit = 64ULL << 30;        /* a limit above the machine changes nothing */
    CHECK(profile_available(&p) == 8ULL << 30, "high cgroup limit");
}

static dev_profile sample_profile(void)
{
    dev_profile p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "laptop \"x\"");
    p.os = OS_ANDROID;
    p.cores = 8;
    p.threads = 6;
    p.cpu_quota = 2.5;
    p.cpu_quota_period = 0.25;
    p.dispatch = 12e-6;
    p.vector = 3.25e8;
    strcpy(p.simd, "neon");
    p.cpu[DT_Q4_K] = (type_rate){1.25e10 / 3, 3.1e10};
    p.cpu[DT_Q6_K] = (type_rate){2.0e9, 0.1};
    p.cpu[DT_F32] = (type_rate){1e-300, 7};
    p.noise = 0.07;
    p.mem_total = 8ULL << 30;
    p.mem_available = 3ULL << 30;
    p.mem_reclaimable = 123456789;
    p.swap_total = 1ULL << 30;
    p.swap_free = 1000;
    p.cgroup_limit = 2ULL << 30;
    p.cgroup_usage = 777;
    p.cgroup_reclaimable = 555;
    p.mem_bw = 12.3e9;
    p.disk_seq = 1.37e9;
    p.disk_rand = 0.2e9 / 7;
    strcpy(p.disk_method, "fadvise");
    p.gpu_present = true;
    p.gpu_unified = true;
    strcpy(p.gpu_name, "Mali");
    p.vram_total = 4ULL << 30;
    p.vram_free = 3ULL << 30;
    p.gpu_bw = 50e9;
    p.gpu[DT_Q4_K] = (type_rate){9e9, 2e10};
    p.net_rtt = 0.0042;
    p.net_bw = 12.5e6;
    return p;
}

static int parse_text(const char *text, dev_profile *p, char *err, size_t errlen)
{
    cJSON *j = cJSON_Parse(text);
    int rc = profile_from_json(j, p, "t.json", err, errlen);
    cJSON_Delete(j);
    return rc;
}

static void json_round_trip(void)
{
    dev_profile a = sample_profile(), b;
    cJSON *j = profile_to_json(&a);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    char err[256];
    REQUIRE(parse_text(text, &b, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(&a, &b, sizeof a), "profile changed in a JSON round trip");
    CHECK(b.cpu[DT_Q4_K].matvec == 1.25e10 / 3 && b.disk_rand == 0.2e9 / 7, "doubles not exact");

    /* every way of breaking one field is reported with the field's name */
    static const struct { const char *from, *to, *field; } breaks[] = {
        {"\"version\":1", "\"version\":2", "version"},
        {"\"os\":\"android\"", "\"os\":\"beos\"", "beos"},
        {"\"cores\":8", "\"cores\":-8", "cpu.cores"},
        {"\"vector\":325000000", "\"vector\":-1", "cpu.vector"},
        {"\"quota_period\":0.25", "\"quota_period\":2", "cpu.quota_period"},
        {"\"bandwidth\":12300000000", "\"bandwidth\":\"fast\"", "memory.bandwidth"},
        {"\"Q6_K\"", "\"Q9_Z\"", "Q9_Z"},
        {"\"present\":true", "\"present\":1", "gpu.present"},
        {"\"rtt\":0.0042", "\"rtt\":1e300", "network.rtt"},
        {"\"total\":8589934592", "\"total\":0", "memory.total"},
        {"\"available\":3221225472", "\"available\":9e9", "available"},
        {"\"disk\":", "\"disc\":", "disk"},
    };
    for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
        char *at = strstr(text, breaks[i].from);
        REQUIRE(at, "sample text lacks %s", breaks[i].from);
        char bad[8192];
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - text), text, breaks[i].to,
                 at + strlen(breaks[i].from));
        err[0] = '\0';
        CHECK(parse_text(bad, &b, err, sizeof err) == -1 && strstr(err, breaks[i].field) &&
                  strstr(err, "t.json"), "break %zu (%s): error \"%s\"", i, breaks[i].to, err);
    }
    /* a profile saved before the vector rate was measured (a profile cache) still loads */
    char *at = strstr(text, "\"vector\":325000000,");
    REQUIRE(at, "sample text lacks the vector rate");
    char old[8192];
    snprintf(old, sizeof old, "%.*s%s", (int)(at - text), text, at + strlen("\"vector\":325000000,"));
    CHECK(parse_text(old, &b, err, sizeof err) == 0 && b.vector == 0 && b.dispatch == a.dispatch,
          "profile without cpu.vector: %s", err);
    /* ... and one saved before the quota's period was: the kernel's default */
    at = strstr(text, ",\"quota_period\":0.25");
    REQUIRE(at, "sample text lacks the quota period");
    snprintf(old, sizeof old, "%.*s%s", (int)(at - text), text, at + strlen(",\"quota_period\":0.25"));
    CHECK(parse_text(old, &b, err, sizeof err) == 0 && b.cpu_quota == 2.5 &&
          b.cpu_quota_period == CFS_DEFAULT_PERIOD, "profile without cpu.quota_period: %s", err);
    CHECK(parse_text("[1, 2]", &b, err, sizeof err) == -1, "array accepted");
    CHECK(profile_from_json(NULL, &b, "t.json", err, sizeof err) == -1, "NULL accepted");
    free(text);
}

int main(void)
{
    meminfo_parsing();
    cgroup_parsing();
    available_rule();
    json_round_trip();
    return test_done();
}
