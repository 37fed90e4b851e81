/* synth_tmp.h — a synthetic model (model/synth.h) as a test needs it: written to a temporary
 * file, loaded, the file unlinked (the mapping keeps the weights). */
#ifndef PRIMA_TEST_SYNTH_TMP_H
#define PRIMA_TEST_SYNTH_TMP_H

#include <stddef.h>

#include "model/model.h"
#include "model/synth.h"

/* The loaded model, or NULL with a one-line reason. */
model *synth_tmp_load(const synth_params *q, char *err, size_t errlen);

#endif
