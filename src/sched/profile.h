/* profile.h — what one device can do: the measured numbers Halda plans with.
 *
 * A profile is measured on the device itself (measure.h) and travels as JSON
 * (profile_to_json / profile_from_json): workers send theirs to the head, `prima profile --json`
 * saves one for offline planning with `prima plan`.
 *
 * Units: bytes, bytes per second, seconds; kernel throughput in weights per second (one weight =
 * one multiply-add), so a layer's compute time is its weight count divided by the rate. A rate
 * or throughput of 0 means "not measured". The parsers below take file contents, not paths, so
 * recorded samples of /proc and cgroup files can be fed to them in tests. */
#ifndef PRIMA_PROFILE_H
#define PRIMA_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "gguf/dtype.h"

enum os_class { OS_LINUX, OS_ANDROID, OS_MACOS };

/* Throughput of the matrix kernels for one weight type. */
typedef struct type_rate {
    double matvec;  /* one token (decode), weights/s */
    double matmul;  /* a batch of tokens (prefill), weights/s per token */
} type_rate;

typedef struct dev_profile {
    char name[64];              /* host name, for messages */
    enum os_class os;
    double noise;               /* largest relative spread (IQR / median) of any measurement */

    /* CPU */
    int cores;                  /* online CPUs */
    int threads;                /* threads the rates were measured with */
    double cpu_quota;           /* CPUs the cgroup's CFS quota allows; 0 = no quota */
    double cpu_quota_period;    /* seconds of the quota's period (CFS: 0.1 unless set), in which
                                 * the device may use quota * period of CPU time */
    char simd[16];              /* active kernel path (kern_path_name) */
    type_rate cpu[DT_COUNT];    /* per weight type; 0 = not measured */
    double dispatch;            /* seconds for one parallel kernel call to start and finish */
    double vector;              /* a decoded layer's work besides its matrices (norms, rope,
                                 * attention at a short context, SiLU, residual adds), in its
                                 * values per second (cost.h: layer_vector_values); 0 = not
                                 * measured (profiles saved before it) */

    /* memory */
    uint64_t mem_total, mem_available, mem_reclaimable;  /* reclaimable: page cache + slab */
    uint64_t swap_total, swap_free;
    uint64_t cgroup_limit;      /* 0 = no cgroup limit below the machine's memory */
    uint64_t cgroup_usage;      /* bytes charged to the cgroup ... */
    uint64_t cgroup_reclaimable;/* ... of which page cache the kernel can drop */
    double mem_bw;              /* read bandwidth, bytes/s */

    /* disk holding the model, read from storage (not the page cache): sequential as streamed
     * layers are read ("mmap": faults with readahead after eviction; "o_direct" or "fadvise":
     * 1 MiB requests where the file cannot be evicted; "cached": it stays in memory, 0) */
    double disk_seq, disk_rand; /* bytes/s */
    char disk_method[16];       /* "mmap", "o_direct", "fadvise", "cached"; "": not measured */

    /* GPU (measured with profile_opts.gpu; present = false and all zero otherwise) */
    bool gpu_present, gpu_unified;  /* unified: the GPU uses RAM (integrated, Apple silicon) */
    bool gpu_software;              /* a CPU implementation of the API (lavapipe) */
    char gpu_name[64];
    uint64_t vram_total, vram_free;
    double gpu_bw;                  /* device memory, bytes/s (a device-side copy) */
    double gpu_upload, gpu_download;/* host <-> device, bytes/s */
    double gpu_submit;              /* seconds per submit (paid once per GPU window) */
    double gpu_dispatch;            /* seconds one shader dispatch and its barrier add inside a
                                     * submit, measured with a tiny product (0: not measured) */
    type_rate gpu[DT_COUNT];        /* the matrix shaders, weights/s */

    /* network from this device to the next one in the ring, measured by the head */
    double net_rtt;             /* seconds, 0 = not measured */
    double net_bw;              /* bytes/s */
} dev_profile;

const char *os_class_name(enum os_class os);

/* Memory this device can give to inference before the memory-pressure cap, by the rule of
 * util/sysmem.h (sysmem_room): MemAvailable, or what the cgroup has left (limit - usage + its
 * reclaimable page cache) when that is lower; on Android (os) less the low-memory killer's
 * margin (SYSMEM_ANDROID_MARGIN_*, of mem_total). */
uint64_t profile_available(const dev_profile *p);

/* ---- parsing recorded cgroup files (the memory ones: util/sysmem.h) ---- */

/* CPUs a CFS quota allows: v2 cpu.max ("QUOTA PERIOD", period NULL) or v1 cpu.cfs_quota_us and
 * cpu.cfs_period_us. 0 = no quota ("max", -1). With a quota, *period_s (when not NULL) is
 * the period in seconds. */
double profile_parse_cpu_quota(const char *quota, const char *period, double *period_s);
#define CFS_DEFAULT_PERIOD 0.1   /* seconds: the kernel's default cpu.cfs_period_us */
/* Nanoseconds a cgroup's CPU quota has throttled it, from its cpu.stat (v2 throttled_usec, v1
 * throttled_time); 0 when the file says neither. */
uint64_t profile_parse_cpu_throttled_ns(const char *cpu_stat);
/* The share of its threads' time a CPU quota grants the profiled device (quota / threads when
 * the quota is the smaller, else 1): its CPU rates are the unthrottled ones times this share. */
double profile_quota_share(const dev_profile *p);

/* ---- JSON ---- */

cJSON *profile_to_json(const dev_profile *p);
/* Validates every field (types, finite, non-negative, known names); `what` names the source in
 * errors ("a.json"). Returns 0 or -1 with a one-line error. */
int profile_from_json(const cJSON *j, dev_profile *p, const char *what, char *err, size_t errlen);

#endif
