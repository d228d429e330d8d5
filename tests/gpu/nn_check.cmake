# bench/gpu/nn_check.sflow, the std.nn op checker of bench/gpu/run.sh
# (tests/gpu/nn_check.py).  gpu/nn_check_compare runs everywhere: both
# sides on the CPU (SFLOW_NO_GPU=1), every row identical, and the
# comparison catching a value moved by 3 tolerances, an index off by one
# and a NaN.
add_test(NAME gpu/nn_check_compare
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_check.py
          --sflowc $<TARGET_FILE:sflowc> --mode compare)
