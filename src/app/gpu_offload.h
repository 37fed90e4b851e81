/* gpu_offload.h — the GPU options of run_opts applied to a session: open the device, put the
 * asked-for layers on it, and say in one line on stderr what happened (which device, how many
 * layers, how much VRAM, what stays on the CPU and why). A missing or unusable GPU is not an
 * error: the session runs on the CPU, and the line says why. */
#ifndef PRIMA_APP_GPU_OFFLOAD_H
#define PRIMA_APP_GPU_OFFLOAD_H

#include "app/options.h"
#include "cluster/ring_engine.h"
#include "gpu/gpu.h"
#include "model/offload.h"
#include "model/session.h"

/* --gpu, --no-gpu and --gpu-mem in the library's terms. */
offload_opts gpu_offload_opts(const run_opts *o);

/* Returns 0 (*dev: the open device, or NULL when none is used; close it after the session), or
 * -1 with err (the GPU failed while uploading). */
int gpu_offload_session(const run_opts *o, const model *m, session *s, gpu_dev **dev, char *err,
                        size_t errlen);
/* A ring's head has started: what became of each device's GPU layers, a line each on stderr
 * (none for a device the plan gave none). */
void gpu_offload_report_ring(const ring_head *h);

#endif
