/* Device profiles: parsing recorded cgroup CPU quota files; the JSON round trip and its
 * validation; the available-memory rule (util/sysmem.h) applied to a profile's figures. */
#include <string.h>

#include "sched/profile.h"
#include "test.h"

/* The CPU quota of a cgroup v2 cpu.max or v1 cfs files (the memory files: test_sysmem). */
static void cpu_quota_parsing(void)
{
    CHECK(profile_parse_cpu_quota("50000 100000\n", NULL, NULL) == 0.5, "v2 cpu.max half a CPU");
    CHECK(profile_parse_cpu_quota("max 100000\n", NULL, NULL) == 0, "v2 cpu.max unlimited");
    CHECK(profile_parse_cpu_quota("250000\n", "100000\n", NULL) == 2.5, "v1 two and a half CPUs");
    CHECK(profile_parse_cpu_quota("-1\n", "100000\n", NULL) == 0, "v1 unlimited");
    CHECK(profile_parse_cpu_quota("", NULL, NULL) == 0, "empty cpu.max");
    double period = 0;
    CHECK(profile_parse_cpu_quota("20000 50000\n", NULL, &period) == 0.4 && period == 0.05,
          "v2 cpu.max period %g s", period);
    CHECK(profile_parse_cpu_quota("100000\n", "200000\n", &period) == 0.5 && period == 0.2,
          "v1 period %g s", period);
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
    /* Halda's rule for an Android phone: the low-memory killer's margin (a tenth of its 8 GiB)
     * below MemAvailable */
    dev_profile phone = {.os = OS_ANDROID, .mem_total = 8ULL << 30, .mem_available = 3ULL << 30};
    uint64_t want = (3ULL << 30) - (uint64_t)(0.1 * (double)(8ULL << 30));
    CHECK(profile_available(&phone) == want, "android: %llu, not %llu",
          (unsigned long long)profile_available(&phone), (unsigned long long)want);
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
    cpu_quota_parsing();
    available_rule();
    json_round_trip();
    return test_done();
}
