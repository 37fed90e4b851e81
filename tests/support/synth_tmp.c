#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "synth_tmp.h"

void synth_tiny(synth_params *q, enum model_arch arch)
{
    synth_defaults(q);
    q->arch = arch;
    q->n_layer = 2;
    q->n_embd = 64;
    q->n_ff = 32;
    q->n_head = 4;
    q->n_head_kv = 2;
    q->n_vocab = 300;
    q->ftype = SYNTH_Q8_0;
}

model *synth_tmp_load(const synth_params *q, char *err, size_t errlen)
{
    char path[] = "/tmp/prima-test-model.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(err, errlen, "mkstemp %s failed", path);
        return NULL;
    }
    close(fd);
    model *m = synth_write(q, path, NULL, err, errlen) == 0 ? model_load(path, err, errlen) : NULL;
    unlink(path);
    return m;
}
