#version 450
// add.comp — y += x, element-wise (a residual add the matrix product before it could not fold in).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Yb { float Y[]; };
layout(std430, binding = 1) readonly buffer Xb { float X[]; };

// pc: u0 n
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (i < pc.u0)
        Y[i] += X[i];
}
