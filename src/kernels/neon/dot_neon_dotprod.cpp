// The NEON integer-code dots with SDOT (compiled with +dotprod): see dot_neon.cpp.
#define STRATA_NEON_NS neon_dotprod
#include "kernels/neon/dot_neon.cpp"  // NOLINT(bugprone-suspicious-include): one source, two ISAs
