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
	$(BIN)/zoo run vision/resnet --reference digits

# Both run one pytest-xdist worker per core (at most 4; worksteal: a worker that runs out takes another's tests),
# end with the 25 slowest tests and write a JUnit report (CI keeps it) under the git-ignored reports/.
REPORT = -n auto --maxprocesses=4 --dist worksteal --durations=25 --junitxml=reports/$@.xml

test: setup
	$(BIN)/python -m pytest $(REPORT)

test-all: setup
	$(BIN)/python -m pytest -m "slow or not slow" $(REPORT)
