/* logline.c — formatting a log line whole before its one write (logline.h), cutting one that
 * would not fit rather than writing it in pieces. */
#include <string.h>

#include "util/logline.h"

void log_vline(FILE *f, const char *prefix, const char *fmt, va_list ap)
{
    char buf[LOG_LINE_MAX];
    int n = snprintf(buf, sizeof buf, "%s", prefix);
    if (n < 0)
        return;
    if ((size_t)n < sizeof buf - 1) {
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        n = m < 0 ? n : n + m;
    }
    if ((size_t)n >= sizeof buf - 1) /* cut: keep room for "...\n" */
        n = (int)(sizeof buf - 5) + snprintf(buf + sizeof buf - 5, 5, "...");
    buf[n++] = '\n';
    fflush(f);  /* what the stream holds goes first, in its own write */
    fwrite(buf, 1, (size_t)n, f);
    fflush(f);
}

void log_line(FILE *f, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(f, prefix, fmt, ap);
    va_end(ap);
}

bool log_limit_take(log_limit *l, int64_t now_ns)
{
    if (now_ns - l->start >= l->window_ns) {
        l->start = now_ns;
        l->used = 0;
    }
    if (l->used < l->per_window) {
        l->used++;
        return true;
    }
    l->held++;
    return false;
}

long log_limit_told(log_limit *l)
{
    long n = l->held;
    l->held = 0;
    return n;
}
