# Editor support: the VS Code TextMate grammar, the Vim files and the shared
# keyword list (grammar/, docs/editors.md).  Only editors/vscode needs sflowc.
# editors/textmate needs scripts/install-pydeps.sh to have run (make deps does);
# editors/vim needs vim (scripts/install-deps.sh installs vim-nox).
add_test(NAME editors/textmate
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/editors/tmgrammar_test.py
          --grammar ${CMAKE_SOURCE_DIR}/grammar/vscode/syntaxes/sflow.tmLanguage.json
          ${CMAKE_SOURCE_DIR}/tests/editors/syntax)
add_test(NAME editors/vim
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/editors/vim_test.py)
add_test(NAME editors/keywords
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/editors/keywords_test.py)
# The VS Code extension folder: a packageable manifest, and extension.js
# activated under node (a stand-in for the host API) starting the real
# sflowc --lsp (scripts/install-deps.sh installs nodejs).
add_test(NAME editors/vscode
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/editors/vscode_test.py $<TARGET_FILE:sflowc>)
