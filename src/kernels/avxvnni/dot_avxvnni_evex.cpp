// The AVX-VNNI kernels in EVEX encoding (compiled with -mavx512vl -mavx512vnni): see
// dot_avxvnni.cpp.
#define STRATA_VNNI_EVEX 1
#include "kernels/avxvnni/dot_avxvnni.cpp"  // NOLINT(bugprone-suspicious-include): one source, two encodings
