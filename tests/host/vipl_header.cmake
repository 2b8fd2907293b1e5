# vipl.h conformance (not test_*.cpp: those are GoogleTest files), all at compile time (no library needed): every type,
# constant, layout and prototype of VIPL 1.0 (APIS.md "VIPL 1.0"), checked as C99
# and as C++; and a textbook VIPL client/server that must compile unchanged,
# as C99 and as C++ (host/vipl/example/vipl_example.c, which also runs). Paths are relative to this file,
# so it can be included from anywhere.
add_executable(test_vipl_header_c ${CMAKE_CURRENT_LIST_DIR}/vipl_header_check.c)
target_link_libraries(test_vipl_header_c PRIVATE ulnic_vipl_headers)
set_target_properties(test_vipl_header_c PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(test_vipl_header_c PRIVATE -Wall -Wextra -pedantic -Werror)

add_executable(test_vipl_header_cpp ${CMAKE_CURRENT_LIST_DIR}/vipl_header_check.cpp)
target_link_libraries(test_vipl_header_cpp PRIVATE ulnic_vipl_headers)
target_compile_options(test_vipl_header_cpp PRIVATE -Wall -Wextra -Werror)

add_test(NAME host.vipl_header_c COMMAND test_vipl_header_c)
add_test(NAME host.vipl_header_cpp COMMAND test_vipl_header_cpp)
set_tests_properties(host.vipl_header_c host.vipl_header_cpp PROPERTIES LABELS host)

# The textbook client/server (host/vipl/example/vipl_example.c, built as
# C99 there) compiles unchanged as C++ too (a source file has one language
# per directory, so a generated .cpp includes it), and links.
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/vipl_example_cxx.cpp
     CONTENT "#include \"@CMAKE_CURRENT_LIST_DIR@/../../host/vipl/example/vipl_example.c\"\n" @ONLY)
add_executable(vipl_example_cxx ${CMAKE_CURRENT_BINARY_DIR}/vipl_example_cxx.cpp)
target_link_libraries(vipl_example_cxx PRIVATE ulnic_vipl)
target_compile_options(vipl_example_cxx PRIVATE -Wall -Wextra -Werror)
