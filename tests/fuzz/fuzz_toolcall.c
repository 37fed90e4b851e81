/* libFuzzer target for the tool-call parser (text/toolcall.h): the first byte picks the format
 * and whether the reply starts in reasoning, the second where a stream is cut, the rest is a
 * model's reply. Parsed whole and streamed in three pieces, it must give the same content,
 * reasoning and calls (every call's arguments JSON), without crashing, leaking or reading out
 * of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/toolcall.h"
#include "util/strbuf.h"

static void gather(strbuf *content, strbuf *reasoning, int *calls, const tool_delta *d)
{
    if (strbuf_add(content, d->content ? d->content : "", d->content_len) ||
        strbuf_add(reasoning, d->reasoning ? d->reasoning : "", d->reasoning_len))
        abort();
    for (int k = d->first_call; k < d->n_calls; k++) {
        cJSON *a = cJSON_Parse(d->calls[k].arguments);
        if (!cJSON_IsObject(a) || !*d->calls[k].name)
            abort();
        cJSON_Delete(a);
    }
    if (d->n_calls > *calls)
        *calls = d->n_calls;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    enum tool_format f = (enum tool_format)(data[0] % 5);
    bool think = data[0] & 8;
    const char *text = (const char *)data + 2;
    size_t n = size - 2, cut = n ? data[1] % (n + 1) : 0, cut2 = cut + (n - cut) / 2;
    tool_reply whole;
    if (tool_parse(f, think, text, n, &whole))
        return 0;
    tool_parser *p = tool_parser_new(f, think);
    strbuf content = {0}, reasoning = {0};
    int calls = 0;
    tool_delta d;
    if (!p || tool_parser_feed(p, text, cut, &d))
        abort();
    gather(&content, &reasoning, &calls, &d);
    if (tool_parser_feed(p, text + cut, cut2 - cut, &d))
        abort();
    gather(&content, &reasoning, &calls, &d);
    if (tool_parser_feed(p, text + cut2, n - cut2, &d))
        abort();
    gather(&content, &reasoning, &calls, &d);
    if (tool_parser_finish(p, &d))
        abort();
    gather(&content, &reasoning, &calls, &d);
    if (content.len != whole.content_len || memcmp(content.p ? content.p : "", whole.content, content.len) ||
        reasoning.len != whole.reasoning_len ||
        memcmp(reasoning.p ? reasoning.p : "", whole.reasoning, reasoning.len) || calls != whole.n_calls)
        abort();
    free(content.p);
    free(reasoning.p);
    tool_parser_free(p);
    tool_reply_free(&whole);
    return 0;
}
