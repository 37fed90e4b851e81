/* libFuzzer target for GBNF grammars (text/grammar.h): the input is a grammar, a NUL, and text.
 * The grammar parses or is refused with a message naming its line; a grammar that parses
 * follows the text byte by byte and whole with the same verdict, without crashing, leaking,
 * reading out of bounds or running without bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - glen - 1 : 0;
    char *src = malloc(glen ? glen : 1);   /* exactly its bytes: no NUL after them */
    if (!src)
        return 0;
    memcpy(src, data, glen);
    char err[256];
    grammar *g = grammar_parse(src, glen, err, sizeof err);
    if (!g) {
        if (!memchr(err, 0, sizeof err) || (strncmp(err, "line ", 5) && !strstr(err, "root") &&
                                            !strstr(err, "out of memory")))
            abort();
    } else {
        grammar_state *whole = grammar_state_new(g), *bytes = grammar_state_new(g);
        if (whole && bytes) {
            bool a = grammar_state_accept(whole, text, tlen);
            bool b = true;
            for (size_t i = 0; i < tlen && b; i++)
                b = grammar_state_accept(bytes, text + i, 1);
            if (a != b || (a && grammar_state_complete(whole) != grammar_state_complete(bytes)))
                abort();
            (void)grammar_state_open(whole);
        }
        grammar_state_free(whole);
        grammar_state_free(bytes);
        grammar_free(g);
    }
    free(src);
    return 0;
}
