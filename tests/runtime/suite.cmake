# The task runtime seen from outside: real processes killed with SIGKILL
# and resumed, and the trace, progress and summary output.
add_test(NAME runtime/fault_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/fault_test.py
          --sflowc $<TARGET_FILE:sflowc>)
add_test(NAME runtime/observe
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/observe_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/fault_resume PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
# The progress line's status from std.train and std.tune (plain lines off a
# terminal with --progress=always).
add_test(NAME runtime/progress_status
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/progress_status_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# --trace into a FIFO, through a symlink, into a char device (as root),
# onto stdout's file; a directory or a missing folder refused before the run.
add_test(NAME runtime/trace_path
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/trace_path_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/trace_path PROPERTIES TIMEOUT 300)
# Every file writer (nn.save, the data writers, std.tune's --out, std.io)
# into a regular file, a FIFO with a reader, a symlink, a char device made
# with mknod (as root) and a block device or a directory (refused); a
# checkpoint over a FIFO or a device is refused and the node left alone.
add_test(NAME runtime/writers
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/writers_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/writers PROPERTIES TIMEOUT 300)
# Damaged journals (truncated, a byte flipped in the middle or the header)
# beside checkpoints: each --resume repairs with identical output or
# refuses clearly, never exits 0 with other output.  The short form;
# `make soak-journal` runs hundreds of trials.
add_test(NAME runtime/journal_damage
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/journal_damage_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/journal_damage PROPERTIES TIMEOUT 300)
# What the journal leaves on disk: nothing in the checkpoint folder with
# --journal=false; a journal write on a full disk (a 48 KiB tmpfs as root,
# else RLIMIT_FSIZE) says what was kept, and --resume from it prints the
# uninterrupted output.
add_test(NAME runtime/journal_files
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/journal_files_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/journal_files PROPERTIES TIMEOUT 300)
# The same programs with the runtime built under ThreadSanitizer (a second
# build tree inside this one); any race report fails.
add_test(NAME runtime/tsan
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/tsan.sh ${CMAKE_BINARY_DIR}/tsan)
set_tests_properties(runtime/tsan PROPERTIES TIMEOUT 1200)
# The runtime flags that sflowc reserves (runtime/flagnames.h) against the
# flags a compiled program's --help lists and its parser accepts.
add_test(NAME runtime/reserved_flags
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/flags_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# Random streams per call: the same numbers for any --threads, and after
# a kill and --resume, as docs/runtime.md's derivation says.
add_test(NAME runtime/rand
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/rand_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# --threads 1024 (the bound) on a 0.05 s job: idle workers park, so the
# extra threads cost well under a second; out-of-range values exit 2.
add_test(NAME runtime/threads
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/threads_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/threads PROPERTIES RUN_SERIAL TRUE TIMEOUT 300)
# Collectives under CPU contention: 200 small allreduces beside two busy
# loops pinned to the cores, well under a second (it was about one).
add_test(NAME runtime/collective_contention
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/contention_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/collective_contention PROPERTIES RUN_SERIAL TRUE TIMEOUT 300)
# The random-kill campaign, short form: 20 runs of a program that prints
# from tasks, actors, groups and future-fed tasks, SIGKILLed at random
# moments (and during their resume), must resume to exactly the
# uninterrupted output.  The long form is `make soak-resume KILLS=200`.
add_test(NAME runtime/resume_campaign
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/campaign_test.py
          --sflowc $<TARGET_FILE:sflowc> --kills 20)
set_tests_properties(runtime/resume_campaign PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
# Calls waiting for @cpus slots are never lost (a race once hung ~5% of runs).
add_test(NAME runtime/resources_race
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/resources_race_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/resources_race PROPERTIES TIMEOUT 600)
# Maps and function values through the journal and a @checkpoint actor:
# runs killed after 2, 7, 13 and 20 lines resume to the uninterrupted
# output, the actor restored from its checkpoint.
add_test(NAME runtime/maps_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/maps_resume_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# now() across --resume: runs killed right after an actor's line (main
# has journaled the now() before the call, not the one after) resume to
# the uninterrupted output, main's clock never going backwards.
add_test(NAME runtime/clock_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/clock_resume_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/clock_resume PROPERTIES TIMEOUT 300)
# std.data's formats against Python's csv, json and numpy, both directions
# (numpy from scripts/install-pydeps.sh's build/pydeps).
add_test(NAME runtime/data_interop
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/data_interop_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# The CSV reader in chunks over the pool (--threads 4) against one thread:
# random files with quoted line ends, CRLF, blanks, late kinds and errors.
add_test(NAME runtime/csv_chunks
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/csv_chunks_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# A collective of mismatched arrays is an error every time, never a crash
# (a member raised while another read its slot: ~15% of runs segfaulted).
add_test(NAME runtime/collective_errors_race
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/collective_errors_race_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/collective_errors_race PROPERTIES TIMEOUT 600)
# std.tokenizer against the Python tokenizers package, id for id, on 13.7
# MB of Debian fortunes and every code point; skipped (77) until
# bench/tokenizer/setup.sh has made build/peers/tokenizer (network, once).
add_test(NAME runtime/tokenizer_ids
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/tokenizer_test.py
          --sflowc $<TARGET_FILE:sflowc> --peers ${CMAKE_BINARY_DIR}/peers/tokenizer)
set_tests_properties(runtime/tokenizer_ids PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# A training run (a @checkpoint actor holding an MLP and its AdamW state)
# SIGKILLed at 4 points and --resume'd ends with bitwise the weights of an
# uninterrupted run: tensors keep their params flag and their sharing (the
# optimizer's params are the model's) through checkpoints.
add_test(NAME runtime/nn_resume
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/nn_resume_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# A @checkpoint group of two members whose products split over the pool:
# a --resume'd run prints the fresh run's bits and runs its products on
# as many threads (the members are counted when placed, not in init);
# --threads 1 gives the same bits.  OPENBLAS_CORETYPE unset: the default
# kernel (tests/tests.cmake reruns it under Haswell and Zen).
add_test(NAME runtime/group_split
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/group_split_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/group_split PROPERTIES ENVIRONMENT_MODIFICATION
                     OPENBLAS_CORETYPE=unset:)
# The same bits on every machine: sflow's GEMM (the default for f32
# products) under each of its kernels, every OPENBLAS_CORETYPE, 1-3
# threads and -march=native, equal to a committed output.
add_test(NAME runtime/same_bits
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/same_bits_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# Collectives over a tensor[] go in buckets (SFLOW_BUCKET_MB): transport
# calls counted on the --trace for three caps, values checked for each.
add_test(NAME runtime/nn_buckets
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/nn_buckets_test.py
          --sflowc $<TARGET_FILE:sflowc>)
# std.serve over real HTTP on loopback: examples/serve.sflow's answers
# against the model computed offline in numpy, batching, bad input, a slow
# client, the bearer token, full queues, /metrics through
# prometheus_client's parser, and the graceful stop on SIGTERM (repeated,
# and with an answer read after it); a slowloris, the example's admin
# token, refused rollouts, 503 before a route's first replica.
add_test(NAME runtime/serve
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/serve_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/serve PROPERTIES TIMEOUT 300)
# std.serve's request-level answers for continuous batching over real
# HTTP on loopback (tests/runtime/serve_stream.sflow, a stand-in decoder):
# out-of-order answers, server-sent events read as they come, streaming
# and plain requests at once, a client gone mid-stream dropped by the
# replica, SIGTERM letting a stream finish, the timeout to the first
# byte, misused ids as runtime errors naming them.
add_test(NAME runtime/serve_stream
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/serve_stream_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/serve_stream PROPERTIES TIMEOUT 120)
# A task failing under @retry releases its locals (every owned kind, in the
# fns it calls, in a failing actor method): peak RSS after 160 failed
# attempts of ~800 KB each within 8 MB of 60 (a leak adds ~80 MB).
add_test(NAME runtime/retry_leak
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/runtime/retry_leak_test.py
          --sflowc $<TARGET_FILE:sflowc>)
set_tests_properties(runtime/retry_leak PROPERTIES TIMEOUT 300)
