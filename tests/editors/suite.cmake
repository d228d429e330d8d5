# Editor support: the VS Code TextMate grammar, the Vim files and the shared
# keyword list (grammar/, docs/editors.md).  None of these needs sflowc.
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
