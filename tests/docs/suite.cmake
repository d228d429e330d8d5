# docs/architecture.md names every source file of compiler/, runtime/,
# kernels/ and stdlib/ (tests/docs/sources_test.py).
add_test(NAME docs/sources_named
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/docs/sources_test.py
          --root ${CMAKE_SOURCE_DIR})
