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

# kernels/quant.cu against the CPU reference (tests/llm/quant_gpu_check.c):
# on a GPU (llm/quant_gpu, not run without one) and under the host
# emulator of tests/gpu/emu (llm/quant_gpu_emu, everywhere).
add_executable(quant_gpu_check ${CMAKE_SOURCE_DIR}/tests/llm/quant_gpu_check.c)
set_target_properties(quant_gpu_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_link_libraries(quant_gpu_check PRIVATE sflowrt Threads::Threads m dl)
add_dependencies(quant_gpu_check sflow_emu)
add_test(NAME llm/quant_gpu COMMAND quant_gpu_check)
set_tests_properties(llm/quant_gpu PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME llm/quant_gpu_emu COMMAND quant_gpu_check)
set_tests_properties(llm/quant_gpu_emu PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
# quant_matmul on the device: tests/llm/quant_actor.sflow's @gpus(1) actor
# under the host emulator against the CPU product, weights uploaded once.
add_test(NAME llm/gpu_emu
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/llm_test.py
          --sflowc $<TARGET_FILE:sflowc> --case gpu_emu)
set_tests_properties(llm/gpu_emu PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}" TIMEOUT 300)
# bench/llm/llamacpp.py's serving client (SSE over loopback against a
# paced Python server) and its table with nothing built (no figure
# invented); needs neither llama.cpp nor the model.
add_test(NAME llm/bench_harness
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/bench_harness_test.py
          --root ${CMAKE_SOURCE_DIR})
set_tests_properties(llm/bench_harness PROPERTIES TIMEOUT 120)
