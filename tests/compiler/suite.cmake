# The compiler's own structure (tests/compiler/files_test.py): nm of the
# front end's library shows the files call one way (no cycle, and the
# generic sema/codegen files reach the domain files only through their
# tables), and no compiler source is over 1,200 lines.
add_test(NAME compiler/files_call_one_way
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/compiler/files_test.py
          --nm ${CMAKE_NM} --lib $<TARGET_FILE:sflowfront> --src ${CMAKE_SOURCE_DIR}/compiler)
