/* gpu_impl.h — what a backend implements behind gpu.h: one table of functions. gpu.c checks the
 * arguments once and forwards; a backend's device and layer objects start with the common part
 * below, so gpu.c can read the info and find the table. */
#ifndef PRIMA_GPU_IMPL_H
#define PRIMA_GPU_IMPL_H

#include "gpu/gpu.h"

typedef struct gpu_backend {
    const char *name;
    uint32_t ops;   /* the layer ops it implements, 1u << LOP_* */
    gpu_dev *(*open)(int index, char *why, size_t whylen);
    void (*close)(gpu_dev *g);
    gpu_buf *(*buf_create)(gpu_dev *g, size_t bytes, char *err, size_t errlen);
    void (*buf_free)(gpu_dev *g, gpu_buf *b);
    int (*buf_write)(gpu_dev *g, gpu_buf *b, size_t off, const void *src, size_t n);
    int (*buf_read)(gpu_dev *g, const gpu_buf *b, size_t off, void *dst, size_t n);
    double (*matmul)(gpu_dev *g, const gpu_buf *w, enum dtype wt, int n_in, int n_out,
                     const gpu_buf *x, int n_tok, gpu_buf *y, int reps, char *err, size_t errlen);
    double (*submit_latency)(gpu_dev *g);
    double (*copy)(gpu_dev *g, gpu_buf *dst, const gpu_buf *src, size_t n, int reps);
    gpu_layers *(*layers_create)(gpu_dev *g, const gpu_model_desc *md,
                                 const gpu_layer_desc *descs, const bool *on_gpu, char *err,
                                 size_t errlen);
    void (*layers_free)(gpu_layers *gl);
    int (*layers_run)(gpu_layers *gl, float *hidden, int n, const int32_t *pos, int first,
                      int last, char *err, size_t errlen);
    int (*layers_kv_copy)(gpu_layers *gl, int il, int rows, uint16_t *k, uint16_t *v,
                          bool to_device);
} gpu_backend;

struct gpu_dev {
    const gpu_backend *be;
    gpu_info info;
};

struct gpu_layers {
    gpu_dev *dev;
};

#ifdef PRIMA_HAVE_VULKAN
extern const gpu_backend gpu_backend_vulkan;
#endif

/* Bytes of an n_rows x ne0 tensor of type t as stored. */
uint64_t gpu_tensor_bytes(const gpu_tensor *t);

#endif
