// dequant.glsl — 32 consecutive weights of a row, from the GGUF blocks as stored (the layouts of
// src/kernels/quant.h). Exactly one T_* is defined per compiled variant. The buffer W is read as
// 32-bit words, since block sizes (18, 34, 210 bytes) leave fields at any byte offset.

uint rd8(uint off) { return (W[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }

// Four bytes starting at any offset, little-endian.
uint rd32(uint off)
{
    const uint sh = (off & 3u) * 8u, i = off >> 2;
    return sh == 0u ? W[i] : (W[i] >> sh) | (W[i + 1u] << (32u - sh));
}

uint rd16(uint off) { return rd32(off) & 0xffffu; }
float rdh(uint off) { return unpackHalf2x16(rd16(off)).x; }

#if defined(T_F32)
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint base = (row_off >> 2) + c * 32u, len = min(32u, n_in - c * 32u);
    [[unroll]] for (uint l = 0; l < 32u; l++)
        w[l] = l < len ? uintBitsToFloat(W[base + l]) : 0.0;
}
#elif defined(T_F16)
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint base = row_off + c * 64u, len = min(32u, n_in - c * 32u);
    if (len == 32u && (base & 3u) == 0u) {
        [[unroll]] for (uint l = 0; l < 32u; l += 2u) {
            const vec2 v = unpackHalf2x16(W[(base >> 2) + l / 2u]);
            w[l] = v.x;
            w[l + 1u] = v.y;
        }
    } else {
        [[unroll]] for (uint l = 0; l < 32u; l++)
            w[l] = l < len ? rdh(base + 2u * l) : 0.0;
    }
}
#elif defined(T_Q8_0)
// 34 bytes: half d, int8 qs[32]
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint b = row_off + c * 34u;
    const float d = rdh(b);
    [[unroll]] for (uint l = 0; l < 32u; l += 4u) {
        const int q = int(rd32(b + 2u + l));
        [[unroll]] for (uint k = 0; k < 4u; k++)
            w[l + k] = d * float(bitfieldExtract(q, int(8u * k), 8));
    }
}
#elif defined(T_Q4_0)
// 18 bytes: half d, qs[16]; element l < 16 is the low nibble of qs[l], l >= 16 the high one of qs[l-16]
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint b = row_off + c * 18u;
    const float d = rdh(b);
    [[unroll]] for (uint l = 0; l < 16u; l += 4u) {
        const uint q = rd32(b + 2u + l);
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            w[l + k] = d * (float((q >> (8u * k)) & 15u) - 8.0);
            w[l + k + 16u] = d * (float((q >> (8u * k + 4u)) & 15u) - 8.0);
        }
    }
}
#elif defined(T_Q4_K) || defined(T_Q5_K)
// Q4_K 144 bytes: half d, half dmin, scales[12], qs[128]. Q5_K 176: ... scales[12], qh[32], qs[128].
// Sub-block j (32 elements) of a super-block: value d*sc[j]*q - dmin*m[j], 6-bit sc, m packed
// as in k4_unpack_scales; q the low (j even) or high (j odd) nibble of qs[32*(j/2) + l]
// (+ bit j of qh[l] << 4 for Q5_K).
#if defined(T_Q4_K)
const uint SB = 144u, QS = 16u;
#else
const uint SB = 176u, QS = 48u;
#endif
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint b = row_off + (c >> 3) * SB, j = c & 7u;
    const vec2 dm = unpackHalf2x16(rd32(b));
    uint sc, m;
    if (j < 4u) {
        sc = rd8(b + 4u + j) & 63u;
        m = rd8(b + 8u + j) & 63u;
    } else {
        const uint hi = rd8(b + 8u + j);
        sc = (hi & 15u) | ((rd8(b + j) >> 6) << 4);
        m = (hi >> 4) | ((rd8(b + 4u + j) >> 6) << 4);
    }
    const float d = dm.x * float(sc), mn = dm.y * float(m);
    const uint qs = b + QS + 32u * (j >> 1), shift = 4u * (j & 1u);
    [[unroll]] for (uint l = 0; l < 32u; l += 4u) {
        const uint q = rd32(qs + l) >> shift;
#if defined(T_Q5_K)
        const uint h = rd32(b + 16u + l) >> j;
#endif
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint v = (q >> (8u * k)) & 15u;
#if defined(T_Q5_K)
            v |= ((h >> (8u * k)) & 1u) << 4;
#endif
            w[l + k] = d * float(v) - mn;
        }
    }
}
#elif defined(T_Q6_K)
// 210 bytes: ql[128], qh[64], int8 scales[16], half d. Element 128h + 32g + l: 4 low bits from
// ql[64h + 32(g&1) + l] (high nibble for g >= 2), 2 high bits (2g) of qh[32h + l]; minus 32;
// scale scales[e/16].
void load_chunk(uint row_off, uint c, uint n_in, out float w[32])
{
    const uint b = row_off + (c >> 3) * 210u, j = c & 7u, h = j >> 2, g = j & 3u;
    const float d = rdh(b + 208u);
    const uint s2 = rd16(b + 192u + 2u * j);
    const float d0 = d * float(bitfieldExtract(int(s2), 0, 8));
    const float d1 = d * float(bitfieldExtract(int(s2), 8, 8));
    const uint ql = b + 64u * h + 32u * (g & 1u), lshift = 4u * (g >> 1);
    const uint qh = b + 128u + 32u * h, hshift = 2u * g;
    [[unroll]] for (uint l = 0; l < 32u; l += 4u) {
        const uint lo = rd32(ql + l) >> lshift, hi = rd32(qh + l) >> hshift;
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            const int v = int(((lo >> (8u * k)) & 15u) | (((hi >> (8u * k)) & 3u) << 4)) - 32;
            w[l + k] = (l + k < 16u ? d0 : d1) * float(v);
        }
    }
}
#else
#error "define one weight type T_*"
#endif
