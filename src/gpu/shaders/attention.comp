#version 450
// attention.comp — grouped-query attention of one (token, head) per workgroup over the F16 KV
// cache: positions 0..pos[t] (causal), or the last `window` of them, at rows position % rows
// (a ring for a sliding layer), KV head h / (n_head / n_head_kv). Keys go in tiles of 64 (one
// score per thread), with a running maximum and sum (numerically stable, one pass over the
// cache); each thread owns output dimensions lid, lid + 64, ... of the head.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float Q[]; };
layout(std430, binding = 1) readonly buffer KCb { uint KC[]; };
layout(std430, binding = 2) readonly buffer VCb { uint VC[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 4) readonly buffer Pb { int P[]; };

// pc: u0 n_head, u1 n_head_kv, u2 head_dim, u3 n_tok, u4 window (0: none), u5 cache rows,
//     f0 scale
shared float q[512];
shared float p[64];
shared float red[64];

float v_at(uint e) { return unpackHalf2x16(VC[e >> 1])[e & 1u]; }

void main()
{
    const uint n_head = pc.u0, hd = pc.u2, lid = gl_LocalInvocationID.x;
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (wg >= pc.u3 * n_head)
        return;
    const uint t = wg / n_head, h = wg % n_head;
    const uint kvh = h / (n_head / pc.u1), kv_dim = pc.u1 * hd;
    const uint pos = uint(P[t]);
    const uint lo = pc.u4 != 0u && pos + 1u > pc.u4 ? pos + 1u - pc.u4 : 0u;
    const uint n_kv = pos + 1u - lo;
    const uint qo = (t * n_head + h) * hd;
    for (uint i = lid; i < hd; i += 64u)
        q[i] = Q[qo + i];
    barrier();

    float acc[8];
    [[unroll]] for (uint k = 0; k < 8u; k++)
        acc[k] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    for (uint j0 = 0; j0 < n_kv; j0 += 64u) {
        const uint j = j0 + lid;
        float s = -1.0 / 0.0;
        if (j < n_kv) {
            const uint kb = ((lo + j) % pc.u5) * kv_dim + kvh * hd;
            s = 0.0;
            for (uint i = 0; i < hd; i += 2u) {
                const vec2 k2 = unpackHalf2x16(KC[(kb + i) >> 1]);
                s += q[i] * k2.x + q[i + 1u] * k2.y;
            }
            s *= pc.f0;
        }
        red[lid] = s;
        barrier();
        for (uint k = 32u; k > 0u; k >>= 1) {
            if (lid < k)
                red[lid] = max(red[lid], red[lid + k]);
            barrier();
        }
        const float m_new = max(m, red[0]);
        barrier();
        p[lid] = j < n_kv ? exp(s - m_new) : 0.0;
        red[lid] = p[lid];
        barrier();
        for (uint k = 32u; k > 0u; k >>= 1) {
            if (lid < k)
                red[lid] += red[lid + k];
            barrier();
        }
        const float corr = exp(m - m_new);
        l = l * corr + red[0];
        m = m_new;
        const uint nj = min(64u, n_kv - j0);
        [[unroll]] for (uint k = 0; k < 8u; k++) {
            const uint d = lid + 64u * k;
            if (d < hd) {
                float a = acc[k] * corr;
                for (uint jj = 0; jj < nj; jj++)
                    a += p[jj] * v_at(((lo + j0 + jj) % pc.u5) * kv_dim + kvh * hd + d);
                acc[k] = a;
            }
        }
        barrier();
    }
    [[unroll]] for (uint k = 0; k < 8u; k++) {
        const uint d = lid + 64u * k;
        if (d < hd)
            O[qo + d] = acc[k] / l;
    }
}
