#version 450
// rmsnorm.comp — Y row r = X row r * rsqrt(mean(X row r ^ 2) + eps) * w, one workgroup per row
// (rows of n_embd for the block norms, of head_dim for Qwen3's per-head Q/K norms; in place
// allowed: every read of a row happens before the barrier that precedes its writes).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float X[]; };
layout(std430, binding = 1) buffer Yb { float Y[]; };
layout(std430, binding = 2) readonly buffer Wb { float Wt[]; };

// pc: u0 dim, u1 rows, f0 eps
shared float red[64];

void main()
{
    const uint dim = pc.u0, row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    if (row >= pc.u1)
        return;
    const uint o = row * dim;
    float s = 0.0;
    for (uint i = lid; i < dim; i += 64u)
        s += X[o + i] * X[o + i];
    red[lid] = s;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k)
            red[lid] += red[lid + k];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(dim) + pc.f0);
    for (uint i = lid; i < dim; i += 64u)
        Y[o + i] = (X[o + i] * scale) * Wt[i];
}
