# Fast Messages 2.x (host/fm/include/fm.h; what each call does:
# host/fm/SEMANTICS.md) over the NIC's native AM endpoints, on libulnic core.
add_library(ulnic_fm STATIC ${CMAKE_CURRENT_LIST_DIR}/fm.cpp ${CMAKE_CURRENT_LIST_DIR}/bootstrap.cpp)
target_include_directories(ulnic_fm PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(ulnic_fm PUBLIC ulnic_core)
target_compile_options(ulnic_fm PRIVATE -Wall -Wextra)
