#pragma once
// The 256-bit VNNI kernels (dot_avxvnni.cpp), in VEX (AVX-VNNI) and EVEX (AVX-512 VL VNNI)
// encodings: each fills the formats it covers into a table copied from the AVX2 one.
namespace strata {
struct KernelTable;
namespace avxvnni {
void fill_kernels(KernelTable& t);
}
namespace avxvnni_evex {
void fill_kernels(KernelTable& t);
}
}  // namespace strata
