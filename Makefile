# Two entry points for a fresh machine; both idempotent.
#   make demo   create .venv, install everything, run the main demo
#   make test   create .venv if needed, run the whole test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# clang++ with libc++: the QNN SDK's x86 HTP build, which the tests run against a stand-in.
CLANG_PACKAGES := clang libc++-dev libc++abi-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CLANG_STAMP := $(VENV)/.clang
# qemu-user's qemu-hexagon runs the Hexagon check's programs; ziglang (a dev dependency) builds them.
HEXAGON_STAMP := $(VENV)/.hexagon
# QAIRT's x86 HTP backends (libQnnHtp.so of 2.47, 2.50.40, 2.51) from PyPI's onnxruntime-qnn wheels, for htp-check.
QAIRT_STAMP := $(VENV)/.qairt

.PHONY: demo lint test check bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to 2.13.0 (the CPU build) in pyproject.toml; nothing looser may be asked for.
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(CLANG_STAMP): $(STAMP)
	@echo 'int main() {}' | clang++ -stdlib=libc++ -x c++ - -o /dev/null 2>/dev/null || \
	  $(SUDO) apt-get install -y -q $(CLANG_PACKAGES) || \
	  { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(CLANG_PACKAGES); }
	touch $(CLANG_STAMP)

# Also builds zig's libc++ for Hexagon once (~3 CPU-minutes, cached in ~/.cache/qnn_custom_ops/zig).
$(HEXAGON_STAMP): $(STAMP)
	@command -v qemu-hexagon >/dev/null || $(SUDO) apt-get install -y -q qemu-user || \
	  { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q qemu-user; }
	$(PY) -c "from qnn_custom_ops.runtime.hexagon import check_toolchain; print(check_toolchain())"
	touch $(HEXAGON_STAMP)

# Installed once into ~/.cache/qnn_custom_ops/qairt (about 100 MB a release), for every checkout.
$(QAIRT_STAMP): $(STAMP)
	$(PY) -c "from qnn_custom_ops.qairt import QAIRT_VERSIONS, qairt_backend; [print(qairt_backend(v)) for v in QAIRT_VERSIONS]"
	touch $(QAIRT_STAMP)

demo: $(STAMP)
	$(PY) examples/custom_op_mul3.py --target host

# ruff (lint and format) and mypy on src/, configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check src
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy

# Lint first; then the tests on every core (pytest-xdist; builds are process-safe and shared through
# the run's cache), handed out one at a time, slow ones first (tests/conftest.py), so the workers end together.
test: $(STAMP) $(CLANG_STAMP) $(HEXAGON_STAMP) $(QAIRT_STAMP) lint
	$(PY) -m pytest -q -n auto --dist load --maxschedchunk 1

# lint plus every test: what CI runs (make test already lints first).
check: test

bench: $(STAMP)
	$(PY) -m benchmarks.bench_generate
	$(PY) -m benchmarks.bench_host_library
	$(PY) -m benchmarks.bench_llm_ops
