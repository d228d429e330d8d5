# The language server, driven by a scripted client.
add_test(NAME lsp/client
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/lsp/lsp_test.py $<TARGET_FILE:sflowc>)
