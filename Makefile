# Two entry points on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint scan bench e2e clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/gangkeeper serve --host 127.0.0.1 --port 8443 --cert-dir certs

lint: $(BIN)/.installed
	$(BIN)/ruff check webhook tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q
	bash hack/scan.sh

scan:
	bash hack/scan.sh

bench: $(BIN)/.installed
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/controller.py

e2e: $(BIN)/.installed
	$(BIN)/pytest -q tests/e2e

clean:
	rm -rf $(VENV) .venv-scan certs/*.crt certs/*.key
