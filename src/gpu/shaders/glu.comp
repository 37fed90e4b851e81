#version 450
// glu.comp — the gate of a gated FFN, element-wise: gate = act(gate) * up, act SiLU (u1 = 0)
// or GELU's tanh approximation (u1 = 1), as the CPU's kern_silu_mul / kern_gelu_mul.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Gb { float G[]; };
layout(std430, binding = 1) readonly buffer Ub { float U[]; };

// pc: u0 n, u1 activation
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (i >= pc.u0)
        return;
    const float g = G[i];
    float a;
    if (pc.u1 == 0u) {
        a = g / (1.0 + exp(-g));
    } else {
        // tanh saturates long before its argument reaches 15; clamping keeps exp finite
        const float z = clamp(0.7978845608028654 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0);
        a = 0.5 * g * (1.0 + tanh(z));
    }
    G[i] = a * U[i];
}
