# `make run` starts the word count topology; `make test` runs the test suite. Both install first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install run test lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $@

run: install
	$(BIN)/squall run examples/wordcount.yaml --duration 30

test: install
	$(BIN)/ruff check worker operator tests examples bench
	$(BIN)/pytest

bench: install
	$(BIN)/python bench/wordcount.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
