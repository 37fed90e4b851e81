# A static prima for one Linux architecture (PRIMA_TARGET_ARCH: aarch64 or x86_64) with Debian's
# compiler for it (gcc-aarch64-linux-gnu across; the native one for this machine's) and the
# multiarch development packages of that architecture: scripts/cross.sh.
if(NOT PRIMA_TARGET_ARCH)
  set(PRIMA_TARGET_ARCH $ENV{PRIMA_TARGET_ARCH})
endif()
set(ENV{PRIMA_TARGET_ARCH} ${PRIMA_TARGET_ARCH})   # for the compiler checks' own projects
set(triple ${PRIMA_TARGET_ARCH}-linux-gnu)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${PRIMA_TARGET_ARCH})
set(CMAKE_C_COMPILER ${triple}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${triple})
# Libraries and headers of that architecture only; programs (glslc, node) from this machine.
set(CMAKE_FIND_ROOT_PATH /usr/${triple} /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${triple}/pkgconfig:/usr/share/pkgconfig)
# Tests of another architecture run under qemu-user where it is installed (ctest; cross.sh).
cmake_host_system_information(RESULT host_arch QUERY OS_PLATFORM)
if(NOT host_arch STREQUAL PRIMA_TARGET_ARCH)
  find_program(PRIMA_QEMU qemu-${PRIMA_TARGET_ARCH})
  if(PRIMA_QEMU)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${PRIMA_QEMU})
  endif()
endif()
