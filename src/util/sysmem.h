/* sysmem.h — how much memory this device can give to inference: one rule, read once, for the
 * planner (sched/measure.c puts it in the device's profile, which cost.c plans with) and the
 * runtime (the budget a worker announces in WELCOME, and the weight budget of a device that no
 * plan gave one), so that what the scheduler thinks fits is what the devices think fits.
 *
 * The rule: Linux's MemAvailable, or, when the process's memory cgroup (v1 or v2) has less room
 * left, that room: the tightest limit of the cgroup and its visible ancestors (v2 memory.max and
 * memory.high, where reclaim starts; v1 memory.limit_in_bytes and hierarchical_memory_limit,
 * which covers ancestors the mount may not show) less what the cgroup holds that the kernel
 * cannot drop. A cgroup's usage counts page cache, so weights read through the mapping compete
 * for the limit; the droppable part is its file pages on the LRU lists (active + inactive file),
 * not v2's "file" or v1's "cache", which include tmpfs and shared memory. The cgroup is found
 * through /proc/self/cgroup and /proc/self/mountinfo, wherever its hierarchy is mounted (a
 * container sees only its own subtree).
 *
 * Android (sysmem_android) differs in two ways. Its low-memory killer (lmkd) does not wait for
 * the kernel to reclaim gently: it kills whole processes (cached apps first, then the foreground
 * one) while MemAvailable is still well above zero, so the room keeps SYSMEM_ANDROID_MARGIN below
 * MemAvailable, and a smaller room makes the pager stream windows sooner. And its /proc may not
 * be what Linux's is: an app's SELinux domain may be denied /proc/meminfo (the kernel's
 * sysinfo(2) figures stand in: total, free and buffers, no page cache, so the estimate errs
 * low), and its memory cgroups (/dev/memcg, or v2 per uid and pid) are found, like any, through
 * mountinfo, never at an assumed path; they normally set no limit.
 *
 * Every file is read below a root directory: "" for this system, or, in tests, a directory that
 * stands for "/" and holds a fake proc/meminfo, proc/self/cgroup, proc/self/mountinfo and the
 * cgroup files where that mountinfo mounts them. It needs nothing but libc, so any layer may
 * use it. */
#ifndef PRIMA_UTIL_SYSMEM_H
#define PRIMA_UTIL_SYSMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sysmem {
    uint64_t total, available;    /* MemTotal, MemAvailable (estimated on kernels before 3.14) */
    uint64_t reclaimable;         /* Cached + Buffers + SReclaimable - Shmem */
    uint64_t swap_total, swap_free;
    uint64_t cgroup_limit;        /* 0 = no cgroup limit below the machine's memory */
    uint64_t cgroup_usage;        /* bytes charged to the cgroup ... */
    uint64_t cgroup_reclaimable;  /* ... of which page cache the kernel can drop */
    bool android;                 /* the room keeps SYSMEM_ANDROID_MARGIN below available */
} sysmem;

/* Is the system below root Android? Its system partition's build.prop, or (root "", this
 * system) ANDROID_ROOT in the environment, which Android sets for every process, Termux's
 * included. */
bool sysmem_android(const char *root);

/* What the room keeps back below MemAvailable on Android: a tenth of the memory, at least
 * 256 MiB. lmkd's kill levels sit around there (its minfree levels reach a few hundred MiB on
 * phones of 2-4 GB; the pressure-based lmkd of Android 10+ kills when reclaim cannot keep up,
 * which starts before MemAvailable runs out), and a killed worker costs the ring a failover. */
#define SYSMEM_ANDROID_MARGIN_SHARE 0.10
#define SYSMEM_ANDROID_MARGIN_MIN (256ULL << 20)
uint64_t sysmem_android_margin(uint64_t total);

/* Read /proc/meminfo and the memory cgroup below root into m. 0, or -1 with err set when meminfo
 * cannot be read (not Linux; on Android, sysinfo(2) of this system stands in) or has no
 * MemTotal. */
int sysmem_read(const char *root, sysmem *m, char *err, size_t errlen);

/* The rule above, on figures read by sysmem_read (or received in a profile). */
uint64_t sysmem_room(const sysmem *m);

/* The directory (below root) of this process's cgroup for a controller ("memory", "cpu"): the
 * v1 hierarchy that holds the controller, else the v2 unified one. Returns 1 or 2 for the
 * version, 0 when none is mounted where this process can see it (or dir is too small). */
int sysmem_cgroup_dir(const char *root, const char *controller, char *dir, size_t dirlen);

/* A small system file (/proc, a cgroup's files) as a C string to free, or NULL if unreadable. */
char *sysmem_read_text(const char *path);
/* The value of a "key value" line of a cgroup stat file (memory.stat, cpu.stat); false if
 * absent. */
bool sysmem_stat_field(const char *text, const char *key, uint64_t *v);

/* sysmem_room of this system; 0 when nothing can be read (not Linux). */
uint64_t sysmem_budget(void);

/* The share of a budget left to the rest of the system: the scheduler's default reserve
 * (sched/cost.h). A device whose plan sets no weight budget (windows given by hand, or a plan
 * by memory) leaves it too, so that a plan runs under the same rule whoever made it. */
#define SYSMEM_RESERVE 0.03

/* sysmem_budget() less SYSMEM_RESERVE of it: the weight budget of a device no plan gave one. */
uint64_t sysmem_weight_budget(void);

#endif
