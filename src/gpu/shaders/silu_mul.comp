#version 450
// silu_mul.comp — gate = silu(gate) * up, element-wise.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Gb { float G[]; };
layout(std430, binding = 1) readonly buffer Ub { float U[]; };

// pc: u0 n
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (i >= pc.u0)
        return;
    const float g = G[i];
    G[i] = g / (1.0 + exp(-g)) * U[i];
}
