# U-Net (host/unet/include/unet.h): endpoints, channels through the node
# daemon, sends from the segment or inline, receive and free queues.
add_library(ulnic_unet STATIC ${CMAKE_CURRENT_LIST_DIR}/unet.cpp)
target_include_directories(ulnic_unet PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(ulnic_unet PUBLIC ulnic_core)
target_compile_options(ulnic_unet PRIVATE -Wall -Wextra)

# `cmake --install`: include/unet.h, lib/libulnic_unet.a (beside libulnic_core
# and libulnic_util, installed with VIPL), lib/pkgconfig/unet.pc
# (pkg-config --cflags --libs unet), lib/cmake/unet/unetConfig.cmake
# (find_package(unet), target unet::unet). Tested by tests/integration/test_install.py.
install(FILES ${CMAKE_CURRENT_LIST_DIR}/include/unet.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ulnic_unet ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
configure_file(${CMAKE_CURRENT_LIST_DIR}/install/unet.pc.in ${CMAKE_CURRENT_BINARY_DIR}/unet.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/install/unetConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/unetConfig.cmake @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/unet.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/unetConfig.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/unet)
