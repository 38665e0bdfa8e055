# Set-up and everyday commands. `make demo` and `make test` create the virtual environment when missing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The torch build to install first (this pair is available offline on the reference machine).
TORCH  ?= torch==2.14.1 torchvision==0.29.1
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-fast bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/emulator run scenarios/quickstart.yaml $(DEMO_ARGS)  # e.g. DEMO_ARGS='--set rounds=10'

test: $(STAMP)
	$(BIN)/lint-imports  # the layers in pyproject.toml: an import that runs back up fails here
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=20

# The inner loop: unit tests and in-process runs, no Ray start, no slow tests (a few minutes on 2 cores).
test-fast: $(STAMP)
	EMULATOR_TEST_TIER=fast $(BIN)/python -m pytest -q -n 2 -m "not ray and not slow and not heavy" --durations=10

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) runs .pytest_cache
