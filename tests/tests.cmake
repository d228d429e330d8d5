# Test registration.  Every test runs alone by name: `ctest -R NAME`, or the
# runner scripts directly (see docs/testing.md).
find_package(Python3 COMPONENTS Interpreter REQUIRED)

# CUnit unit tests: each tests/unit/test_*.c is one executable and one test.
# Files named test_rt_*.c link the runtime: the layer they test and those
# below it only (CMakeLists.txt, "runtime"), so that a core test that
# reached the scheduler, the GPU or the cluster would not link; the others
# link the front end.  test_rt_flags includes main.c, the top: all of it.
set(RT_TEST_LAYER_test_rt_strings core)
set(RT_TEST_LAYER_test_rt_fmtfloat core)
set(RT_TEST_LAYER_test_rt_mem core)
set(RT_TEST_LAYER_test_rt_print core)
set(RT_TEST_LAYER_test_rt_errors core)
set(RT_TEST_LAYER_test_rt_builtins core)
set(RT_TEST_LAYER_test_rt_map core)
set(RT_TEST_LAYER_test_rt_gpu gpu)
set(RT_TEST_LAYER_test_rt_nccl gpu)
set(RT_TEST_LAYER_test_rt_gpualloc gpu)
set(RT_TEST_LAYER_test_rt_hostfile cluster)
set(RT_TEST_LAYER_test_rt_sshconfig cluster)
set(RT_TEST_LAYER_test_rt_knownhosts cluster)
set(RT_TEST_LAYER_test_rt_wire cluster)
set(RT_TEST_LAYER_test_rt_ring cluster)
set(RT_TEST_LAYER_test_rt_remote cluster)
set(RT_TEST_LAYER_test_rt_launch cluster)
set(RT_TEST_LAYER_test_rt_data data)
set(RT_TEST_LAYER_test_rt_nn nn)
set(RT_TEST_LAYER_test_rt_llm nn)
set(RT_TEST_LAYER_test_rt_nn_layers nn)
set(RT_TEST_LAYER_test_rt_custom nn)
set(RT_TEST_LAYER_test_rt_nn_device nn)
set(RT_TEST_LAYER_test_rt_nn_layers_gpu nn)
set(RT_TEST_LAYER_test_rt_serve serve)
file(GLOB UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src IN LISTS UNIT_TESTS)
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(name MATCHES "^test_rt_")
    if(DEFINED RT_TEST_LAYER_${name})
      target_link_libraries(${name} PRIVATE sflowrt_${RT_TEST_LAYER_${name}} ${CUNIT_LIB}
                            Threads::Threads m dl)
    else()
      target_link_libraries(${name} PRIVATE sflowrt ${CUNIT_LIB} Threads::Threads m dl)
    endif()
  else()
    target_link_libraries(${name} PRIVATE sflowfront ${CUNIT_LIB})
  endif()
  add_test(NAME unit/${name} COMMAND ${name})
endforeach()
# test_rt_flags includes runtime/main.c itself.
target_compile_options(test_rt_flags PRIVATE "SHELL:-iquote ${CMAKE_SOURCE_DIR}/runtime")

# Golden and run tests: one ctest per folder of tests/golden and tests/run.
file(GLOB GOLDEN_DIRS LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/tests/golden/*)
foreach(dir IN LISTS GOLDEN_DIRS)
  if(IS_DIRECTORY ${dir})
    get_filename_component(name ${dir} NAME)
    add_test(NAME golden/${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
              --sflowc $<TARGET_FILE:sflowc> --dir ${dir})
  endif()
endforeach()
add_test(NAME golden/llvm_normalize
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llvm_normalize_test.py)
file(GLOB RUN_DIRS LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/tests/run/*)
foreach(dir IN LISTS RUN_DIRS)
  if(IS_DIRECTORY ${dir})
    get_filename_component(name ${dir} NAME)
    add_test(NAME run/${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
              --sflowc $<TARGET_FILE:sflowc> --dir ${dir} --run)
  endif()
endforeach()

# Extra suites drop a tests/<suite>/suite.cmake to register themselves
# (editor grammars, examples, fuzz corpus, ...).
file(GLOB SUITES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/suite.cmake)
foreach(s IN LISTS SUITES)
  include(${s})
endforeach()

# OpenBLAS for f32 products (SFLOW_BLAS=openblas; the default is sflow's
# own GEMM): the product split over the pool under each OpenBLAS kernel it
# is measured on (tests/unit/blas_cores_test.py runs unit/test_rt_nn's
# sgemm_split with OPENBLAS_CORETYPE set to each), and the bitwise tests
# under the Haswell and Zen kernels, whose 12-row blocks a 16-row block
# edge used to cut (issue 26).  Each sets OPENBLAS_CORETYPE itself, so the
# caller's does not matter.
add_test(NAME unit/blas_cores
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/unit/blas_cores_test.py
          --unit $<TARGET_FILE:test_rt_nn>)
set_tests_properties(unit/blas_cores PROPERTIES TIMEOUT 600)
foreach(core Haswell Zen)
  add_test(NAME unit/test_rt_nn_${core} COMMAND test_rt_nn)
  add_test(NAME unit/test_rt_nn_layers_${core} COMMAND test_rt_nn_layers)
  add_test(NAME runtime/nn_resume_${core}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/nn_resume_test.py
            --sflowc $<TARGET_FILE:sflowc>)
  add_test(NAME runtime/group_split_${core}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/group_split_test.py
            --sflowc $<TARGET_FILE:sflowc>)
  set_tests_properties(unit/test_rt_nn_${core} unit/test_rt_nn_layers_${core} runtime/nn_resume_${core}
                       runtime/group_split_${core} PROPERTIES ENVIRONMENT
                       "OPENBLAS_CORETYPE=${core};SFLOW_BLAS=openblas")
endforeach()

# sflow's own GEMM (runtime/gpu/gemm.c, the default) bitwise the one fma
# chain per element under each kernel (one the CPU lacks falls back to the
# best it has, so each still runs), over 1, 2 and 3 threads; and the nn
# tests with every f32 product on OpenBLAS (SFLOW_BLAS=openblas), which
# stays a choice.
foreach(isa avx512 avx2 portable)
  add_test(NAME unit/test_rt_nn_gemm_${isa} COMMAND test_rt_nn sgemm_sflow)
  set_tests_properties(unit/test_rt_nn_gemm_${isa} PROPERTIES ENVIRONMENT SFLOW_GEMM_ISA=${isa}
                       SKIP_RETURN_CODE 77)
endforeach()
add_test(NAME unit/test_rt_nn_openblas COMMAND test_rt_nn)
add_test(NAME unit/test_rt_nn_layers_openblas COMMAND test_rt_nn_layers)
set_tests_properties(unit/test_rt_nn_openblas unit/test_rt_nn_layers_openblas
                     PROPERTIES ENVIRONMENT SFLOW_BLAS=openblas)
