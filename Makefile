# Two commands do everything: `make demo` (set up, then run the main job) and `make test` (the fast tests);
# `make test-all` adds the tests marked slow (CI runs it).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/zoo: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e ".[all,test]"
	touch $(BIN)/zoo

.PHONY: setup demo test test-all
setup: $(BIN)/zoo

demo: setup
	$(BIN)/zoo run vision/resnet

test: setup
	$(BIN)/python -m pytest

test-all: setup
	$(BIN)/python -m pytest -m "slow or not slow"
