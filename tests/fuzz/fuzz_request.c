/* libFuzzer target for the server's request parsers: any body, as any endpoint of any API
 * (OpenAI's chat, completions and embeddings, Ollama's chat, generate and embed, Anthropic's
 * messages), is parsed and checked (or refused with a message) without crashing, leaking or
 * reading out of bounds. */
#include <stdlib.h>
#include <string.h>

#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sampler_params defaults;
    static int init;
    if (!init) {
        sampler_params_default(&defaults);
        init = 1;
    }
    if (size < 1)
        return 0;
    /* the body is not NUL-terminated: a copy of exactly its bytes */
    char *body = malloc(size - 1 ? size - 1 : 1);
    if (!body)
        return 0;
    memcpy(body, data + 1, size - 1);
    srv_request r;
    srv_refusal why;
    enum srv_endpoint kind = data[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    int rc;
    switch (data[0] >> 1 & 3) {
    case 0: rc = srv_request_parse(&r, kind, body, size - 1, &defaults, &why); break;
    case 1: rc = srv_ollama_parse(&r, kind, body, size - 1, &defaults, &why); break;
    case 2: rc = srv_anthropic_parse(&r, body, size - 1, &defaults, &why); break;
    default:
        rc = srv_embed_parse(&r, kind == SRV_CHAT ? SRV_API_OPENAI : SRV_API_OLLAMA, body,
                             size - 1, &defaults, &why);
    }
    if (rc == 0) {
        for (int i = 0; i < r.n_msgs; i++)
            (void)strlen(r.msgs[i].content);
        for (int i = 0; i < r.n_inputs; i++)
            if (r.inputs[i].text)
                (void)strlen(r.inputs[i].text);
            else
                (void)r.inputs[i].toks[r.inputs[i].n_toks - 1];
        srv_request_free(&r);
    } else if (!memchr(why.message, '\0', sizeof why.message)) {
        abort();
    }
    free(body);
    return 0;
}
