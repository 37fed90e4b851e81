#include <errno.h>
#include <histedit.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat_input.h"
#include "util/nss.h"

#define HISTORY_LINES 500

struct chat_input {
    EditLine *el;              /* NULL: stdin is not a terminal */
    History *hist;
    char *line;                /* the last line read */
    size_t cap;
    struct sigaction old_int;
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

volatile sig_atomic_t *chat_input_cancel(void)
{
    return &interrupted;
}

static char *prompt(EditLine *el)
{
    (void)el;
    return "> ";
}

chat_input *chat_input_open(void)
{
    chat_input *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    /* Without SA_RESTART: a Ctrl-C at the prompt ends the read that waits for the line. */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &in->old_int);
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
        nss_pin_builtin();   /* libedit looks the user up (its home directory) */
        in->el = el_init("prima", stdin, stdout, stderr);
        in->hist = history_init();
        if (in->el && in->hist) {
            HistEvent ev;
            history(in->hist, &ev, H_SETSIZE, HISTORY_LINES);
            history(in->hist, &ev, H_SETUNIQUE, 1);
            el_set(in->el, EL_HIST, history, in->hist);
            el_set(in->el, EL_PROMPT, prompt);
            el_set(in->el, EL_EDITOR, "emacs");
        } else {   /* without line editing, then */
            if (in->el)
                el_end(in->el);
            if (in->hist)
                history_end(in->hist);
            in->el = NULL;
            in->hist = NULL;
        }
    }
    return in;
}

/* A line typed at the terminal. */
static enum chat_read read_edited(chat_input *in, const char **line)
{
    for (;;) {
        fputc('\n', stdout);
        fflush(stdout);
        interrupted = 0;
        int n;
        const char *l = el_gets(in->el, &n);
        if (l) {
            HistEvent ev;
            size_t len = strlen(l);
            while (len > 0 && (l[len - 1] == '\n' || l[len - 1] == '\r'))
                len--;
            if (len)
                history(in->hist, &ev, H_ENTER, l);
            if (len + 1 > in->cap) {
                char *nl = realloc(in->line, len + 1);
                if (!nl)
                    return CHAT_END;
                in->line = nl;
                in->cap = len + 1;
            }
            memcpy(in->line, l, len);   /* without its newline */
            in->line[len] = '\0';
            *line = in->line;
            return CHAT_LINE;
        }
        if (n == 0 || !interrupted)
            return CHAT_END;
        /* Ctrl-C: a line being typed is discarded; at an empty one, the chat ends */
        const LineInfo *li = el_line(in->el);
        bool typed = li->lastchar > li->buffer;
        el_reset(in->el);
        if (!typed)
            return CHAT_INTERRUPT;
    }
}

enum chat_read chat_input_read(chat_input *in, const char **line)
{
    enum chat_read r;
    if (in->el) {
        r = read_edited(in, line);
    } else {
        fputs("\n> ", stdout);
        fflush(stdout);
        interrupted = 0;
        errno = 0;
        ssize_t len = getline(&in->line, &in->cap, stdin);
        r = len >= 0 ? CHAT_LINE : interrupted ? CHAT_INTERRUPT : CHAT_END;
        if (len >= 0) {
            while (len > 0 && (in->line[len - 1] == '\n' || in->line[len - 1] == '\r'))
                in->line[--len] = '\0';
            *line = in->line;
        }
    }
    if (r == CHAT_LINE)
        return r;
    /* (the next prompt's newline is not coming: end the line the prompt is on) */
    fputc('\n', stdout);
    fflush(stdout);
    return r;
}

void chat_input_close(chat_input *in)
{
    if (!in)
        return;
    if (in->el)
        el_end(in->el);
    if (in->hist)
        history_end(in->hist);
    sigaction(SIGINT, &in->old_int, NULL);
    free(in->line);
    free(in);
}
