# Cross-compiling for 64-bit ARM Linux with Debian's cross compiler (gcc-aarch64-linux-gnu) and
# the arm64 multiarch development packages (dpkg --add-architecture arm64): scripts/cross.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries and headers from the arm64 packages only; programs (glslc, node) from this machine.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# Tests run under qemu-user where it is installed (qemu-aarch64 finds its libraries here).
find_program(PRIMA_QEMU_AARCH64 qemu-aarch64)
if(PRIMA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PRIMA_QEMU_AARCH64};-L;/usr/aarch64-linux-gnu)
endif()
