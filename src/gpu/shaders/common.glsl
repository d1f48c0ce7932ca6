// Byte access to a weight buffer bound as 32-bit words (binding 0, `w`): quant blocks are
// 17, 18, 34, 210... bytes long, so fields sit at any byte offset. Portable (no 8/16-bit
// storage needed); a word is read only when a byte the caller asked for lies in it.
uint rd8(uint o) { return (w[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
uint rd16(uint o) {
  if ((o & 1u) == 0u) return (w[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu;
  return rd8(o) | (rd8(o + 1u) << 8);
}
uint rd32(uint o) {
  const uint s = (o & 3u) * 8u;
  if (s == 0u) return w[o >> 2];
  return (w[o >> 2] >> s) | (w[(o >> 2) + 1u] << (32u - s));
}
float f16at(uint o) { return unpackHalf2x16(rd16(o)).x; }
// Byte j (0..3) of a word as a signed value.
int sbyte(uint q, uint j) { return int(q << (24u - 8u * j)) >> 24; }
