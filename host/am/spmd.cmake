# The master of AMUDP SPMD jobs (host/am/spmd_master.cpp): `ulnic run` links
# it, and so does the AM library, whose AMUDP_SPMDStartup makes a program
# that is not a worker the master of a job of itself. It speaks the bootstrap
# protocol (spmd_proto.h) and needs only amudp.h's types, not the AM library.
# Included from host/CMakeLists.txt.
add_library(ulnic_am_spmd_master STATIC ${CMAKE_CURRENT_LIST_DIR}/spmd_master.cpp)
target_include_directories(ulnic_am_spmd_master PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(ulnic_am_spmd_master PRIVATE -Wall -Wextra)
# The master finds the nodes that are up in the cluster's runtime directory
# (common/: ulnic/util/runtime_dir.h, process.h) for the ranks of a native or VIPL
# job that a program started itself.
target_link_libraries(ulnic_am_spmd_master PRIVATE ulnic_util)
