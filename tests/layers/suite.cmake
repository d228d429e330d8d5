# The runtime's layers call only down: nm of each layer's library against
# the DAG of CMakeLists.txt (SFLOW_RT_BELOW_*; tests/layers/layers_test.py).
set(SFLOW_LAYER_ARGS "")
foreach(layer IN LISTS SFLOW_RT_LAYERS)
  string(REPLACE ";" "," below "${SFLOW_RT_BELOW_${layer}}")
  list(APPEND SFLOW_LAYER_ARGS --layer "${layer}=${below}:$<TARGET_FILE:sflowrt_${layer}>")
endforeach()
add_test(NAME layers/calls_go_down
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/layers/layers_test.py
          --nm ${CMAKE_NM} ${SFLOW_LAYER_ARGS})
# And they include only down: probes compiled with each layer's own command
# line (compile_commands.json) find the headers of the layers below and not
# those above (tests/layers/includes_test.py).
set(SFLOW_INCLUDE_ARGS "")
foreach(layer IN LISTS SFLOW_RT_LAYERS)
  string(REPLACE ";" "," below "${SFLOW_RT_BELOW_${layer}}")
  list(APPEND SFLOW_INCLUDE_ARGS --layer "${layer}=${below}")
endforeach()
add_test(NAME layers/includes_go_down
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/layers/includes_test.py
          --compile-db ${CMAKE_BINARY_DIR}/compile_commands.json ${SFLOW_INCLUDE_ARGS})
