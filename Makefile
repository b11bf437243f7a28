# Two commands do everything: `make demo` (set up, then run the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/zoo: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e ".[test]"
	touch $(BIN)/zoo

.PHONY: setup demo test
setup: $(BIN)/zoo

demo: setup
	$(BIN)/zoo run vision/resnet

test: setup
	$(BIN)/python -m pytest
