/* vk.h — the Vulkan backend's internals, shared by vk.c (instance, device, memory, pipelines,
 * single products) and vk_layers.c (whole layers). The loader is opened with dlopen, so a binary
 * built with Vulkan still runs, CPU-only, where no libvulkan is installed. */
#ifndef PRIMA_GPU_VK_H
#define PRIMA_GPU_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "gpu/gpu_impl.h"

/* Every Vulkan function the backend calls, loaded once through vkGetInstanceProcAddr. */
#define VK_FUNCS(X)                                                                           \
    X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)       \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)        \
    X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkDestroyDevice)              \
    X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory)                  \
    X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout)           \
    X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)      \
    X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool)                \
    X(vkDestroyDescriptorPool) X(vkAllocateDescriptorSets) X(vkFreeDescriptorSets)            \
    X(vkUpdateDescriptorSets) X(vkCreateCommandPool) X(vkDestroyCommandPool)                  \
    X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers) X(vkBeginCommandBuffer)               \
    X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)                     \
    X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer)         \
    X(vkCreateFence) X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences) X(vkQueueSubmit)

typedef struct vk_fns {
#define VK_FN_FIELD(name) PFN_##name name;
    VK_FUNCS(VK_FN_FIELD)
#undef VK_FN_FIELD
    PFN_vkGetPhysicalDeviceMemoryProperties2 vkGetPhysicalDeviceMemoryProperties2; /* 1.1 */
} vk_fns;

extern vk_fns vk;

struct gpu_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceSize size;
    void *map;          /* host address when the memory is host-visible, else NULL */
    VkDeviceSize charged; /* device-local bytes it counts in vk_dev.allocated */
};

/* The pipelines: a decode (1 token) and a prefill (8 tokens per pass) matrix product per weight
 * type, then the layer ops. */
enum { VK_MM_TYPES = 7 };
enum vk_pipe {
    VK_PIPE_MM = 0,                        /* + 2 * type slot + (prefill ? 1 : 0) */
    VK_PIPE_RMSNORM = 2 * VK_MM_TYPES,
    VK_PIPE_ROPE,
    VK_PIPE_GLU,
    VK_PIPE_KV_STORE,
    VK_PIPE_ATTENTION,
    VK_PIPE_ADD,
    VK_PIPE_COUNT
};
/* Workgroups of a matrix product: 16 rows each (matmul.comp). */
static inline uint32_t vk_matmul_groups(int n_out)
{
    return (uint32_t)(n_out + 15) / 16;
}
/* The matrix-product pipeline for a weight type (gpu_supports() must hold). */
enum vk_pipe vk_pipe_matmul(enum dtype t, int n_tok);

#define VK_BINDINGS 8

typedef struct vk_push {
    uint32_t u[8];
    float f[2];
} vk_push;

typedef struct vk_dev {
    gpu_dev common;
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties memp;
    VkPhysicalDeviceLimits limits;
    bool budget;                /* VK_EXT_memory_budget */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipes[VK_PIPE_COUNT];
    VkCommandPool cpool;
    VkCommandBuffer once;       /* one-off work: uploads, single products */
    VkDescriptorPool once_pool;
    VkFence fence;
    gpu_buf *staging;           /* host-visible, for copies to and from device-only memory */
    gpu_buf *dummy;             /* bound to unused bindings */
    uint64_t allocated;         /* device-local bytes prima holds */
} vk_dev;

/* Memory: device-local (mapped too when the device allows it), or host-visible and coherent. */
gpu_buf *vk_buf_new(vk_dev *d, VkDeviceSize bytes, bool host, char *err, size_t errlen);
void vk_buf_del(vk_dev *d, gpu_buf *b);
int vk_write(vk_dev *d, gpu_buf *b, size_t off, const void *src, size_t n);
int vk_read(vk_dev *d, const gpu_buf *b, size_t off, void *dst, size_t n);

/* Update the device info's VRAM figures after allocations. */
void vk_refresh_vram(vk_dev *d);

/* The pipeline, created on first use (NULL if that fails). */
VkPipeline vk_pipeline(vk_dev *d, enum vk_pipe p);
/* A descriptor set binding bufs[0..n) to bindings 0..n (NULL entries and the rest: the dummy). */
VkDescriptorSet vk_set(vk_dev *d, VkDescriptorPool pool, gpu_buf *const *bufs, int n);
/* Record a dispatch of `groups` workgroups (split over x and y past the x limit). */
void vk_dispatch(vk_dev *d, VkCommandBuffer cb, VkPipeline p, VkDescriptorSet set,
                 const vk_push *push, uint32_t groups);
/* Make every earlier shader or transfer write visible to every later read (and the host). */
void vk_barrier(VkCommandBuffer cb);
VkCommandBuffer vk_cmd_new(vk_dev *d);
int vk_cmd_begin(VkCommandBuffer cb, bool reusable);
/* Submit and wait. Returns 0 or -1. */
int vk_submit(vk_dev *d, VkCommandBuffer cb);

/* vk_layers.c */
gpu_layers *vk_layers_create(gpu_dev *g, const gpu_model_desc *md, const gpu_layer_desc *descs,
                             const bool *on_gpu, char *err, size_t errlen);
void vk_layers_free(gpu_layers *gl);
int vk_layers_run(gpu_layers *gl, float *hidden, int n, const int32_t *pos, int first, int last,
                  char *err, size_t errlen);
int vk_layers_kv_copy(gpu_layers *gl, int il, int rows, uint16_t *k, uint16_t *v,
                      bool to_device);

/* The embedded SPIR-V (generated at build time by glslc). */
typedef struct vk_spv {
    const char *name;
    const uint32_t *code;
    size_t bytes;
} vk_spv;
extern const vk_spv vk_spv_table[];

#endif
