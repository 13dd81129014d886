# Two entry points on a fresh machine: `make run` and `make test`.
# Both install from the hashed locks (requirements*.lock, made by `make lock` from pyproject.toml).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_COMPILE := $(BIN)/pip-compile -q --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links

.PHONY: run test lint scan bench simulate e2e lock clean

# runtime and test tools, each pinned with its hashes; the package itself without dependencies
$(BIN)/.installed: requirements-test.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements-test.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

run: $(BIN)/.installed
	$(BIN)/gangkeeper serve --host 127.0.0.1 --port 8443 --cert-dir certs

lint: $(BIN)/.installed
	$(BIN)/ruff check webhook tests bench
	$(BIN)/ruff format --check webhook tests bench
	$(BIN)/mypy

# needs ../shared beside the clone and kubectl (for `kubectl kustomize`) on the PATH
test: lint
	$(BIN)/pytest -q
	bash hack/scan.sh

scan:
	bash hack/scan.sh

bench: $(BIN)/.installed
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/controller.py
	$(BIN)/gangkeeper simulate --plots bench/out --json bench/out/simulate.json

simulate: $(BIN)/.installed
	$(BIN)/gangkeeper simulate --plots simulate-out --json simulate-out/figures.json

e2e: $(BIN)/.installed
	$(BIN)/pytest -q tests/e2e

# after changing dependencies in pyproject.toml (needs pip-tools: $(BIN)/pip install pip-tools)
lock:
	$(PIP_COMPILE) -o requirements.lock pyproject.toml
	$(PIP_COMPILE) --extra test --all-build-deps -o requirements-test.lock pyproject.toml
	$(PIP_COMPILE) -o hack/checkov.lock hack/checkov.in

clean:
	rm -rf $(VENV) .venv-scan certs/*.crt certs/*.key
