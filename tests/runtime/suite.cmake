# The task runtime seen from outside: real processes killed with SIGKILL
# and resumed, and the trace, progress and summary output.
add_test(NAME runtime/fault_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/fault_test.py
          --sflowc $<TARGET_FILE:sflowc>)
add_test(NAME runtime/observe
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/observe_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/fault_resume PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
