# Fast Messages 2.x (host/fm/include/fm.h; what each call does:
# host/fm/SEMANTICS.md) over the NIC's native AM endpoints, on libulnic core.
add_library(ulnic_fm STATIC ${CMAKE_CURRENT_LIST_DIR}/fm.cpp ${CMAKE_CURRENT_LIST_DIR}/fiber.cpp
            ${CMAKE_CURRENT_LIST_DIR}/bootstrap.cpp)
target_include_directories(ulnic_fm PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(ulnic_fm PUBLIC ulnic_core)
target_compile_options(ulnic_fm PRIVATE -Wall -Wextra)

# Layers over FM's public API (host/fm/LAYERS.md): Split-C style global
# memory (fm_gm.h) and an MPI-like message-passing layer (fm_mp.h).
add_library(ulnic_fm_gm STATIC ${CMAKE_CURRENT_LIST_DIR}/gm.cpp)
target_link_libraries(ulnic_fm_gm PUBLIC ulnic_fm)
target_compile_options(ulnic_fm_gm PRIVATE -Wall -Wextra)
add_library(ulnic_fm_mp STATIC ${CMAKE_CURRENT_LIST_DIR}/mp.cpp)
target_link_libraries(ulnic_fm_mp PUBLIC ulnic_fm)
target_compile_options(ulnic_fm_mp PRIVATE -Wall -Wextra)
