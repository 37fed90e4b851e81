#version 450
// kv_store.comp — K and V rows of the batch into the F16 cache rows of their positions (pairs
// of halves per 32-bit word, rounded to nearest even like the CPU's cache); a sliding layer's
// cache is a ring.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Kb { float K[]; };
layout(std430, binding = 1) readonly buffer Vb { float V[]; };
layout(std430, binding = 2) buffer KCb { uint KC[]; };
layout(std430, binding = 3) buffer VCb { uint VC[]; };
layout(std430, binding = 4) readonly buffer Pb { int P[]; };

// pc: u0 n_tok, u1 kv_dim (even), u2 the cache's rows (position p goes to row p % rows)
void main()
{
    const uint pairs = pc.u1 / 2u;
    const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (id >= pc.u0 * pairs)
        return;
    const uint t = id / pairs, i = id % pairs;
    const uint src = t * pc.u1 + 2u * i, dst = (uint(P[t]) % pc.u2) * pairs + i;
    KC[dst] = f32_to_f16_rne(K[src]) | (f32_to_f16_rne(K[src + 1u]) << 16);
    VC[dst] = f32_to_f16_rne(V[src]) | (f32_to_f16_rne(V[src + 1u]) << 16);
}
