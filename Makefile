# Two entry points for a fresh machine; both idempotent.
#   make demo   create .venv, install everything, run the main demo
#   make test   create .venv if needed, run the whole test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to 2.13.0 (the CPU build) in pyproject.toml; nothing looser may be asked for.
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/custom_op_mul3.py --target host

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_generate.py
	$(PY) benchmarks/bench_host_library.py
