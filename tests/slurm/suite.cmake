# Slurm tests (tests/slurm/slurm_test.py; the harness in harness.py): a
# private, real Slurm 22.05 on this host (munged on its own socket,
# slurmctld and slurmd with a temp slurm.conf), started and torn down by
# each case (srun_2nodes_digits_4: two nodes, the second slurmd in a
# network namespace the harness makes and removes).  No skips: without the
# packages (scripts/install-deps.sh) or root a case fails saying why.  The cases share the cluster lock: they
# start daemons and time a mid-run signal.
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/slurm/slurm_test.py --list
                OUTPUT_VARIABLE SLURM_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" SLURM_CASES "${SLURM_CASES}")
foreach(c IN LISTS SLURM_CASES)
  add_test(NAME slurm/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/slurm/slurm_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(slurm/${c} PROPERTIES TIMEOUT 120 RESOURCE_LOCK sflow_cluster)
endforeach()
file(GLOB SLURM_TEST_SOURCES ${CMAKE_SOURCE_DIR}/tests/slurm/*.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SLURM_TEST_SOURCES})
