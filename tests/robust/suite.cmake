# Adversarial inputs for the front end (tests/robust/robust.py): each case
# must end in a diagnostic or success, exit 0 or 1, within 20 s.  One case
# also runs under valgrind, which must find no "definitely lost" block.
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py --list
                OUTPUT_VARIABLE ROBUST_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" ROBUST_CASES "${ROBUST_CASES}")
foreach(c IN LISTS ROBUST_CASES)
  add_test(NAME robust/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(robust/${c} PROPERTIES TIMEOUT 60)
endforeach()
add_test(NAME robust/special_inputs
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py
          --sflowc $<TARGET_FILE:sflowc> --special-inputs)
add_test(NAME robust/codegen_statements
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py
          --sflowc $<TARGET_FILE:sflowc> --codegen-statements)
find_program(SFLOW_VALGRIND valgrind)
if(SFLOW_VALGRIND)
  add_test(NAME robust/valgrind_many_statements_small
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py
            --sflowc $<TARGET_FILE:sflowc> --valgrind many_statements_small)
  add_test(NAME robust/valgrind_nested_parens
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/robust.py
            --sflowc $<TARGET_FILE:sflowc> --valgrind nested_parens)
  set_tests_properties(robust/valgrind_many_statements_small robust/valgrind_nested_parens
                       PROPERTIES TIMEOUT 300)
  # Every compiled program of tests/run under memcheck (tests/robust/valgrind_run.py).
  add_test(NAME robust/valgrind_run_programs
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/valgrind_run.py
            --sflowc $<TARGET_FILE:sflowc>)
  set_tests_properties(robust/valgrind_run_programs PROPERTIES TIMEOUT 900)
endif()
# What machine code executables hold (tests/robust/target_test.py): the
# portable default has no AVX, -march=native and --target-cpu opt in, bad
# names are usage errors.
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/target_test.py --list
                OUTPUT_VARIABLE TARGET_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" TARGET_CASES "${TARGET_CASES}")
foreach(c IN LISTS TARGET_CASES)
  add_test(NAME robust/target_${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/robust/target_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(robust/target_${c} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
