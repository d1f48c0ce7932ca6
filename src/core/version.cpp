#include "core/version.h"

namespace strata {

const char* strata_version() { return STRATA_VERSION; }

#if defined(__clang__)
const char* compiler_version() { return "clang++ " __clang_version__; }
#else
const char* compiler_version() { return "g++ " __VERSION__; }
#endif

}  // namespace strata
