# Multi-node tests (tests/cluster/cluster_test.py, its case table; the
# harness in harness.py, the cases by topic in cases_*.py): real sshd servers on
# loopback addresses 127.0.0.2..5 (netns_*: in network namespaces behind
# veth pairs), keys generated per test, the real executable started with
# --nodes.  One ctest per case; a case exits 77 (a skip) when
# openssh-server is missing, and a netns_* case also without root or
# network namespaces.  The cases share one lock: they
# measure detection times and start several processes each, which two
# cores cannot run side by side without skewing the clocks they check.
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cluster/cluster_test.py --list
                OUTPUT_VARIABLE CLUSTER_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" CLUSTER_CASES "${CLUSTER_CASES}")
foreach(c IN LISTS CLUSTER_CASES)
  add_test(NAME cluster/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cluster/cluster_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(cluster/${c} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
                       RESOURCE_LOCK sflow_cluster)
endforeach()
# New cases appear without a manual re-configure.
file(GLOB CLUSTER_TEST_SOURCES ${CMAKE_SOURCE_DIR}/tests/cluster/*.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CLUSTER_TEST_SOURCES})
# A --nodes run under a forced BLAS kernel computes the single-node run's
# bits: the head passes OPENBLAS_CORETYPE to its workers (docs/cluster.md,
# "Environment"); sshd passes no environment of its own.
add_test(NAME cluster/rl_runners_nodes_Haswell
  COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_CORETYPE=Haswell
          ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cluster/cluster_test.py
          --sflowc $<TARGET_FILE:sflowc> rl_runners_nodes)
set_tests_properties(cluster/rl_runners_nodes_Haswell PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
                     RESOURCE_LOCK sflow_cluster)
# The cluster layer's sides call one way (net <- proto <- head, worker;
# docs/cluster.md, "Source layout"): nm over its objects and the includes
# of its sources (tests/cluster/sides_test.py).
add_test(NAME cluster/sides_one_way
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cluster/sides_test.py
          --nm ${CMAKE_NM} --src ${CMAKE_SOURCE_DIR}/runtime/cluster
          $<TARGET_OBJECTS:sflowrt_cluster_obj>
  COMMAND_EXPAND_LISTS)
