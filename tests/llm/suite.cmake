# std.llm and std.tokenizer's byte-level BPE on SmolLM2-135M-Instruct
# (tests/llm/llm_test.py says what each case checks) against the committed
# oracle files of scripts/gen_llm_reference.py: the Python tokenizers'
# ids of a 215 KB corpus from both loaders, the chat template's
# renderings, gguf's dequantized rows, the decoder's logits and greedy
# tokens against transformers', examples/chat.sflow, llm.forward_batch
# against forward row for row, the paged KV cache against the contiguous
# one and its block accounting, a Hugging Face safetensors folder made
# from the GGUF (scripts/gguf_to_hf.sflow) against the GGUF, and bad input.  Needs the model of
# scripts/install-models.sh (make deps installs it).
foreach(c bpe_gguf bpe_json chat gguf bad decoder chat_answer batch paged safetensors)
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
# llm.sample against an independent Python form of Hugging Face's filters
# (tests/llm/sample_test.py): token for token with temperature or top-k
# alone, the kept set and a chi-square with top-p; numpy only, no model.
add_test(NAME llm/sample_hf
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/sample_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(llm/sample_hf PROPERTIES TIMEOUT 300)
# examples/llm_serve.sflow over loopback HTTP (tests/llm/serve_test.py):
# the real openai client streaming a greedy chat answer equal to
# examples/chat.sflow's, 6 concurrent requests each equal to it alone and
# batched together, bad fields answered 400 naming them, a client gone
# mid-stream dropped while another completes.
add_test(NAME llm/serve
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/serve_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(llm/serve PROPERTIES TIMEOUT 600)
# bench/llm/llamacpp.py's serving client (SSE over loopback against a
# paced Python server) and its table with nothing built (no figure
# invented); needs neither llama.cpp nor the model.
add_test(NAME llm/bench_harness
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/llm/bench_harness_test.py
          --root ${CMAKE_SOURCE_DIR})
set_tests_properties(llm/bench_harness PROPERTIES TIMEOUT 120)
