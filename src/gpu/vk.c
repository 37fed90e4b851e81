/* vk.c — the Vulkan backend: loader, device choice, memory, pipelines, single matrix products.
 *
 * One compute queue, one fence, everything synchronous: a caller submits one command buffer and
 * waits (a window of layers is one submit). Pipelines are created on first use, since a software
 * driver compiles each one at creation and most runs need few of them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk.h"
#include "kernels/probe.h"

vk_fns vk;

static PFN_vkGetInstanceProcAddr get_proc;

/* The loader library, opened once for the process and kept (drivers do not expect unloading). */
static int load_loader(char *why, size_t whylen)
{
    if (get_proc)
        return 0;
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, whylen, "no Vulkan loader (libvulkan.so.1) on this system");
        return -1;
    }
    get_proc = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    if (!get_proc) {
        snprintf(why, whylen, "libvulkan.so.1 lacks vkGetInstanceProcAddr");
        return -1;
    }
    return 0;
}

/* One instance for the process, created on the first open and kept: it keeps the driver loaded
 * (drivers are not written to be unloaded and reloaded), and devices open faster after it. */
static VkInstance instance;

static VkInstance create_instance(char *why, size_t whylen)
{
    if (instance)
        return instance;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)get_proc(NULL, "vkCreateInstance");
    PFN_vkEnumerateInstanceVersion version =
        (PFN_vkEnumerateInstanceVersion)get_proc(NULL, "vkEnumerateInstanceVersion");
    uint32_t api = VK_API_VERSION_1_0;
    if (version && version(&api) != VK_SUCCESS)
        api = VK_API_VERSION_1_0;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "prima",
        .apiVersion = api >= VK_API_VERSION_1_1 ? VK_API_VERSION_1_1 : VK_API_VERSION_1_0,
    };
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = create ? create(&ci, NULL, &inst) : VK_ERROR_INITIALIZATION_FAILED;
    if (r != VK_SUCCESS) {
        snprintf(why, whylen, "no usable Vulkan driver (vkCreateInstance: %s)",
                 r == VK_ERROR_INCOMPATIBLE_DRIVER ? "no compatible driver" : "failed");
        return VK_NULL_HANDLE;
    }
#define VK_LOAD(name) vk.name = (PFN_##name)get_proc(inst, #name);
    VK_FUNCS(VK_LOAD)
#undef VK_LOAD
    vk.vkGetPhysicalDeviceMemoryProperties2 = app.apiVersion >= VK_API_VERSION_1_1
        ? (PFN_vkGetPhysicalDeviceMemoryProperties2)get_proc(inst,
                                                             "vkGetPhysicalDeviceMemoryProperties2")
        : NULL;
    return instance = inst;
}

/* Preference of the default choice: discrete GPUs, then integrated, virtual, CPU drivers. */
static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
    }
}

static bool has_extension(VkPhysicalDevice pd, const char *name)
{
    uint32_t n = 0;
    if (vk.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || !n)
        return false;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    bool found = false;
    if (e && vk.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* Largest device-local heap, and what the driver says is left of it. */
static void vram_of(vk_dev *d, uint64_t *total, uint64_t *free_bytes)
{
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &bp};
    bool budget = d->budget && vk.vkGetPhysicalDeviceMemoryProperties2;
    if (budget)
        vk.vkGetPhysicalDeviceMemoryProperties2(d->pd, &mp2);
    uint32_t best = 0;
    uint64_t size = 0;
    for (uint32_t h = 0; h < d->memp.memoryHeapCount; h++)
        if ((d->memp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            d->memp.memoryHeaps[h].size > size) {
            size = d->memp.memoryHeaps[h].size;
            best = h;
        }
    *total = size;
    if (budget) {
        uint64_t b = bp.heapBudget[best], u = bp.heapUsage[best];
        *free_bytes = b > u ? b - u : 0;
    } else {
        *free_bytes = size > d->allocated ? size - d->allocated : 0;
    }
}

void vk_refresh_vram(vk_dev *d)
{
    vram_of(d, &d->common.info.vram_total, &d->common.info.vram_free);
}

static int find_memory(const vk_dev *d, uint32_t bits, VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < d->memp.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (d->memp.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

gpu_buf *vk_buf_new(vk_dev *d, VkDeviceSize bytes, bool host, char *err, size_t errlen)
{
    gpu_buf *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* room for the shaders' 4-byte reads past a tensor's last byte */
    b->size = (bytes + 16 + 255) & ~(VkDeviceSize)255;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = b->size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (vk.vkCreateBuffer(d->dev, &bi, NULL, &b->buf) != VK_SUCCESS) {
        snprintf(err, errlen, "cannot create a GPU buffer of %llu bytes",
                 (unsigned long long)bytes);
        free(b);
        return NULL;
    }
    VkMemoryRequirements mr;
    vk.vkGetBufferMemoryRequirements(d->dev, b->buf, &mr);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type = host ? find_memory(d, mr.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                    : find_memory(d, mr.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0)
        type = find_memory(d, mr.memoryTypeBits, host ? hv : 0);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = mr.size,
                               .memoryTypeIndex = (uint32_t)type};
    if (type < 0 || vk.vkAllocateMemory(d->dev, &ai, NULL, &b->mem) != VK_SUCCESS) {
        snprintf(err, errlen, "out of GPU memory for %.1f MiB (%.1f MiB held)",
                 (double)bytes / 1048576.0, (double)d->allocated / 1048576.0);
        vk.vkDestroyBuffer(d->dev, b->buf, NULL);
        free(b);
        return NULL;
    }
    vk.vkBindBufferMemory(d->dev, b->buf, b->mem, 0);
    if ((d->memp.memoryTypes[type].propertyFlags & hv) == hv &&
        vk.vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
        b->map = NULL;
    if (!host) {
        b->charged = mr.size;
        d->allocated += mr.size;
    }
    b->size = bytes; /* what callers may address */
    return b;
}

void vk_buf_del(vk_dev *d, gpu_buf *b)
{
    if (!b)
        return;
    d->allocated -= b->charged;
    vk.vkDestroyBuffer(d->dev, b->buf, NULL);
    vk.vkFreeMemory(d->dev, b->mem, NULL); /* unmaps */
    free(b);
}

VkCommandBuffer vk_cmd_new(vk_dev *d)
{
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->cpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    VkCommandBuffer cb = VK_NULL_HANDLE;
    if (vk.vkAllocateCommandBuffers(d->dev, &ai, &cb) != VK_SUCCESS)
        return VK_NULL_HANDLE;
    return cb;
}

int vk_cmd_begin(VkCommandBuffer cb, bool reusable)
{
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = reusable ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    return vk.vkBeginCommandBuffer(cb, &bi) == VK_SUCCESS ? 0 : -1;
}

int vk_submit(vk_dev *d, VkCommandBuffer cb)
{
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &cb};
    if (vk.vkResetFences(d->dev, 1, &d->fence) != VK_SUCCESS ||
        vk.vkQueueSubmit(d->queue, 1, &si, d->fence) != VK_SUCCESS)
        return -1;
    return vk.vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX) == VK_SUCCESS ? 0 : -1;
}

void vk_barrier(VkCommandBuffer cb)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                         VK_ACCESS_HOST_READ_BIT};
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
                                    VK_PIPELINE_STAGE_TRANSFER_BIT;
    vk.vkCmdPipelineBarrier(cb, st, st | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Copy between a host pointer and device-only memory through the staging buffer, in pieces. */
static int staged_copy(vk_dev *d, const gpu_buf *b, size_t off, void *host, size_t n, bool up)
{
    const size_t chunk = d->staging->size;
    for (size_t done = 0; done < n; done += chunk) {
        size_t len = n - done < chunk ? n - done : chunk;
        if (up)
            memcpy(d->staging->map, (const char *)host + done, len);
        VkBufferCopy c = {.srcOffset = up ? 0 : off + done, .dstOffset = up ? off + done : 0,
                          .size = len};
        if (vk_cmd_begin(d->once, false))
            return -1;
        vk.vkCmdCopyBuffer(d->once, up ? d->staging->buf : b->buf,
                           up ? b->buf : d->staging->buf, 1, &c);
        vk_barrier(d->once);
        if (vk.vkEndCommandBuffer(d->once) != VK_SUCCESS || vk_submit(d, d->once))
            return -1;
        if (!up)
            memcpy((char *)host + done, d->staging->map, len);
    }
    return 0;
}

int vk_write(vk_dev *d, gpu_buf *b, size_t off, const void *src, size_t n)
{
    if (off > b->size || n > b->size - off)
        return -1;
    if (b->map) {
        memcpy((char *)b->map + off, src, n);
        return 0;
    }
    return staged_copy(d, b, off, (void *)src, n, true);
}

int vk_read(vk_dev *d, const gpu_buf *b, size_t off, void *dst, size_t n)
{
    if (off > b->size || n > b->size - off)
        return -1;
    if (b->map) {
        memcpy(dst, (const char *)b->map + off, n);
        return 0;
    }
    return staged_copy(d, b, off, dst, n, false);
}

/* ---- pipelines ---- */

static const struct {
    enum dtype type;
    const char *spv;
} mm_types[VK_MM_TYPES] = {
    {DT_F32, "matmul_f32"}, {DT_F16, "matmul_f16"}, {DT_Q8_0, "matmul_q8_0"},
    {DT_Q4_0, "matmul_q4_0"}, {DT_Q4_K, "matmul_q4_k"}, {DT_Q5_K, "matmul_q5_k"},
    {DT_Q6_K, "matmul_q6_k"},
};

static const char *const op_spv[VK_PIPE_COUNT - VK_PIPE_RMSNORM] = {
    "rmsnorm", "rope", "glu", "kv_store", "attention", "add",
};

enum vk_pipe vk_pipe_matmul(enum dtype t, int n_tok)
{
    int slot = 0;
    while (slot < VK_MM_TYPES - 1 && mm_types[slot].type != t)
        slot++;
    return (enum vk_pipe)(VK_PIPE_MM + 2 * slot + (n_tok > 1));
}

VkPipeline vk_pipeline(vk_dev *d, enum vk_pipe p)
{
    if (d->pipes[p])
        return d->pipes[p];
    const char *name = p < VK_PIPE_RMSNORM ? mm_types[(p - VK_PIPE_MM) / 2].spv
                                           : op_spv[p - VK_PIPE_RMSNORM];
    const vk_spv *s = vk_spv_table;
    while (s->name && strcmp(s->name, name))
        s++;
    if (!s->name)
        return VK_NULL_HANDLE;
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = s->bytes, .pCode = s->code};
    VkShaderModule mod;
    if (vk.vkCreateShaderModule(d->dev, &mi, NULL, &mod) != VK_SUCCESS)
        return VK_NULL_HANDLE;
    /* the matrix products' constant 0: tokens per pass */
    const uint32_t tt = p < VK_PIPE_RMSNORM && (p - VK_PIPE_MM) % 2 ? 8 : 1;
    VkSpecializationMapEntry me = {.constantID = 0, .offset = 0, .size = sizeof tt};
    VkSpecializationInfo spec = {.mapEntryCount = 1, .pMapEntries = &me, .dataSize = sizeof tt,
                                 .pData = &tt};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = p < VK_PIPE_RMSNORM ? &spec : NULL},
        .layout = d->layout};
    if (vk.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &d->pipes[p]) !=
        VK_SUCCESS)
        d->pipes[p] = VK_NULL_HANDLE;
    vk.vkDestroyShaderModule(d->dev, mod, NULL);
    return d->pipes[p];
}

VkDescriptorSet vk_set(vk_dev *d, VkDescriptorPool pool, gpu_buf *const *bufs, int n)
{
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = pool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &d->dsl};
    VkDescriptorSet set;
    if (vk.vkAllocateDescriptorSets(d->dev, &ai, &set) != VK_SUCCESS)
        return VK_NULL_HANDLE;
    VkDescriptorBufferInfo bi[VK_BINDINGS];
    VkWriteDescriptorSet w[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++) {
        const gpu_buf *b = i < n && bufs[i] ? bufs[i] : d->dummy;
        bi[i] = (VkDescriptorBufferInfo){.buffer = b->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vk.vkUpdateDescriptorSets(d->dev, VK_BINDINGS, w, 0, NULL);
    return set;
}

void vk_dispatch(vk_dev *d, VkCommandBuffer cb, VkPipeline p, VkDescriptorSet set,
                 const vk_push *push, uint32_t groups)
{
    const uint32_t max_x = d->limits.maxComputeWorkGroupCount[0];
    uint32_t gx = groups < max_x ? groups : max_x, gy = (groups + gx - 1) / gx;
    vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &set, 0,
                               NULL);
    vk.vkCmdPushConstants(cb, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof *push, push);
    vk.vkCmdDispatch(cb, gx, gy, 1);
}

/* ---- the device ---- */

static void vk_close(gpu_dev *g)
{
    vk_dev *d = (vk_dev *)g;
    if (d->dev) {
        for (int p = 0; p < VK_PIPE_COUNT; p++)
            if (d->pipes[p])
                vk.vkDestroyPipeline(d->dev, d->pipes[p], NULL);
        vk_buf_del(d, d->staging);
        vk_buf_del(d, d->dummy);
        if (d->fence)
            vk.vkDestroyFence(d->dev, d->fence, NULL);
        if (d->once_pool)
            vk.vkDestroyDescriptorPool(d->dev, d->once_pool, NULL);
        if (d->cpool)
            vk.vkDestroyCommandPool(d->dev, d->cpool, NULL);
        if (d->layout)
            vk.vkDestroyPipelineLayout(d->dev, d->layout, NULL);
        if (d->dsl)
            vk.vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
        vk.vkDestroyDevice(d->dev, NULL);
    }
    free(d);
}

/* Pick the physical device: index >= 0 as asked, else the best-ranked (first on ties). */
static int choose_device(vk_dev *d, int index, char *why, size_t whylen)
{
    uint32_t n = 0;
    if (vk.vkEnumeratePhysicalDevices(d->inst, &n, NULL) != VK_SUCCESS || n == 0) {
        snprintf(why, whylen, "the Vulkan driver reports no device");
        return -1;
    }
    VkPhysicalDevice *pds = calloc(n, sizeof *pds);
    if (!pds || vk.vkEnumeratePhysicalDevices(d->inst, &n, pds) != VK_SUCCESS) {
        free(pds);
        snprintf(why, whylen, "cannot list the Vulkan devices");
        return -1;
    }
    if (index >= (int)n) {
        snprintf(why, whylen, "GPU %d asked for, but Vulkan has %u device%s (0..%u)", index, n,
                 n == 1 ? "" : "s", n - 1);
        free(pds);
        return -1;
    }
    int pick = index;
    for (uint32_t i = 0; pick < 0 && i < n; i++) {
        VkPhysicalDeviceProperties pi, pb;
        vk.vkGetPhysicalDeviceProperties(pds[i], &pi);
        int best = 0;
        for (uint32_t j = 0; j < n; j++) {
            vk.vkGetPhysicalDeviceProperties(pds[j], &pb);
            if (type_rank(pb.deviceType) > type_rank(pi.deviceType) ||
                (j < i && type_rank(pb.deviceType) == type_rank(pi.deviceType)))
                best = 1;
        }
        if (!best)
            pick = (int)i;
    }
    d->pd = pds[pick];
    d->common.info.index = pick;
    free(pds);
    return 0;
}

static int create_device(vk_dev *d, char *why, size_t whylen)
{
    uint32_t nq = 0;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, NULL);
    VkQueueFamilyProperties qf[16];
    if (nq > 16)
        nq = 16;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, qf);
    d->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && d->qfam == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            d->qfam = i;
    if (d->qfam == UINT32_MAX) {
        snprintf(why, whylen, "Vulkan device %s has no compute queue", d->common.info.name);
        return -1;
    }
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = d->qfam,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    d->budget = has_extension(d->pd, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    const char *ext[] = {VK_EXT_MEMORY_BUDGET_EXTENSION_NAME};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = d->budget ? 1 : 0,
                             .ppEnabledExtensionNames = ext};
    if (vk.vkCreateDevice(d->pd, &di, NULL, &d->dev) != VK_SUCCESS) {
        snprintf(why, whylen, "cannot create a Vulkan device on %s", d->common.info.name);
        return -1;
    }
    vk.vkGetDeviceQueue(d->dev, d->qfam, 0, &d->queue);

    VkDescriptorSetLayoutBinding b[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = VK_BINDINGS,
                                          .pBindings = b};
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = sizeof(vk_push)};
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->qfam};
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = 4 * VK_BINDINGS};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
                                      .maxSets = 4,
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (vk.vkCreateDescriptorSetLayout(d->dev, &li, NULL, &d->dsl) != VK_SUCCESS ||
        vk.vkCreatePipelineLayout(d->dev,
                                  &(VkPipelineLayoutCreateInfo){
                                      .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &d->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pr},
                                  NULL, &d->layout) != VK_SUCCESS ||
        vk.vkCreateCommandPool(d->dev, &cpi, NULL, &d->cpool) != VK_SUCCESS ||
        vk.vkCreateDescriptorPool(d->dev, &dpi, NULL, &d->once_pool) != VK_SUCCESS ||
        vk.vkCreateFence(d->dev, &fi, NULL, &d->fence) != VK_SUCCESS ||
        !(d->once = vk_cmd_new(d))) {
        snprintf(why, whylen, "cannot set up Vulkan compute on %s", d->common.info.name);
        return -1;
    }
    d->staging = vk_buf_new(d, 16u << 20, true, why, whylen);
    d->dummy = d->staging ? vk_buf_new(d, 256, false, why, whylen) : NULL;
    return d->staging && d->dummy ? 0 : -1;
}

static gpu_dev *vk_open(int index, char *why, size_t whylen)
{
    if (load_loader(why, whylen))
        return NULL;
    vk_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    if (!(d->inst = create_instance(why, whylen)) || choose_device(d, index, why, whylen)) {
        vk_close(&d->common);
        return NULL;
    }
    VkPhysicalDeviceProperties pp;
    vk.vkGetPhysicalDeviceProperties(d->pd, &pp);
    vk.vkGetPhysicalDeviceMemoryProperties(d->pd, &d->memp);
    d->limits = pp.limits;
    gpu_info *in = &d->common.info;
    snprintf(in->backend, sizeof in->backend, "vulkan");
    snprintf(in->name, sizeof in->name, "%.127s", pp.deviceName);
    in->discrete = pp.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    in->software = pp.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    in->unified = pp.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || in->software;
    if (create_device(d, why, whylen)) {
        vk_close(&d->common);
        return NULL;
    }
    vk_refresh_vram(d);
    return &d->common;
}

/* ---- the gpu.h entry points ---- */

static gpu_buf *vk_buf_create(gpu_dev *g, size_t bytes, char *err, size_t errlen)
{
    vk_dev *d = (vk_dev *)g;
    gpu_buf *b = vk_buf_new(d, bytes, false, err, errlen);
    vk_refresh_vram(d);
    return b;
}

static void vk_buf_free(gpu_dev *g, gpu_buf *b)
{
    vk_buf_del((vk_dev *)g, b);
}

static int vk_buf_write(gpu_dev *g, gpu_buf *b, size_t off, const void *src, size_t n)
{
    return vk_write((vk_dev *)g, b, off, src, n);
}

static int vk_buf_read(gpu_dev *g, const gpu_buf *b, size_t off, void *dst, size_t n)
{
    return vk_read((vk_dev *)g, b, off, dst, n);
}

static double vk_matmul(gpu_dev *g, const gpu_buf *w, enum dtype wt, int n_in, int n_out,
                        const gpu_buf *x, int n_tok, gpu_buf *y, int reps, char *err,
                        size_t errlen)
{
    vk_dev *d = (vk_dev *)g;
    const uint64_t row = dtype_row_bytes(wt, (uint64_t)n_in);
    if (row * (uint64_t)n_out > w->size || (uint64_t)n_in * (uint64_t)n_tok * 4 > x->size ||
        (uint64_t)n_out * (uint64_t)n_tok * 4 > y->size) {
        snprintf(err, errlen, "GPU matmul: buffers too small for %d x %d, %d tokens", n_out,
                 n_in, n_tok);
        return -1;
    }
    VkPipeline p = vk_pipeline(d, vk_pipe_matmul(wt, n_tok));
    gpu_buf *bufs[3] = {(gpu_buf *)w, (gpu_buf *)x, y};
    VkDescriptorSet set = p ? vk_set(d, d->once_pool, bufs, 3) : VK_NULL_HANDLE;
    if (!set) {
        snprintf(err, errlen, "GPU matmul: cannot create its pipeline");
        return -1;
    }
    vk_push push = {.u = {(uint32_t)n_in, (uint32_t)n_out, (uint32_t)n_tok, (uint32_t)row, 0}};
    double t = -1;
    if (!vk_cmd_begin(d->once, false)) {
        for (int r = 0; r < reps; r++) {
            vk_dispatch(d, d->once, p, set, &push, vk_matmul_groups(n_out));
            vk_barrier(d->once);
        }
        double t0 = probe_now();
        if (vk.vkEndCommandBuffer(d->once) == VK_SUCCESS && !vk_submit(d, d->once))
            t = probe_now() - t0;
    }
    vk.vkFreeDescriptorSets(d->dev, d->once_pool, 1, &set);
    if (t < 0)
        snprintf(err, errlen, "GPU matmul: submit failed");
    return t;
}

static double vk_submit_latency(gpu_dev *g)
{
    vk_dev *d = (vk_dev *)g;
    double best = -1;
    for (int i = 0; i < 5; i++) {
        double t0 = probe_now();
        if (vk_cmd_begin(d->once, false) || vk.vkEndCommandBuffer(d->once) != VK_SUCCESS ||
            vk_submit(d, d->once))
            return -1;
        double t = probe_now() - t0;
        if (best < 0 || t < best)
            best = t;
    }
    return best;
}

static double vk_copy(gpu_dev *g, gpu_buf *dst, const gpu_buf *src, size_t n, int reps)
{
    vk_dev *d = (vk_dev *)g;
    if (n > dst->size || n > src->size || vk_cmd_begin(d->once, false))
        return -1;
    const VkBufferCopy c = {.size = n};
    for (int r = 0; r < reps; r++) {
        vk.vkCmdCopyBuffer(d->once, src->buf, dst->buf, 1, &c);
        vk_barrier(d->once);
    }
    double t0 = probe_now();
    if (vk.vkEndCommandBuffer(d->once) != VK_SUCCESS || vk_submit(d, d->once))
        return -1;
    return probe_now() - t0;
}

const gpu_backend gpu_backend_vulkan = {
    .name = "vulkan",
    /* vk_layers.c; experts not yet */
    .ops = ((1u << LOP_KINDS) - 1) & ~(1u << LOP_MOE),
    .open = vk_open,
    .close = vk_close,
    .buf_create = vk_buf_create,
    .buf_free = vk_buf_free,
    .buf_write = vk_buf_write,
    .buf_read = vk_buf_read,
    .matmul = vk_matmul,
    .submit_latency = vk_submit_latency,
    .copy = vk_copy,
    .layers_create = vk_layers_create,
    .layers_free = vk_layers_free,
    .layers_run = vk_layers_run,
    .layers_kv_copy = vk_layers_kv_copy,
};
