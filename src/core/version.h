#pragma once
// The release this binary was built from, and the compiler that built it.

namespace strata {

const char* strata_version();   // "0.1.0"
const char* compiler_version();  // "g++ 12.2.0"

}  // namespace strata
