/* logline.h — log lines that stay whole. A head and its workers often share one stderr (prima
 * cluster, a terminal): a line written in pieces (prefix, message, newline) can be cut by another
 * process's line. Every line is formatted first and written with one write (whole up to
 * PIPE_BUF bytes, which no line reaches). It needs nothing but libc, so any layer may log. */
#ifndef PRIMA_UTIL_LOGLINE_H
#define PRIMA_UTIL_LOGLINE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Longest line written; a longer one is cut and ends with "...". */
#define LOG_LINE_MAX 2048

/* prefix, then fmt, then a newline, to f in one write (f is flushed). */
void log_line(FILE *f, const char *prefix, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void log_vline(FILE *f, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* A budget of lines for a kind of event that a stranger can cause at will (connections turned
 * away): at most per_window lines per window_ns, the others only counted. Not locked: its
 * caller serialises it. */
typedef struct log_limit {
    int64_t window_ns;
    int per_window;
    int64_t start;             /* of the current window */
    int used;                  /* lines written in it */
    long held;                 /* lines held back since the last told */
} log_limit;

/* Whether to write a line now (true), or count it held back (false). */
bool log_limit_take(log_limit *l, int64_t now_ns);
/* The lines held back since the last told, now to be told (resetting the count), or 0. */
long log_limit_told(log_limit *l);

#endif
