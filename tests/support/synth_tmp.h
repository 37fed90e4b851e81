/* synth_tmp.h — a synthetic model (model/synth.h) as a test needs it: written to a temporary
 * file, loaded, the file unlinked (the mapping keeps the weights). */
#ifndef PRIMA_TEST_SYNTH_TMP_H
#define PRIMA_TEST_SYNTH_TMP_H

#include <stddef.h>

#include "model/model.h"
#include "model/synth.h"

/* Parameters of a tiny model of architecture arch: 2 layers 64 wide, 4 heads over 2 KV heads,
 * an FFN (or each expert) 32 wide, 300 tokens, Q8_0. */
void synth_tiny(synth_params *q, enum model_arch arch);
/* The loaded model, or NULL with a one-line reason. */
model *synth_tmp_load(const synth_params *q, char *err, size_t errlen);

#endif
