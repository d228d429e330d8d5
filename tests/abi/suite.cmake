# The runtime ABI as the compiler sees it (tests/abi/rtabi_test.py): every
# row of compiler/rtabi.h against its prototype in runtime/sflow.h, checked
# by the C compiler that builds sflow, and codegen calling exactly the rows.
add_test(NAME abi/runtime_entry_points
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/abi/rtabi_test.py
          --cc ${CMAKE_C_COMPILER})
# Every std @extern function (stdlib/*.sflow) against the prototype its C
# side declares in a runtime layer header (tests/abi/extern_test.py).
add_test(NAME abi/std_externs
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/abi/extern_test.py
          --cc ${CMAKE_C_COMPILER})
# One definition per op (issue 28, tests/abi/nn_ops_test.py): no backward
# rule, kind list or kind enum of runtime/nn and kernels/ defined twice, no
# device file recording a node, and every kind and device-table entry with
# its CPU and its GPU kernel.
add_test(NAME abi/nn_one_definition
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/abi/nn_ops_test.py)
