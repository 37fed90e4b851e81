/* jsonfile.c — JSON files kept between runs (jsonfile.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/jsonfile.h"

int json_file_read(const char *path, size_t max, cJSON **j, char *err, size_t errlen)
{
    *j = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(max + 1);
    size_t n = text ? fread(text, 1, max + 1, f) : 0;
    bool failed = text && ferror(f);
    fclose(f);
    if (!text || failed) {
        snprintf(err, errlen, "%s: %s", path, text ? "cannot read it" : "out of memory");
        free(text);
        return -1;
    }
    if (n <= max) {
        text[n] = '\0';
        *j = cJSON_Parse(text);
    }
    free(text);
    return 0;
}

int json_file_write(const char *path, const cJSON *j, char *err, size_t errlen)
{
    /* the process's own temporary file: two processes may write the same entry at once */
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    char *text = cJSON_Print(j);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = f && fclose(f) == 0 && ok;
    free(text);
    if (!ok || rename(tmp, path)) {
        snprintf(err, errlen, "%s: cannot write it: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
