/* gpu_offload.h — the GPU options of run_opts applied to a session: open the device, put the
 * asked-for layers on it, and say in one line on stderr what happened (which device, how many
 * layers, how much VRAM, what stays on the CPU and why). A missing or unusable GPU is not an
 * error: the session runs on the CPU, and the line says why. */
#ifndef PRIMA_CLI_GPU_OFFLOAD_H
#define PRIMA_CLI_GPU_OFFLOAD_H

#include "cli/run_opts.h"
#include "gpu/gpu.h"
#include "model/session.h"

/* Returns 0 (*dev: the open device, or NULL when none is used; close it after the session), or
 * -1 with err (the GPU failed while uploading). */
int gpu_offload_session(const run_opts *o, const model *m, session *s, gpu_dev **dev, char *err,
                        size_t errlen);

#endif
