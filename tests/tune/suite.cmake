# std.tune against tests/tune/tune_test.py's own implementation: the
# configurations bit for bit, ASHA's (Ray's rule), median stopping's and
# FIFO's decisions one by one, @retry and failed trials, bad spaces, and
# SIGKILL + --resume at several points with the uninterrupted output.
add_test(NAME tune/sweep
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tune/tune_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(tune/sweep PROPERTIES TIMEOUT 600)
