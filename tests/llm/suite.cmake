# std.llm and std.tokenizer's byte-level BPE on SmolLM2-135M-Instruct
# (tests/llm/llm_test.py says what each case checks) against the committed
# oracle files of scripts/gen_llm_reference.py: the Python tokenizers'
# ids of a 215 KB corpus from both loaders, the chat template's
# renderings, gguf's dequantized rows, and bad input.  Needs the model of
# scripts/install-models.sh (make deps installs it).
foreach(c bpe_gguf bpe_json chat gguf bad)
  add_test(NAME llm/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/llm_test.py
            --sflowc $<TARGET_FILE:sflowc> --case ${c})
  set_tests_properties(llm/${c} PROPERTIES TIMEOUT 300)
endforeach()
