# libulnic-fi.so: the libfabric provider `ulnic` (host/ofi/README.md), an
# external provider libfabric loads from FI_PROVIDER_PATH. Built only where
# libfabric's headers are (Debian: libfabric-dev, toolchain/install-deps.sh),
# so a machine without them still builds everything else.
find_path(ULNIC_LIBFABRIC_INCLUDE rdma/providers/fi_prov.h)
find_library(ULNIC_LIBFABRIC NAMES fabric)
# Sanitizer builds: ASan+UBSan only. An instrumented provider needs its
# sanitizer's runtime loaded before it: the test program (instrumented) has
# it, libfabric's own programs (fi_info, fi_pingpong) do not, so that build
# runs the provider's tests without them (tests/host/ofi_provider.cmake).
if(ULNIC_SANITIZE AND NOT ULNIC_SANITIZE MATCHES "address")
  message(STATUS "sanitizer build (${ULNIC_SANITIZE}): the ulnic libfabric provider (host/ofi) is not built")
  set(ULNIC_HAVE_LIBFABRIC OFF CACHE INTERNAL "libfabric headers found: host/ofi is built")
elseif(ULNIC_LIBFABRIC_INCLUDE AND ULNIC_LIBFABRIC)
  # A shared library takes the static core and util libraries in: those need
  # position-independent code (no cost worth measuring on x86-64).
  set_target_properties(ulnic_core ulnic_util PROPERTIES POSITION_INDEPENDENT_CODE ON)
  add_library(ulnic_fi SHARED ${CMAKE_CURRENT_LIST_DIR}/getinfo.cpp ${CMAKE_CURRENT_LIST_DIR}/objects.cpp
              ${CMAKE_CURRENT_LIST_DIR}/ep.cpp)
  target_include_directories(ulnic_fi PRIVATE ${ULNIC_LIBFABRIC_INCLUDE})
  target_link_libraries(ulnic_fi PRIVATE ulnic_core ${ULNIC_LIBFABRIC})
  target_compile_options(ulnic_fi PRIVATE -Wall -Wextra)
  # Only fi_prov_ini is exported (exports.map): the core's C++ symbols stay
  # inside (another libulnic in the same process cannot clash with them).
  set_target_properties(ulnic_fi PROPERTIES OUTPUT_NAME ulnic-fi PREFIX lib
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/exports.map)
  target_link_options(ulnic_fi PRIVATE -Wl,--version-script=${CMAKE_CURRENT_LIST_DIR}/exports.map
                      -Wl,--no-undefined)
  set(ULNIC_HAVE_LIBFABRIC ON CACHE INTERNAL "libfabric headers found: host/ofi is built")
  # `cmake --install`: into <prefix>/<libdir>/libfabric, the directory Debian's
  # libfabric searches for external providers when the prefix is /usr
  # (elsewhere FI_PROVIDER_PATH names it; `ulnic mpirun` sets it).
  include(GNUInstallDirs)
  install(TARGETS ulnic_fi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/libfabric)
else()
  message(STATUS "libfabric headers not found: the ulnic libfabric provider (host/ofi) is not built "
                 "(Debian: libfabric-dev, toolchain/install-deps.sh)")
  set(ULNIC_HAVE_LIBFABRIC OFF CACHE INTERNAL "libfabric headers found: host/ofi is built")
endif()
