/* sysmem.h — how much memory this device can give to model weights.
 *
 * The budget is Linux's MemAvailable, capped by the memory cgroup the process runs in (v1 or v2,
 * the tightest limit on the way to the root) minus the cgroup's non-file usage: a cgroup limit
 * counts page cache, so weights read through the mapping compete for it. */
#ifndef PRIMA_SYSMEM_H
#define PRIMA_SYSMEM_H

#include <stdint.h>

/* Bytes; 0 when nothing can be read (not Linux). */
uint64_t sysmem_budget(void);

/* The share of a budget left to the rest of the system: the scheduler's default reserve
 * (sched/cost.h). A device whose plan sets no weight budget (windows given by hand, or a plan
 * by memory) leaves it too, so that a plan runs under the same rule whoever made it. */
#define SYSMEM_RESERVE 0.03

/* sysmem_budget() less SYSMEM_RESERVE of it: the weight budget of a device no plan gave one. */
uint64_t sysmem_weight_budget(void);

#endif
