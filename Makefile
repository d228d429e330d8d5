# Thin wrapper over CMake.  `make` installs missing system packages (once,
# fast when present), configures and builds into build/.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test install clean fuzz bench bench-embed bench-tasks bench-collectives bench-floatfmt bench-data bench-tokenizer bench-wordcount bench-llm bench-serve bench-train golden-update tsan soak-resume soak-journal

all: build

# System packages and the tests' Python environment, then the pretrained
# model the ML examples read (scripts/install-models.sh: once, then a stamp).
deps:
	@bash scripts/install-deps.sh
	@SFLOW_MODELS="$${SFLOW_MODELS:-$(abspath $(BUILD))/models}" bash scripts/install-models.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

golden-update: build
	UPDATE_GOLDEN=1 python3 tests/run_golden.py --sflowc $(BUILD)/bin/sflowc

# Damaged journals, long form: 3 killed runs per program, 60 random
# truncations and 60 random byte flips of each (tests/runtime/
# journal_damage_test.py; SOAK_SEED=N repeats a campaign).
soak-journal: build
	python3 tests/runtime/journal_damage_test.py --sflowc $(BUILD)/bin/sflowc \
	  --snapshots 3 --trials 60 $(if $(SOAK_SEED),--seed $(SOAK_SEED))

fuzz: deps
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

tsan: deps
	@bash scripts/tsan.sh

# The random-kill campaign in its long form (tests/runtime/campaign_test.py;
# `make test` runs 20 kills): KILLS SIGKILLed runs, each resumed to the end
# and compared byte for byte with the uninterrupted run.  SEED picks the
# kill plans; a failing trial prints the seed that replays it.
KILLS ?= 200
SEED  ?= 1
soak-resume: build
	@python3 tests/runtime/campaign_test.py --sflowc $(BUILD)/bin/sflowc --kills $(KILLS) --seed $(SEED)

bench: build
	@bash bench/run.sh $(BUILD)

# Tasks, actor calls, chains of futures and allreduce beside OpenMP, C and Ray
# (installs Ray into build/pydeps on first use; see bench/tasks/run.sh).
bench-tasks: build
	@bash bench/tasks/run.sh $(BUILD)

# A small allreduce_mean between 2 group members, idle and beside two busy
# loops pinned to the cores, beside a pthread_barrier C peer
# (bench/collectives/run.py; docs/performance.md).
bench-collectives: build
	@python3 bench/collectives/run.py --sflowc $(BUILD)/bin/sflowc

# Printing 1.6M random f64: str() beside CPython's repr(), write_csv beside
# pandas' to_csv (bench/floatfmt/run.sh; installs numpy and pandas into
# build/peers/floatfmt/venv on first use).
bench-floatfmt: build
	@bash bench/floatfmt/run.sh $(BUILD)

# Reading a numeric CSV (1e6 rows x 8 f64 columns) into typed columns:
# std.data at 1 and all threads beside pandas.read_csv (C engine; pandas
# 3.1.1 and 2.3.3) and pyarrow.csv, alternating rounds, one table
# (bench/data/run.sh; installs the peers into build/peers/data).
bench-data: build
	@bash bench/data/run.sh $(BUILD)

# std.tokenizer beside the Python tokenizers package on 13.7 MB of Debian
# fortunes, at 1 and 2 threads (bench/tokenizer/run.py; installs its peers into
# build/peers/tokenizer on first use, which also un-skips runtime/tokenizer_ids).
# examples/embed.sflow's sentence embeddings beside PyTorch (transformers)
# on the same 512 Debian fortunes and threads (bench/nn/embed.py; its peer
# Python is bench/train/setup.sh's build/peers/torch, or PEER_PYTHON=...).
bench-embed: build
	@python3 bench/nn/embed.py --build $(BUILD) $(if $(PEER_PYTHON),--python $(PEER_PYTHON))

bench-tokenizer: build
	@python3 bench/tokenizer/run.py --build $(BUILD)

# Word count (s.split() into a map<str, i64>) beside the same loop in
# Python, collections.Counter and a C hash table (bench/wordcount/run.py).
bench-wordcount: build
	@python3 bench/wordcount/run.py --sflowc $(BUILD)/bin/sflowc

# SmolLM2-135M-Instruct (Q4_1 GGUF) beside llama.cpp, built from the pinned
# llama-cpp-python sdist on first use (bench/llm/setup-llamacpp.sh, many
# minutes on 2 cores), and transformers where build/llmref has it: prompt
# and decode tokens/s, peak RSS, serving 1 and 16 clients with TTFT
# (bench/llm/llamacpp.py; docs/performance.md).
bench-llm: build
	@bash bench/llm/setup-llamacpp.sh
	@python3 bench/llm/llamacpp.py --build $(BUILD)

# std.serve beside Ray Serve 2.60.0: requests/s and p50/p99 under wrk on
# loopback, a no-op and the digits MLP, batching on and off
# (bench/serve/run.py; installs Ray Serve and torch into build/peers/torch
# on first use; docs/performance.md).
bench-serve: build
	@bash bench/serve/setup.sh
	@python3 bench/serve/run.py --sflowc $(BUILD)/bin/sflowc --python build/peers/torch/venv/bin/python

# Fine-tuning all-MiniLM-L6-v2 on the fortunes (examples/finetune.sflow) with
# 1, 2 and 4 workers beside a plain PyTorch loop, PyTorch DDP over gloo and
# Ray Train's start-up, one table (bench/train/run.py; installs its peers
# into build/peers/torch on first use).  The small recipe by default (about
# 10 minutes on 2 cores); BENCH_TRAIN_FLAGS=--full for the seed's,
# BENCH_TRAIN_FLAGS="--nodes hosts.txt" adds 2 nodes of a hosts file,
# BENCH_TRAIN_FLAGS=--loopback-nodes 2 simulated ones (sshd on loopback).
bench-train: build
	@python3 bench/train/run.py --build $(BUILD) $(BENCH_TRAIN_FLAGS)

clean:
	rm -rf $(BUILD)
