/* libFuzzer target for the GGUF reader: any input must either be rejected with a one-line error
 * or yield a file whose every value and tensor byte range can be read without leaving the input
 * (ASan checks each access against the fuzzer's exact-size buffer). */
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;
static volatile double sink_f;

static void touch_array(const gguf_array *a)
{
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_STRING)
            sink += a->strs[i].len ? (uint8_t)a->strs[i].ptr[a->strs[i].len - 1] : 0;
        else if (a->type == GGUF_ARRAY)
            touch_array(&a->arrs[i]);
        else {
            sink += (uint64_t)gguf_arr_int(a, i);
            sink_f += gguf_arr_float(a, i);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    gguf_file *f = gguf_open_memory(data, size, "fuzz-input", err, sizeof err);
    if (!f) {
        if (!err[0] || strchr(err, '\n'))
            __builtin_trap();
        return 0;
    }
    char buf[64];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char key[256];
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, n);
        key[n] = 0;
        sink += (uint64_t)gguf_get_int(f, key, 0) + gguf_get_bool(f, key, false) +
                gguf_get_str(f, key, buf, sizeof buf);
        sink_f += gguf_get_float(f, key, 0);
        if (kv->type == GGUF_ARRAY)
            touch_array(&kv->v.arr);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->nbytes)
            sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    sink += gguf_tensor_find(f, "token_embd.weight") != NULL;
    gguf_close(f);
    return 0;
}
