/* stats.h — machine-readable events for tools (bench/run reads them; people read --verbose).
 *
 * A stats file holds one JSON object per line, written whole and flushed, so a reader sees
 * complete lines while the process runs. Every object has "event" and "time" (seconds since the
 * epoch, CLOCK_REALTIME, to the microsecond: comparable across the processes of one machine).
 * The events:
 *   batch       (head) one device's counters for one batch: serial, device (ring position),
 *               compute_ns, wait_ns, major_faults, disk_bytes, pages, pages_resident,
 *               bytes_sent, bytes_recv, hops, routed_bytes (cluster/proto.h, ring_counters)
 *   plan        (head, when the scheduler plans) Halda's plan as `prima plan --json` gives it:
 *               predicted tpot and its terms (compute, memory, gpu, disk, network, head), and
 *               per device its window, layers, resident_layers, disk_bytes_per_token and time
 *               (compute, memory, gpu, disk, network, wait: the predicted counterparts of a
 *               batch event's compute_ns, wait_ns and disk_bytes), one_device when the ring's
 *               plan put every layer on one worker (its tpot and the head alone's)
 *   worker_plan (worker) the share a head gave it: device, devices, rounds, layers, streaming
 *               (layers it releases after computing), weight_budget (bytes its release policy
 *               filled), prefetch
 *   prompt, generation (prima run) tokens and seconds */
#ifndef PRIMA_STATS_H
#define PRIMA_STATS_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "cluster/proto.h"

/* Add "event" and "time" to o, write it as one line to f and free it (nothing when f is NULL). */
void stats_emit(FILE *f, const char *event, cJSON *o);
/* The fields of a batch event. */
void stats_add_counters(cJSON *o, const ring_counters *c);

#endif
