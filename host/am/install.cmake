# `cmake --install` for AM-2 (included from host/CMakeLists.txt, after the
# VIPL block: libulnic_vipl, libulnic_core and libulnic_util, which the AM
# library stands on, are installed there).
#   include/amudp.h, include/amudp_spmd.h
#   lib/libulnic_am.a, lib/libulnic_am_spmd_master.a (master mode of
#     AMUDP_SPMDStartup: a static archive, so programs link it themselves)
#   lib/pkgconfig/am.pc            pkg-config --cflags --libs am (Requires: vipl)
#   lib/cmake/am/amConfig.cmake    find_package(am), target am::am
#   bin/ulnic                      `ulnic run`, the SPMD launcher
# Tested by tests/integration/test_install.py.
include(GNUInstallDirs)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/include/amudp.h ${CMAKE_CURRENT_LIST_DIR}/include/amudp_spmd.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ulnic_am ulnic_am_spmd_master ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ulnic RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
configure_file(${CMAKE_CURRENT_LIST_DIR}/install/am.pc.in ${CMAKE_CURRENT_BINARY_DIR}/am.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/install/amConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/amConfig.cmake @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/am.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/amConfig.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/am)
