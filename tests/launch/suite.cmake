# Runs started by a launcher (tests/launch/launch_test.py): N real processes
# of examples/digits given their ranks as torchrun (by hand), Open MPI's
# mpirun (openmpi-bin; skipped, 77, without it) and srun (its variables by
# hand) give them, against one process with --workers N; a wrong secret
# refused while the run goes on; bad secrets refused before anything
# listens; a program started inside a rank not taken for one.  One ctest
# per case; they share the cluster tests' lock (several processes each,
# on two cores).
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/launch/launch_test.py --list
                OUTPUT_VARIABLE LAUNCH_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" LAUNCH_CASES "${LAUNCH_CASES}")
foreach(c IN LISTS LAUNCH_CASES)
  add_test(NAME launch/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/launch/launch_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(launch/${c} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
                       RESOURCE_LOCK sflow_cluster)
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/tests/launch/launch_test.py)
