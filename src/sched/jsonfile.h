/* jsonfile.h — the scheduler's JSON files kept between runs: the profile cache (startup.h) and
 * the routing calibrations (experts.h). Written whole or not at all (a temporary file renamed
 * over the old one), so a reader sees an old entry or a new one, never half of one; what a
 * crash or a hand left damaged reads as not JSON, for the caller to ignore or refuse. */
#ifndef PRIMA_JSONFILE_H
#define PRIMA_JSONFILE_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* The JSON at path, at most max bytes of it, into *j (NULL: not JSON, or longer than max).
 * 1 when there is no such file, 0 when it was read, -1 with a one-line err when it cannot be. */
int json_file_read(const char *path, size_t max, cJSON **j, char *err, size_t errlen);

/* j written to path, replacing what was there. 0, or -1 with a one-line err (nothing
 * written). */
int json_file_write(const char *path, const cJSON *j, char *err, size_t errlen);

#endif
