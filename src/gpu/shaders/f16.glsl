// f32 -> IEEE half bits, round to nearest even in integer arithmetic (core/fp16.h's f32_to_f16,
// bit for bit on every device: packHalf2x16 leaves the rounding to the implementation);
// overflow -> inf, NaN -> the quiet NaN 0x7E00 with the sign.
uint f32_to_f16(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint e = (x >> 23) & 0xFFu;
  uint m = x & 0x7FFFFFu;
  if (e == 0xFFu) return sign | (m != 0u ? 0x7E00u : 0x7C00u);
  const int ee = int(e) - 112;  // the half's biased exponent
  if (ee >= 31) return sign | 0x7C00u;
  if (ee <= 0) {  // a subnormal half (or zero): h * 2^-24
    if (ee < -10) return sign;
    m |= 0x800000u;
    const uint shift = uint(14 - ee);
    uint h = m >> shift;
    const uint rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (h & 1u) != 0u)) h += 1u;
    return sign | h;
  }
  uint h = (uint(ee) << 10) | (m >> 13);
  const uint rem = m & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;  // a carry rounds up into the exponent
  return sign | h;
}
