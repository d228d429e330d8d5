# bench/gpu/nn_check.sflow, the std.nn op checker of bench/gpu/run.sh
# (tests/gpu/nn_check.py).  gpu/nn_check_compare runs everywhere: both
# sides on the CPU (SFLOW_NO_GPU=1), every row identical, and the
# comparison catching a value moved by 3 tolerances, an index off by one
# and a NaN.
add_test(NAME gpu/nn_check_compare
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_check.py
          --sflowc $<TARGET_FILE:sflowc> --mode compare)
# gpu_emu/nn_check: the same checker under the host emulator (tests/gpu/emu,
# its SFLOW_EMU_ENV), at --n 8: the actor's side must launch kernels and
# every row, labelled "emulator", be within its tolerance.
if(TARGET sflow_emu)
  add_test(NAME gpu_emu/nn_check
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_check.py
            --sflowc $<TARGET_FILE:sflowc> --mode emulator)
  set_tests_properties(gpu_emu/nn_check PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
endif()
