#pragma once
// A hint to the CPU inside a spin-wait loop: x86 `pause`, ARM64 `yield`; nothing elsewhere.

namespace strata {

inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

}  // namespace strata
