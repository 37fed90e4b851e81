#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "synth_tmp.h"

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
