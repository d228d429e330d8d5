# std.nn against PyTorch (tests/nn/README.md).  The fixtures are committed,
# so neither test needs PyTorch to be installed:
# nn/fixture_checker proves tests/nn/check_fixtures.py passes the fixtures'
# own values and catches every kind of wrong answer (about 2 s);
# nn/fixtures_torch regenerates the fixtures and compares bytes, and runs
# torch in float32 through the checker; skipped (77) until
# bench/nn/setup.sh has made build/peers/torch (network, once).
add_test(NAME nn/fixture_checker
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/check_fixtures_test.py)
add_test(NAME nn/fixtures_torch
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/check_fixtures_test.py
          --torch-only --torch ${CMAKE_BINARY_DIR}/peers/torch)
set_tests_properties(nn/fixtures_torch PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# std.nn's own answers against the PyTorch fixtures: tests/nn/sflow_runner.py
# writes one sflow program per fixture (the case's inputs as params, its
# sflow expression, backward of (output * upstream).sum()), and
# check_fixtures.py compares output and every gradient within the fixture's
# tolerance: every op, SGD with momentum and AdamW trajectories, and two
# training steps of a Linear-relu-Linear model (loss, gradients, weights).
# CONFIGURE_DEPENDS: a fixture the generator adds joins the test without a
# manual reconfigure (new fixtures were silently left out before).
file(GLOB NN_OP_FIXTURES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/nn/fixtures/*.json)
list(FILTER NN_OP_FIXTURES EXCLUDE REGEX "safetensors\\.json$")
add_test(NAME nn/fixtures_sflow
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/check_fixtures.py
          --runner "${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/sflow_runner.py --sflowc $<TARGET_FILE:sflowc> {fixture}"
          ${NN_OP_FIXTURES})
set_tests_properties(nn/fixtures_sflow PROPERTIES TIMEOUT 300)
# A file nn.save writes (the Hugging Face fixture loaded and saved again)
# read by Python alone, held to the format, every name, shape and value exact.
add_test(NAME nn/save_interop
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/save_interop_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# nn.load against hand-made safetensors files the format forbids (a header
# length one byte short or long, overlapping offsets, a gap, trailing
# bytes, a bad dtype, bad JSON or UTF-8, a name twice, ...): each refused
# naming the file and why; the allowed variants load their values.
add_test(NAME nn/safetensors_bad
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/safetensors_bad_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# nn.save with dtype bf16 and f16 writes torch's bytes for torch's file of
# edge cases and random values (fixtures/halves.safetensors, written by
# scripts/gen_nn_fixtures.py), nn.load reads torch's BF16 and F16 exactly,
# and nn.round_bf16 gives torch's bf16 values (Python alone);
# nn/save_halves_torch also has safetensors.torch read sflow's files,
# skipped (77) until bench/nn/setup.sh has made build/peers/torch.
add_test(NAME nn/save_halves
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/save_halves_test.py
          --sflowc $<TARGET_FILE:sflowc>)
add_test(NAME nn/save_halves_torch
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/save_halves_test.py
          --sflowc $<TARGET_FILE:sflowc> --torch ${CMAKE_BINARY_DIR}/peers/torch/venv/bin/python)
set_tests_properties(nn/save_halves_torch PROPERTIES SKIP_RETURN_CODE 77)
# std.train's FSDP units (shard "parameters" with train.start_units): the
# step's peak within 10% of train.plan_units, below "gradients" with 2 and
# 4 members, and under the issue's bound per worker (a quarter of the
# state plus the largest unit); one process per case, about 2 s.
add_test(NAME nn/units_memory
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/nn/units_memory_test.py
          --sflowc $<TARGET_FILE:sflowc>)
