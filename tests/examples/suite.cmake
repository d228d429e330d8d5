# Every program in examples/ compiles, runs and prints its expected output.
add_test(NAME examples/run
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
          --sflowc $<TARGET_FILE:sflowc> --dir ${CMAKE_SOURCE_DIR}/examples --run)

# examples/pipeline.sflow killed with SIGKILL partway, then --resume'd: the
# resumed run's stdout must equal an uninterrupted run's.
add_test(NAME examples/pipeline_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/resume_check.py
          --sflowc $<TARGET_FILE:sflowc> --example ${CMAKE_SOURCE_DIR}/examples/pipeline.sflow)
set_tests_properties(examples/pipeline_resume PROPERTIES TIMEOUT 300)

# examples/embed.sflow against PyTorch's all-MiniLM-L6-v2 embeddings
# (committed reference vectors, cosine >= 0.9999 per sentence), the token
# ids against tokenizers', and std.bert's bad-input errors.  Needs the
# model scripts/install-models.sh installs (make deps runs it) in
# $SFLOW_MODELS or <build>/models.
add_test(NAME examples/embed
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/embed_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(examples/embed PROPERTIES TIMEOUT 600)
