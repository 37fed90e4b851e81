#version 450
// rope.comp — rotate the n_heads heads of every token by its position's angles. The cos/sin
// table (per token, n_rot/2 pairs) is computed on the host exactly as kern_rope computes it
// (in double), so GPU and CPU rotate by the same float angles at any position.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xb { float X[]; };
layout(std430, binding = 1) readonly buffer Tb { vec2 CS[]; };

// pc: u0 n_tok, u1 n_heads, u2 head_dim, u3 n_rot, u4 neox
void main()
{
    const uint half_ = pc.u3 / 2u, n_heads = pc.u1, hd = pc.u2;
    const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (id >= pc.u0 * n_heads * half_)
        return;
    const uint i = id % half_, h = (id / half_) % n_heads, t = id / (half_ * n_heads);
    const vec2 cs = CS[t * half_ + i];
    const uint a = (t * n_heads + h) * hd + (pc.u4 != 0u ? i : 2u * i);
    const uint b = a + (pc.u4 != 0u ? half_ : 1u);
    const float x0 = X[a], x1 = X[b];
    X[a] = x0 * cs.x - x1 * cs.y;
    X[b] = x0 * cs.y + x1 * cs.x;
}
