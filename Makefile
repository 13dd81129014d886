# Two entry points on a fresh machine: `make run` and `make test`.
# Both install from the hashed locks (requirements*.lock, made by `make lock` from pyproject.toml).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_COMPILE := $(BIN)/pip-compile -q --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links

.PHONY: run test lint scan bench simulate e2e lock clean cluster-build cluster-core cluster test-cluster manifests image image-tools release-image release-chart plugin-archive

PORT ?= 8443
# the interpreter the venv was made with: another one (a new Python) rebuilds it from scratch
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
PY_STAMP := $(VENV)/.python-$(PY_VERSION)

$(PY_STAMP):
	@test -n "$(PY_VERSION)" || { echo "$(PYTHON) not found: set PYTHON=python3.11 (or newer)"; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	touch $@

# what the server needs and nothing more (requirements.lock, as the image)
# (and the build backend the package's own editable install needs: setuptools>=77, newer than a venv's own)
$(BIN)/.runtime: requirements.lock requirements-build.lock $(PY_STAMP)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements.lock -r requirements-build.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .  # .venv/bin/gangkeeper, as the docs use it
	touch $@

# runtime and test tools, each pinned with its hashes; the package itself without dependencies
$(BIN)/.installed: requirements-test.lock pyproject.toml $(PY_STAMP)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements-test.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

# offline unless asked: CLUSTER=1 serves against $$KUBECONFIG (discovery, namespace labels, queues)
run: $(BIN)/.runtime
	env $(if $(CLUSTER),,-u KUBECONFIG -u KUBERNETES_SERVICE_HOST) $(BIN)/python -m webhook serve \
	  --host 127.0.0.1 --port $(PORT) --cert-dir certs

lint: $(BIN)/.installed
	$(BIN)/ruff check webhook tests bench hack
	$(BIN)/ruff format --check webhook tests bench hack
	$(BIN)/mypy
	$(BIN)/lint-imports

# needs ../shared beside the clone and kubectl (for `kubectl kustomize`) on the PATH; the real-cluster
# tier (tests/real/) needs the components hack/cluster/build.sh builds (cached): the core first,
# the rest beside the tests (hack/test.sh)
# lint (mypy from an empty cache) and Debian's image tools run beside the core build, not before it:
# on a fresh machine's two cores the build leaves them room
test: $(BIN)/.installed
	$(MAKE) -j3 lint cluster-core image-tools
	BIN=$(BIN) bash hack/test.sh

# what most tests need, built before them; hack/test.sh builds the rest beside them
cluster-core:
	bash hack/cluster/build.sh core

# the real components, from the Go module proxy, cached in ~/.cache/gangkeeper (GK_CACHE) per version
cluster-build:
	bash hack/cluster/build.sh default

# a local cluster with gangkeeper deployed: the demo (needs root)
cluster: $(BIN)/.installed cluster-build
	$(BIN)/python hack/cluster/up.py $(ARGS)

# the real-cluster tier on every Kubernetes version built (1.35, 1.36, 1.37)
test-cluster: $(BIN)/.installed
	bash hack/cluster/build.sh all
	for v in $$(. hack/cluster/versions.env && echo $$K8S_VERSIONS); do \
	  GK_K8S_VERSION=$$v $(BIN)/pytest -q -m cluster tests || exit 1; done

scan:
	bash hack/scan.sh

# the image the chart points at: with a Docker engine, `docker build` of the Dockerfile; without one, the
# same image from Debian's tools (hack/image.sh: an OCI layout and a `docker load`-able archive in
# build/image, reproducible; tests/real/test_image.py checks the two agree)
IMAGE ?= ghcr.io/gangkeeper/gangkeeper:0.1.0
image: $(BIN)/.installed
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
	  docker build -t $(IMAGE) . ; \
	else bash hack/image-tools.sh && IMAGE_NAME=$(firstword $(subst :, ,$(IMAGE))) TAG=$(lastword $(subst :, ,$(IMAGE))) bash hack/image.sh build/image; fi

# a release (.github/workflows/release.yml): the Dockerfile's image for every platform, pushed; the chart
# as an OCI artifact (helm from the real tier's build)
PLATFORMS ?= linux/amd64,linux/arm64
CHART_REPO ?= oci://ghcr.io/gangkeeper/charts
release-image:
	docker buildx build --platform $(PLATFORMS) -t $(IMAGE) --push .

HELM = $${GK_CACHE:-$$HOME/.cache/gangkeeper}/bin/helm-$$(. hack/cluster/versions.env && echo $$HELM_VERSION)/helm
release-chart:
	bash hack/cluster/build.sh helm
	mkdir -p build && $(HELM) package charts/gangkeeper -d build
	$(HELM) push build/gangkeeper-*.tgz $(CHART_REPO)

# Debian's mmdebstrap, umoci, skopeo and runc (installed when missing, as root on Debian)
image-tools:
	bash hack/image-tools.sh

# build/kubectl-gangkeeper.tar.gz, the krew archive, and its sha256 in plugins/krew/gangkeeper.yaml
plugin-archive:
	bash hack/plugin-archive.sh

# manifests/base/gangkeeper.yaml (the release manifest) rendered from charts/gangkeeper
manifests:
	bash hack/render.sh

bench: $(BIN)/.installed
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/controller.py
	$(BIN)/gangkeeper simulate --plots bench/out --json bench/out/simulate.json

simulate: $(BIN)/.installed
	$(BIN)/gangkeeper simulate --plots simulate-out --json simulate-out/figures.json

# the conformance suite against your own cluster (gangkeeper installed there): make e2e KUBECONFIG=...
e2e: $(BIN)/.installed
	@test -n "$(KUBECONFIG)" || { echo "set KUBECONFIG to the cluster to check (gangkeeper installed there)"; exit 2; }
	GANGKEEPER_E2E_KUBECONFIG=$(KUBECONFIG) $(BIN)/pytest -q -p no:cacheprovider tests/e2e

# after changing dependencies in pyproject.toml (needs pip-tools: $(BIN)/pip install pip-tools)
lock:
	$(PIP_COMPILE) -o requirements.lock pyproject.toml
	$(PIP_COMPILE) --all-build-deps --only-build-deps -o requirements-build.lock pyproject.toml
	$(PIP_COMPILE) --extra test --all-build-deps -o requirements-test.lock pyproject.toml
	$(PIP_COMPILE) -o hack/checkov.lock hack/checkov.in

clean:
	rm -rf $(VENV) .venv-scan certs/*.crt certs/*.key
