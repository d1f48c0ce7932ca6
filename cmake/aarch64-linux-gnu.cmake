# Cross build for ARM64 Linux from x86-64 Debian (scripts/install-deps.sh --arm64 installs the
# toolchain and the :arm64 libraries):
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# Test binaries run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR), so ctest and gtest discovery
# work as natively; QEMU_CPU picks the emulated CPU (e.g. cortex-a53: no dotprod; max: all).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Debian multiarch: the :arm64 libraries live in /usr/lib/aarch64-linux-gnu beside the host's,
# their headers in /usr/include (CMAKE_LIBRARY_ARCHITECTURE points find_library / find_package
# there); pkg-config reads the target's .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
find_program(STRATA_QEMU_AARCH64 qemu-aarch64-static)
if(STRATA_QEMU_AARCH64)
  # The target's dynamic loader and libraries: Debian's libc6:arm64 (multiarch) puts them under /.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${STRATA_QEMU_AARCH64})
endif()
