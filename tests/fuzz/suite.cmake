# The libFuzzer target over its seed corpus and every saved crasher
# (tests/fuzz/regressions): each input runs once under ASan and UBSan.
# scripts/fuzz.sh builds build/fuzz/fuzz_frontend when it is missing or
# stale (about 15 s on 2 cores) and exits 77, a skip, when clang has no
# fuzzer runtime.
find_program(SFLOW_CLANG clang)
if(SFLOW_CLANG)
  add_test(NAME fuzz/corpus
    COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --check)
  set_tests_properties(fuzz/corpus PROPERTIES
    ENVIRONMENT "BUILD=${CMAKE_BINARY_DIR}"
    SKIP_RETURN_CODE 77 TIMEOUT 240)
endif()
