# GPU suite.  gpu/nvrtc_all compiles every kernel with NVRTC (no GPU
# needed); the others need a GPU and exit 77 without one, which ctest
# reports as "not run" (SKIP_RETURN_CODE), never as passed.
add_executable(nvrtc_check ${CMAKE_SOURCE_DIR}/tests/gpu/nvrtc_check.c)
add_executable(gpu_check ${CMAKE_SOURCE_DIR}/tests/gpu/gpu_check.c)
add_executable(nccl_check ${CMAKE_SOURCE_DIR}/tests/gpu/nccl_check.c)
foreach(t nvrtc_check gpu_check nccl_check)
  set_target_properties(${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${t} PRIVATE sflowrt Threads::Threads m dl)
endforeach()
add_test(NAME gpu/nvrtc_all
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nvrtc_all.py
          --sflowc $<TARGET_FILE:sflowc> --check $<TARGET_FILE:nvrtc_check>)
add_test(NAME gpu/library_kernels COMMAND gpu_check)
add_test(NAME gpu/programs
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc>)
# Two processes as two NCCL ranks: exact results, a dead and a stopped peer.
add_test(NAME gpu/nccl COMMAND nccl_check)
set_tests_properties(gpu/nvrtc_all gpu/library_kernels gpu/programs gpu/nccl
  PROPERTIES SKIP_RETURN_CODE 77)
# The same programs through the CPU versions of their kernels, with their
# exact expected output: this part runs everywhere.
add_test(NAME run/gpu-programs-cpu
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
          --sflowc $<TARGET_FILE:sflowc> --dir ${CMAKE_SOURCE_DIR}/tests/gpu/programs --run)
set_tests_properties(run/gpu-programs-cpu PROPERTIES ENVIRONMENT "SFLOW_NO_GPU=1")
# A stand-in for libnccl.so.2 so that unit/test_rt_nccl can drive the NCCL
# watchdog without a GPU (tests/gpu/fake_nccl.c).
add_library(sflow_fake_nccl MODULE ${CMAKE_SOURCE_DIR}/tests/gpu/fake_nccl.c)
set_target_properties(sflow_fake_nccl PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
                      PREFIX lib C_VISIBILITY_PRESET default)
add_dependencies(test_rt_nccl sflow_fake_nccl)
# The scheduler's run tests pin the behaviour without a GPU (@gpus work on
# the CPU after a notice, --require-gpu an error): keep them so on a
# machine that has one, now that gpu.c reports its devices to @gpus.
set_tests_properties(run/scheduler PROPERTIES ENVIRONMENT "SFLOW_NO_GPU=1")
# The host emulator (tests/gpu/emu): one library that stands in for
# libcuda.so.1, NVRTC and cuBLAS, so that the GPU paths and the real kernel
# sources run here without a GPU.  It is a test tool, never reported as a
# GPU; the gpu_emu/ tests below are the GPU tests under it.
set(SFLOW_EMU_SOURCES emu.c emu_nvrtc.c emu_launch.c emu_blas.c emu_nccl.c)
list(TRANSFORM SFLOW_EMU_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/tests/gpu/emu/)
add_library(sflow_emu MODULE ${SFLOW_EMU_SOURCES})
target_compile_definitions(sflow_emu PRIVATE
  SF_EMU_SHIM="${CMAKE_SOURCE_DIR}/tests/gpu/emu/cuda_shim.h")
set_source_files_properties(${CMAKE_SOURCE_DIR}/tests/gpu/emu/emu_nvrtc.c PROPERTIES
  OBJECT_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/emu/cuda_shim.h)
set_target_properties(sflow_emu PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
                      PREFIX lib C_VISIBILITY_PRESET hidden)
target_link_libraries(sflow_emu PRIVATE Threads::Threads dl m)
# The environment that puts a program under the emulator; the module cache
# in the build tree keeps compiled kernel modules across runs.
set(SFLOW_EMU_ENV
  "SFLOW_CUDA=$<TARGET_FILE:sflow_emu>"
  "SFLOW_NVRTC=$<TARGET_FILE:sflow_emu>"
  "SFLOW_CUBLAS=$<TARGET_FILE:sflow_emu>"
  "SFLOW_KERNEL_CACHE=${CMAKE_BINARY_DIR}/tests/emu-kernel-cache"
  "SFLOW_NCCL=off")
add_test(NAME gpu_emu/library_kernels COMMAND gpu_check)
set_tests_properties(gpu_emu/library_kernels PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
add_dependencies(gpu_check sflow_emu)
# Every GPU test program and run/kernels program under the emulator:
# output identical to the CPU run, transfer counters as the programs state.
add_test(NAME gpu_emu/programs
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>)
set_tests_properties(gpu_emu/programs PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
# The group collectives again with two emulated devices: one member per
# device, device arrays staged through the host (NCCL is off here).
add_test(NAME gpu_emu/collectives_2dev
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu> --only device_collectives)
set_tests_properties(gpu_emu/collectives_2dev PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV};SFLOW_EMU_DEVICES=2")
# The programs whose kernels fail a check in several threads, with each
# block's threads run last to first: the report names the lowest failing
# thread still (cudagen.c's sf_fail), and a tensor kernel's failure, found
# at the next synchronisation, is the CPU's message.
add_test(NAME gpu_emu/programs_reverse
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>
          --only custom_op --only parallel_cpu_launch --only kernel_bounds --only kernel_tensor)
set_tests_properties(gpu_emu/programs_reverse PROPERTIES ENVIRONMENT
  "${SFLOW_EMU_ENV};SFLOW_EMU_ORDER=reverse")
# The emulator's own checks: what docs/testing.md says it catches.
add_executable(emu_check ${CMAKE_SOURCE_DIR}/tests/gpu/emu/emu_check.c)
set_target_properties(emu_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_link_libraries(emu_check PRIVATE Threads::Threads dl m)
add_dependencies(emu_check sflow_emu)
add_test(NAME gpu_emu/self COMMAND emu_check $<TARGET_FILE:sflow_emu>)
# And through nccl.c's device path: the emulator's in-process NCCL
# (SFLOW_NCCL names it), one rank per emulated device.
add_test(NAME gpu_emu/collectives_nccl
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu> --only device_collectives)
set_tests_properties(gpu_emu/collectives_nccl PROPERTIES ENVIRONMENT
  "${SFLOW_EMU_ENV};SFLOW_EMU_DEVICES=2;SFLOW_NCCL=$<TARGET_FILE:sflow_emu>")
# The library kernels again with each block's threads run last to first: a
# kernel whose result depends on the order (a missing barrier) differs.
add_test(NAME gpu_emu/library_kernels_reverse COMMAND gpu_check)
set_tests_properties(gpu_emu/library_kernels_reverse PROPERTIES ENVIRONMENT
  "${SFLOW_EMU_ENV};SFLOW_EMU_ORDER=reverse")
# The layers' GPU paths (runtime/nn/gpu_layers.c): each op against its CPU
# form (unit/test_rt_nn_layers_gpu, under the emulator as gpu_emu/nn_layers_unit),
# and tests/gpu/layers' programs, every layer forward and backward in a
# @gpus(1) actor and the encoder trained in one (gpu/nn_layers on a GPU,
# gpu_emu/nn_layers under the emulator; run/gpu-layers-cpu their CPU run).
set_tests_properties(unit/test_rt_nn_layers_gpu PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME gpu_emu/nn_layers_unit COMMAND test_rt_nn_layers_gpu)
set_tests_properties(gpu_emu/nn_layers_unit PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
add_dependencies(test_rt_nn_layers_gpu sflow_emu)
add_test(NAME gpu/nn_layers
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/layers/run.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu/nn_layers PROPERTIES SKIP_RETURN_CODE 77)
set(SFLOW_EMU_ARGS "")
foreach(kv IN LISTS SFLOW_EMU_ENV)
  list(APPEND SFLOW_EMU_ARGS --emu-env "${kv}")
endforeach()
add_test(NAME gpu_emu/nn_layers
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/layers/run.py
          --sflowc $<TARGET_FILE:sflowc> ${SFLOW_EMU_ARGS})
add_test(NAME run/gpu-layers-cpu
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/run_golden.py
          --sflowc $<TARGET_FILE:sflowc> --dir ${CMAKE_SOURCE_DIR}/tests/gpu/layers --run)
set_tests_properties(run/gpu-layers-cpu PROPERTIES ENVIRONMENT "SFLOW_NO_GPU=1")
# std.nn on the GPU (tests/gpu/nn_gpu.py): the @gpus actors of the
# programs in tests/gpu/nn/ against the same programs with SFLOW_NO_GPU=1,
# within each program's stated tolerance, and their read-back counts; on a
# GPU (skipped without one) and under the host emulator (everywhere).
add_test(NAME gpu/nn
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_gpu.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu/nn PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME gpu_emu/nn
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_gpu.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu_emu/nn PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
# The nn layer's device unit tests (accessors, storage states, ops in a GPU
# context) under the emulator: unit/test_rt_nn_device runs them where a GPU is.
add_test(NAME gpu_emu/nn_unit COMMAND test_rt_nn_device)
set_tests_properties(gpu_emu/nn_unit PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
# And with each block's threads run last to first (a reduction that missed
# a barrier would differ).
add_test(NAME gpu_emu/nn_reverse
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_gpu.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu_emu/nn_reverse PROPERTIES ENVIRONMENT
  "${SFLOW_EMU_ENV};SFLOW_EMU_ORDER=reverse")
# Collectives over device tensors (tests/gpu/nn_coll.py): a @gpus(1) group
# of 2 doing allreduce_mean(grads(m)) against its CPU run, with NCCL (the
# buckets packed and reduced on the device), SFLOW_NCCL=off and a shared
# device (staged through the host); on two GPUs (skipped without one) and
# under the emulator with two devices and its in-process NCCL.
add_test(NAME gpu/nn_collectives
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_coll.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu/nn_collectives PROPERTIES SKIP_RETURN_CODE 77)
# std.train's reduce_scatter_tensors and all_gather_tensors over device
# tensors of a @gpus(1) group of 2 (tests/gpu/shard_coll.py): every shard
# bitwise the allreduce_sum's and the gather of the shards alone the whole
# sum, on the CPU, through NCCL on the device (the emulator's NCCL with
# --emu) and staged through the host (SFLOW_NCCL=off).
add_test(NAME gpu/shard_collectives
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/shard_coll.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu/shard_collectives PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME gpu_emu/shard_collectives
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/shard_coll.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>)
set_tests_properties(gpu_emu/shard_collectives PROPERTIES ENVIRONMENT
  "SFLOW_KERNEL_CACHE=${CMAKE_BINARY_DIR}/tests/emu-kernel-cache")
add_test(NAME gpu_emu/nn_collectives
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_coll.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>)
set_tests_properties(gpu_emu/nn_collectives PROPERTIES ENVIRONMENT
  "SFLOW_KERNEL_CACHE=${CMAKE_BINARY_DIR}/tests/emu-kernel-cache")
# examples/digits_gpu.sflow (its trainer a @gpus(1) actor) under the
# emulator against the CPU for 4 epochs (bench/gpu/digits.py: losses within
# 1e-4 relative, the same test accuracy, one read back per epoch), and its
# default run on the CPU (SFLOW_NO_GPU=1) printing exactly its expected
# lines; bench/gpu/run.sh runs the same script for 15 epochs on the GPU.
add_test(NAME gpu_emu/digits
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/gpu/digits.py
          --sflowc $<TARGET_FILE:sflowc> --src ${CMAKE_SOURCE_DIR}/examples/digits_gpu.sflow
          --csv ${CMAKE_SOURCE_DIR}/examples/data/digits.csv --epochs 4
          --expect ${CMAKE_SOURCE_DIR}/examples/digits_gpu.sflow)
set_tests_properties(gpu_emu/digits PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}" TIMEOUT 300)
include(${CMAKE_CURRENT_LIST_DIR}/nn_check.cmake)
# The emulator's asynchronous mode (SFLOW_EMU_ASYNC=1, docs/testing.md):
# work waits in its stream's queue until CUDA makes the host wait, so an
# op that reads a buffer before the stream that writes it got there, or a
# collective on NCCL's non-blocking stream that does not wait for stream 0,
# gives other numbers.  Its own checks, then the GPU tests most likely to
# show an ordering bug: tensor ops and training, the layers, the op
# checker, collectives through the emulated NCCL and digits.
add_test(NAME gpu_emu/self_async COMMAND emu_check $<TARGET_FILE:sflow_emu> --async)
add_test(NAME gpu_emu/nn_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_gpu.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu_emu/nn_async PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV};SFLOW_EMU_ASYNC=1")
add_test(NAME gpu_emu/nn_layers_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/layers/run.py
          --sflowc $<TARGET_FILE:sflowc> ${SFLOW_EMU_ARGS})
set_tests_properties(gpu_emu/nn_layers_async PROPERTIES ENVIRONMENT "SFLOW_EMU_ASYNC=1")
add_test(NAME gpu_emu/nn_collectives_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_coll.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>)
set_tests_properties(gpu_emu/nn_collectives_async PROPERTIES ENVIRONMENT
  "SFLOW_KERNEL_CACHE=${CMAKE_BINARY_DIR}/tests/emu-kernel-cache;SFLOW_EMU_ASYNC=1")
add_test(NAME gpu_emu/collectives_nccl_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/programs.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu> --only device_collectives
          --only custom_op)
set_tests_properties(gpu_emu/collectives_nccl_async PROPERTIES ENVIRONMENT
  "${SFLOW_EMU_ENV};SFLOW_EMU_DEVICES=2;SFLOW_NCCL=$<TARGET_FILE:sflow_emu>;SFLOW_EMU_ASYNC=1")
add_test(NAME gpu_emu/digits_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/gpu/digits.py
          --sflowc $<TARGET_FILE:sflowc> --src ${CMAKE_SOURCE_DIR}/examples/digits_gpu.sflow
          --csv ${CMAKE_SOURCE_DIR}/examples/data/digits.csv --epochs 2
          --expect ${CMAKE_SOURCE_DIR}/examples/digits_gpu.sflow)
set_tests_properties(gpu_emu/digits_async PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV};SFLOW_EMU_ASYNC=1"
                     TIMEOUT 300)
add_test(NAME gpu_emu/nn_check_async
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nn_check.py
          --sflowc $<TARGET_FILE:sflowc> --mode emulator)
set_tests_properties(gpu_emu/nn_check_async PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV};SFLOW_EMU_ASYNC=1")
# The transfer counters under the emulator (tests/gpu/counters.py): a
# loop's settles copy back as many bytes for 80 repetitions as for 1 (the
# arrays it dropped are released unread), and tensor uploads go through
# pinned staging, with the synchronous fallback's waits counted.
add_test(NAME gpu_emu/counters
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/counters.py
          --sflowc $<TARGET_FILE:sflowc> --emu $<TARGET_FILE:sflow_emu>)
set_tests_properties(gpu_emu/counters PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
# The ranks' environment (no GPU needed): the caller's NCCL watchdog bound
# reaches them, and both talk over the loopback (tests/gpu/nccl_env.py).
add_test(NAME gpu/nccl_env
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/nccl_env.py $<TARGET_FILE:nccl_check>)
# Where NVRTC and cuBLAS are found (runtime/gpu/libs.c): fake CUDA_HOME,
# CUDA_PATH and pip folders holding the emulator, the report naming the file.
add_test(NAME gpu_emu/libsearch
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/libsearch.py
          $<TARGET_FILE:nvrtc_check> $<TARGET_FILE:gpu_check> $<TARGET_FILE:sflow_emu>)
# A rehearsal of bench/gpu/run.sh, the bounded device run, under the
# emulator at tiny sizes (tests/gpu/run_rehearsal.py): prepare stripped and
# small, the whole run in its budget with every program identical, skipped
# steps saying so, and a SIGTERM keeping the rows measured so far.
add_test(NAME gpu_emu/run_rehearsal
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/run_rehearsal.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(gpu_emu/run_rehearsal PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}" TIMEOUT 600)
# Device operations per step (tests/gpu/opcount.py): the MLP step and the
# encoder layer of bench/gpu/nn_bench.sflow counted by the emulator
# (SFLOW_EMU_COUNT), each within 1.5 x PyTorch's (tests/gpu/torch_opcounts.json).
add_test(NAME gpu_emu/opcount
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/opcount.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(gpu_emu/opcount PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}" TIMEOUT 600)
# std.llm's decoder on the device (runtime/nn/gpu_llama.c, kernels/llama.cu
# and quant.cu) against the CPU decoder on SmolLM2 (tests/gpu/llm_gpu.py):
# logits, greedy tokens, forward_batch, uploads and read-backs; on a GPU
# (gpu/llm_decoder, not run without one) and under the emulator.
foreach(t gpu/llm_decoder gpu_emu/llm_decoder)
  add_test(NAME ${t}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/gpu/llm_gpu.py
            --sflowc $<TARGET_FILE:sflowc>)
  set_tests_properties(${t} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(gpu_emu/llm_decoder PROPERTIES ENVIRONMENT "${SFLOW_EMU_ENV}")
