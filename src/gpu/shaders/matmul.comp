#version 450
// matmul.comp — y[t][o] = dot(W row o, x row t) (+ b[o]) (+ y[t][o]) for t < n_tok, o < n_out.
// Each output row's 32-element chunks are walked by a few threads (dequant.glsl, one weight type
// per compiled variant, reading the GGUF blocks as stored) and keeps TT tokens in flight: the
// decode pipeline uses TT = 1, the prefill one TT = 8, so each weight chunk is read once per TT
// tokens. Activations stay F32: no activation rounding (the fixtures' variant (a)).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TT = 1;

layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 1) readonly buffer Xb { float X[]; };
layout(std430, binding = 2) buffer Yb { float Y[]; };
layout(std430, binding = 3) readonly buffer Bb { float B[]; };

#include "dequant.glsl"

// pc: u0 n_in, u1 n_out, u2 n_tok, u3 row bytes, u4 flags (1: add bias, 2: accumulate into y)
// A workgroup computes ROWS rows, LANES threads per row: few, large workgroups (a software
// driver pays per workgroup; a GPU still gets n_out / 8 of them).
const uint LANES = 4u, ROWS = 64u / LANES;
shared float red[8][64];

void main()
{
    const uint n_in = pc.u0, n_out = pc.u1, n_tok = pc.u2, row_bytes = pc.u3, flags = pc.u4;
    const uint lid = gl_LocalInvocationID.x, lane = lid % LANES, base_lid = lid - lane;
    const uint row = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * ROWS + lid / LANES;
    const bool valid = row < n_out;
    const uint row_off = valid ? row * row_bytes : 0u;
    const uint n_chunks = (n_in + 31u) / 32u;
    for (uint t0 = 0; t0 < n_tok; t0 += TT) {
        float acc[8];
        [[unroll]] for (uint t = 0; t < 8; t++)
            acc[t] = 0.0;
        // every array index below is a constant after unrolling: the arrays stay in registers
        for (uint c = lane; valid && c < n_chunks; c += LANES) {
            float w[32];
            load_chunk(row_off, c, n_in, w);
            const uint base = c * 32u;
            const uint len = min(32u, n_in - base);
            [[unroll]] for (uint t = 0; t < 8u; t++) {
                if (t < TT && t0 + t < n_tok) {
                    const uint xo = (t0 + t) * n_in + base;
                    float s = 0.0;
                    [[unroll]] for (uint l = 0; l < 32u; l++)
                        if (l < len)
                            s += w[l] * X[xo + l];
                    acc[t] += s;
                }
            }
        }
        [[unroll]] for (uint t = 0; t < 8u; t++)
            if (t < TT)
                red[t][lid] = acc[t];
        barrier();
        for (uint s = LANES / 2u; s > 0u; s >>= 1) {
            if (lane < s)
                [[unroll]] for (uint t = 0; t < 8u; t++)
                    if (t < TT)
                        red[t][lid] += red[t][lid + s];
            barrier();
        }
        for (uint t = lane; valid && t < TT && t0 + t < n_tok; t += LANES) {
            float v = red[t][base_lid];
            if ((flags & 1u) != 0u)
                v += B[row];
            const uint yi = (t0 + t) * n_out + row;
            if ((flags & 2u) != 0u)
                v += Y[yi];
            Y[yi] = v;
        }
        barrier();
    }
}
