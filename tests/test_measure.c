/* Profiling this machine: memory agrees with the kernel's own count (sysinfo), the measured
 * weight types are exactly those of the model (per the fixtures README), rates and the disk
 * figures are positive and pass the profile's JSON validation; a worker's profile service
 * measures once and then answers from what it kept; the CPU figures are the median of their
 * runs. No speed is checked. */
#include <string.h>
#include <sys/sysinfo.h>

#include "cluster/proto.h"
#include "sched/measure.h"
#include "sched/startup.h"
#include "test.h"

/* The CPU figure of repeated runs: their median, or under a quota the median of the runs it
 * did not throttle scaled to its share (all throttled: the fastest, scaled); the spread only
 * ever rises. */
static void typical_rate(void)
{
    double v[] = {4, 10, 1, 3, 2}, spread = 0;
    double r = profile_typical_rate(v, NULL, 5, 1, &spread);
    CHECK(r == 3, "1 2 3 4 10: %g, not the median", r);
    CHECK(spread == (4 - 2) / 3.0, "spread %g", spread);
    double w[] = {4, 10, 1, 3, 2};
    r = profile_typical_rate(w, NULL, 5, 0.5, &spread);
    CHECK(r == 1.5, "under a half quota: %g, not half the median", r);
    CHECK(spread == (4 - 2) / 3.0, "spread fell or rose again: %g", spread);
    /* the throttled runs (1 and 2, stretched) left out: the median of 4 10 3 */
    double x[] = {4, 10, 1, 3, 2};
    bool hit[] = {false, false, true, false, true};
    r = profile_typical_rate(x, hit, 5, 0.5, &spread);
    CHECK(r == 2, "throttled runs left out: %g, not half of 4", r);
    bool all[] = {true, true, true, true, true};
    double y[] = {4, 10, 1, 3, 2};
    r = profile_typical_rate(y, all, 5, 0.5, &spread);
    CHECK(r == 5, "every run throttled: %g, not half the fastest", r);
    /* without a quota the flags change nothing */
    double z[] = {4, 10, 1, 3, 2};
    r = profile_typical_rate(z, hit, 5, 1, &spread);
    CHECK(r == 3, "no quota: %g, not the median of all", r);
    CHECK(profile_parse_cpu_throttled_ns("nr_periods 10\nnr_throttled 2\nthrottled_time 12345\n")
                  == 12345 &&
              profile_parse_cpu_throttled_ns("usage_usec 9\nnr_throttled 1\nthrottled_usec 7\n")
                  == 7000 &&
              profile_parse_cpu_throttled_ns("usage_usec 9\n") == 0,
          "cpu.stat throttled time misread");
}

int main(void)
{
    typical_rate();
    char err[512];
    dev_profile p;
    memset(&p, 0, sizeof p);
    REQUIRE(profile_memory(&p, err, sizeof err) == 0, "%s", err);
    struct sysinfo si;
    REQUIRE(sysinfo(&si) == 0, "sysinfo");
    CHECK(p.mem_total == (uint64_t)si.totalram * si.mem_unit, "MemTotal %llu, sysinfo %llu",
          (unsigned long long)p.mem_total, (unsigned long long)si.totalram * si.mem_unit);
    CHECK(p.mem_available > 0 && p.mem_available <= p.mem_total, "available %llu",
          (unsigned long long)p.mem_available);
    CHECK(profile_available(&p) <= p.mem_available, "cgroup rule raised the available memory");

    const char *fx = test_fixtures();
    char path[4096];
    snprintf(path, sizeof path, "%s/models/synth-spm512-l4-e256-q4_k_m.gguf", fx);
    /* measured through the worker's profile service, as a head would get it */
    sched_profiler sp;
    sched_profiler_init(&sp, path);
    char json[PROTO_SMALL_MAX], again[PROTO_SMALL_MAX];
    REQUIRE(sched_profiler_serve(&sp, 1, json, sizeof json, err, sizeof err) == 0, "%s", err);
    cJSON *j = cJSON_Parse(json);
    REQUIRE(profile_from_json(j, &p, "served", err, sizeof err) == 0, "%s", err);
    cJSON_Delete(j);
    /* asked again: the measurement is kept (the same rates, bit for bit), memory re-read */
    REQUIRE(sched_profiler_serve(&sp, 1, again, sizeof again, err, sizeof err) == 0, "%s", err);
    dev_profile q;
    j = cJSON_Parse(again);
    REQUIRE(profile_from_json(j, &q, "served again", err, sizeof err) == 0, "%s", err);
    cJSON_Delete(j);
    CHECK(!memcmp(q.cpu, p.cpu, sizeof p.cpu) && q.disk_seq == p.disk_seq && q.mem_bw == p.mem_bw,
          "the second request measured again");
    CHECK(q.mem_total == p.mem_total, "memory total changed");
    CHECK(sched_profiler_serve(&sp, 1, again, 16, err, sizeof err) == -1, "16-byte buffer accepted");
    for (int t = 0; t < DT_COUNT; t++) {
        bool want = t == DT_Q4_K || t == DT_Q6_K;   /* the README: Q4_K, Q6_K for some tensors */
        CHECK(want == (p.cpu[t].matvec > 0 && p.cpu[t].matmul > 0), "type %s measured: %d",
              dtype_get((uint32_t)t) ? dtype_get((uint32_t)t)->name : "?", p.cpu[t].matvec > 0);
    }
    CHECK(p.threads == 1 && p.cores >= 1, "threads %d cores %d", p.threads, p.cores);
    CHECK(p.mem_bw > 0 && p.dispatch > 0 && p.dispatch < 1 && p.vector > 0,
          "bandwidth %g, dispatch %g s, vector %g values/s", p.mem_bw, p.dispatch, p.vector);
    CHECK(!strcmp(p.disk_method, "mmap") || !strcmp(p.disk_method, "o_direct") ||
              !strcmp(p.disk_method, "fadvise") || !strcmp(p.disk_method, "cached"),
          "disk method '%s'", p.disk_method);
    CHECK(!strcmp(p.disk_method, "cached") ? p.disk_seq == 0 : p.disk_seq > 0 && p.disk_rand > 0,
          "disk %g %g via %s", p.disk_seq, p.disk_rand, p.disk_method);
    CHECK(!p.gpu_present && p.net_rtt == 0, "gpu or network filled in");

    j = profile_to_json(&p);
    dev_profile back;
    CHECK(profile_from_json(j, &back, "measured", err, sizeof err) == 0, "%s", err);
    cJSON_Delete(j);

    profile_opts o = {.model_path = "/nonexistent/model.gguf", .threads = 1};
    CHECK(profile_measure(&o, &p, err, sizeof err) == -1 && strstr(err, "/nonexistent/model.gguf"),
          "missing model: %s", err);
    return test_done();
}
