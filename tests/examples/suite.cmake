# Every program in examples/ compiles, runs and prints its expected output.
add_test(NAME examples/run
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
          --sflowc $<TARGET_FILE:sflowc> --dir ${CMAKE_SOURCE_DIR}/examples --run)
