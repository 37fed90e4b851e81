/* chat_input.h — the lines of a chat (prima run -cnv): typed at a terminal, with line editing
 * and history (libedit), or read as they come from a pipe or a file; and Ctrl-C, which stops
 * the reply being generated, discards a line being typed, and at an empty prompt ends the
 * chat. */
#ifndef PRIMA_CHAT_INPUT_H
#define PRIMA_CHAT_INPUT_H

#include <signal.h>

typedef struct chat_input chat_input;

enum chat_read { CHAT_LINE, CHAT_END, CHAT_INTERRUPT };

/* Catches SIGINT from here on (until chat_input_close). NULL when out of memory. */
chat_input *chat_input_open(void);
/* The next line, without its newline, in *line (valid until the next call): CHAT_LINE; or
 * CHAT_END (the input ended: Ctrl-D), or CHAT_INTERRUPT (Ctrl-C at an empty prompt). */
enum chat_read chat_input_read(chat_input *in, const char **line);
/* Non-zero once Ctrl-C is pressed after the last read: the reply in progress is to stop. */
volatile sig_atomic_t *chat_input_cancel(void);
void chat_input_close(chat_input *in);

#endif
