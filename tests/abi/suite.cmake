# The runtime ABI as the compiler sees it (tests/abi/rtabi_test.py): every
# row of compiler/rtabi.h against its prototype in runtime/sflow.h, checked
# by the C compiler that builds sflow, and codegen calling exactly the rows.
add_test(NAME abi/runtime_entry_points
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/abi/rtabi_test.py
          --cc ${CMAKE_C_COMPILER})
