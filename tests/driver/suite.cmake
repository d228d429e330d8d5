# The compiler driver's own output (tests/driver/): --version names the
# commit, the LLVM version and the default target.
add_test(NAME driver/version
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/driver/version_test.py
          --sflowc $<TARGET_FILE:sflowc> --llvm-version ${LLVM_PACKAGE_VERSION})
