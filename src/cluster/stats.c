/* stats.c — writing the stats file's events (stats.h): one JSON object per line, timestamped and
 * flushed whole, so a tool reading while the process runs sees complete lines. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/stats.h"

void stats_emit(FILE *f, const char *event, cJSON *o)
{
    if (f && o) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        /* whole microseconds: a double keeps them exactly for epoch times */
        double t = (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) * 1e-6;
        cJSON_AddStringToObject(o, "event", event);
        cJSON_AddNumberToObject(o, "time", t);
        char *line = cJSON_PrintUnformatted(o);
        if (line) {
            fprintf(f, "%s\n", line);   /* one call: one line, even with several writers */
            fflush(f);
            free(line);
        }
    }
    cJSON_Delete(o);
}

/* The batch event's fields: every counter of ring_counters under its own name. */
static const struct {
    const char *name;
    size_t offset;
} counter_fields[] = {
    {"compute_ns", offsetof(ring_counters, compute_ns)},
    {"wait_ns", offsetof(ring_counters, wait_ns)},
    {"major_faults", offsetof(ring_counters, major_faults)},
    {"disk_bytes", offsetof(ring_counters, disk_bytes)},
    {"pages", offsetof(ring_counters, pages)},
    {"pages_resident", offsetof(ring_counters, pages_resident)},
    {"bytes_sent", offsetof(ring_counters, bytes_sent)},
    {"bytes_recv", offsetof(ring_counters, bytes_recv)},
    {"hops", offsetof(ring_counters, hops)},
    {"routed_bytes", offsetof(ring_counters, routed_bytes)},
};

_Static_assert(sizeof(ring_counters) == sizeof counter_fields / sizeof counter_fields[0] * sizeof(uint64_t),
               "a ring_counters field without a name in the batch event");

void stats_add_counters(cJSON *o, const ring_counters *c)
{
    for (size_t i = 0; i < sizeof counter_fields / sizeof counter_fields[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)c + counter_fields[i].offset, sizeof v);
        cJSON_AddNumberToObject(o, counter_fields[i].name, (double)v);
    }
}
