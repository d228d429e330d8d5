# The language server, driven by a scripted client.
add_test(NAME lsp/client
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/lsp/lsp_test.py $<TARGET_FILE:sflowc>)
# Completion, signature help, references, rename, symbols, hover docs,
# definition into std and formatting, by a scripted client over
# tests/lsp/project; asserts completion within 50 ms on examples/finetune.sflow.
add_test(NAME lsp/features
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/lsp/lsp_features_test.py $<TARGET_FILE:sflowc>)
# The same features through a real client: Neovim 0.7's vim.lsp, headless
# (scripts/install-deps.sh installs neovim).
add_test(NAME lsp/nvim
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/lsp/nvim_test.py $<TARGET_FILE:sflowc>)
# sflowc fmt: the canonical layout on small inputs, the command line, and
# every tracked .sflow file (idempotent; the same IR before and after).
add_test(NAME lsp/fmt
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/lsp/fmt_test.py $<TARGET_FILE:sflowc>)
