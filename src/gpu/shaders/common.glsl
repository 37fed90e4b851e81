// common.glsl — what every prima compute shader shares: the push-constant block (one layout for
// all pipelines, so one pipeline layout serves them all) and exact scalar helpers.
#extension GL_EXT_control_flow_attributes : enable

layout(push_constant) uniform Push {
    uint u0, u1, u2, u3, u4, u5, u6, u7;
    float f0, f1;
} pc;

// IEEE binary32 -> binary16, round to nearest even (as the CPU's fp32_to_fp16): the F16 KV cache
// then holds the same bits on both sides. packHalf2x16 leaves the rounding to the driver.
uint f32_to_f16_rne(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                       // Inf or NaN
        return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u)                       // rounds to >= 65520: overflow to Inf
        return sign | 0x7c00u;
    if (ax < 0x38800000u) {                      // result is subnormal (or zero)
        if (ax < 0x33000000u)
            return sign;                         // below half the smallest subnormal
        uint m = (ax & 0x7fffffu) | 0x800000u;
        uint e = ax >> 23;                       // 102..112
        uint shift = 126u - e;                   // 14..24
        uint q = m >> shift;
        uint rem = m & ((1u << shift) - 1u);
        uint half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (q & 1u) != 0u))
            q++;
        return sign | q;
    }
    uint r = ax - 0x38000000u;                   // rebias exponent 127 -> 15 (shifted by 13)
    uint q = r >> 13;
    uint rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u))
        q++;
    return sign | q;
}
