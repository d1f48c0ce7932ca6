/* An object compiled with -mavx2 outside the per-ISA kernels: scripts/check-isa.sh must reject it
 * (the CheckIsa tests in tests/CMakeLists.txt). */
void strata_isa_leak_probe(float* restrict y, const float* restrict a, const float* restrict b, int n) {
  for (int i = 0; i < n; ++i) y[i] = a[i] * b[i] + y[i];
}
