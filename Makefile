# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv inside the checkout and install dnmopd into it
# (a regular, non-editable install: exactly the layout a user gets).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
DEPS   := $(VENV)/.deps-installed
PKG    := $(VENV)/.dnmopd-installed
SOURCES := $(shell find dnmopd kernels native -type f -not -path "*/__pycache__/*" 2>/dev/null) CMakeLists.txt

.PHONY: venv demo test lint clean

venv: $(PKG)

# Dependencies: only when pyproject.toml changes.
$(DEPS): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -C build-dir=build/$(notdir $(VENV)) ".[dev]"
	touch $@

# The package itself: rebuilt (incrementally) whenever a source file changes.
$(PKG): $(DEPS) $(SOURCES)
	$(PIP) install --no-deps --no-build-isolation --force-reinstall \
		-C build-dir=build/$(notdir $(VENV)) .
	touch $@

demo: $(PKG)
	$(PY) -m dnmopd.examples.toy

test: $(PKG)
	cmake -S . -B build/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/ctest
	ctest --test-dir build/ctest --output-on-failure
	$(VENV)/bin/pytest

lint: $(PKG)
	$(VENV)/bin/ruff check dnmopd kernels launch tests

clean:
	rm -rf build .pytest_cache
