# One helper for libraries and one for tests, so every target is declared the
# same way: explicit sources, PUBLIC/PRIVATE dependencies, includes rooted at src/.

# spot_cc_library(NAME name SRCS ... [DEPS ...] [PRIVATE_DEPS ...])
function(spot_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# spot_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...] [TIMEOUT seconds per test case])
# One executable per library keeps link time down (LibTorch links are slow).
function(spot_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${ARG_NAME} PRIVATE
    SPOT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    SPOT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  # One ctest entry per test case, so `ctest -j` runs slow end-to-end cases side by side.
  gtest_discover_tests(${ARG_NAME}
    TEST_PREFIX "${ARG_NAME}."
    DISCOVERY_TIMEOUT 120
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
