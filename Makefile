K8S_VERSION  := 1.37.2
ETCD_VERSION := 3.6.16
# The operators the integration tests run: KubeRay's ray-operator and Kubeflow's
# training-operator (tests/integration/test_operators.py), Kueue v0.17.0, and
# Karpenter v1.15.0 (kwok cloud provider) with kwok v0.8.0 (tests/integration/
# karpenter.py) (hack/build-operators.sh; KUEUE_VERSION, KARPENTER_VERSION and
# KWOK_VERSION override them there).
KUBERAY_VERSION := 1.5.0
TRAINING_OPERATOR_VERSION := 1.8.1
KUEUE_VERSION := 0.17.0

PYTHON ?= python3.11
VENV   := .venv
# Reinstalls when pyproject.toml changes.
VENV_STAMP := $(VENV)/.troupe-installed

# The control plane is built once into the user's cache, outside the repository
# (make clean never touches it). TROUPE_*_BIN_DIR may point elsewhere.
CACHE_HOME         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
TROUPE_K8S_BIN_DIR  ?= $(CACHE_HOME)/troupe/k8s-v$(K8S_VERSION)/bin
TROUPE_ETCD_BIN_DIR ?= $(CACHE_HOME)/troupe/etcd-v$(ETCD_VERSION)/bin
# bin/ray-operator and crds/ (KubeRay's and the scheduler-plugins PodGroup CRD).
TROUPE_KUBERAY_DIR  ?= $(CACHE_HOME)/troupe/kuberay-v$(KUBERAY_VERSION)
# bin/training-operator.v1 and crds/ (its PyTorchJob CRD).
TROUPE_TRAINING_OPERATOR_DIR ?= $(CACHE_HOME)/troupe/training-operator-v$(TRAINING_OPERATOR_VERSION)
# bin/kueue, crds/ (Kueue's CRDs) and webhook/ (its webhook manifest).
TROUPE_KUEUE_DIR ?= $(CACHE_HOME)/troupe/kueue-v$(KUEUE_VERSION)
KUBECTL            := $(TROUPE_K8S_BIN_DIR)/kubectl

# Recipes see the built binaries (kubectl v$(K8S_VERSION), not /usr/bin/kubectl) first.
export TROUPE_K8S_BIN_DIR TROUPE_ETCD_BIN_DIR TROUPE_KUBERAY_DIR TROUPE_TRAINING_OPERATOR_DIR TROUPE_KUEUE_DIR KUBECTL \
	K8S_VERSION ETCD_VERSION KUBERAY_VERSION TRAINING_OPERATOR_VERSION KUEUE_VERSION
export PATH := $(TROUPE_K8S_BIN_DIR):$(PATH)

PYTEST_ARGS ?=
DEMO_ARGS   ?=

.DEFAULT_GOAL := help
.PHONY: help venv controlplane operators test test-unit test-integration lint demo clean bench bench-e2e image image-check

help: ## list the targets
	@echo "troupe (Kubernetes v$(K8S_VERSION), etcd v$(ETCD_VERSION)); usage: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "variables: PYTEST_ARGS, DEMO_ARGS; kubectl: $(KUBECTL)"

venv: $(VENV_STAMP) ## create .venv (python3.11) and pip install -e '.[test]'

$(VENV_STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

controlplane: ## build etcd, kube-{apiserver,controller-manager,scheduler}, kubectl, kube-apiserver v1.36.3 and kube-{apiserver,scheduler} v1.38.0-beta.0 into the cache (once; slow the first time)
	hack/build-controlplane.sh

operators: ## build KubeRay's ray-operator v1.5.0, Kubeflow's training-operator v1.8.1, Kueue v0.17.0, Karpenter v1.15.0 (kwok provider) and kwok v0.8.0 with their CRDs into the cache (once)
	hack/build-operators.sh

# (wildcard: git does not keep an empty tests/unit in a fresh clone)
test: venv controlplane operators ## unit and integration tests (real etcd, kube-apiserver, kube-controller-manager, the operators)
	$(VENV)/bin/pytest -q $(PYTEST_ARGS) $(wildcard tests/unit tests/integration)

test-unit: venv ## unit tests only, no control plane
	$(VENV)/bin/pytest -q $(PYTEST_ARGS) tests/unit

test-integration: venv controlplane operators ## integration tests only
	$(VENV)/bin/pytest -q $(PYTEST_ARGS) tests/integration

LINT_STAMP := $(VENV)/.troupe-lint-installed
$(LINT_STAMP): pyproject.toml $(VENV_STAMP)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
	@touch $@

# Runs every check even when an earlier one fails, then fails if any did.
lint: $(LINT_STAMP) ## ruff check, ruff format --check, mypy, lint-imports, CRDs and docs/configuration.md up to date, no function above complexity 20
	@failed=""; \
	echo "lint: ruff check"; $(VENV)/bin/ruff check . || failed="$$failed ruff-check"; \
	echo "lint: ruff format --check"; $(VENV)/bin/ruff format --check --output-format concise . || failed="$$failed ruff-format"; \
	echo "lint: mypy (strict, scheduler/)"; $(VENV)/bin/mypy || failed="$$failed mypy"; \
	echo "lint: lint-imports"; $(VENV)/bin/lint-imports || failed="$$failed lint-imports"; \
	echo "lint: crds/ up to date"; $(VENV)/bin/python hack/gen-crds.py --check || failed="$$failed crds"; \
	echo "lint: docs/configuration.md up to date"; $(VENV)/bin/python hack/gen-config-docs.py --check || failed="$$failed config-docs"; \
	echo "lint: radon cc (no function above complexity 20 in scheduler/)"; complex=$$($(VENV)/bin/radon cc -n D -s scheduler) && [ -z "$$complex" ] || { echo "$$complex"; failed="$$failed complexity"; }; \
	if [ -n "$$failed" ]; then echo "lint: FAILED:$$failed"; exit 1; fi; \
	echo "lint: all checks passed"

image: ## build the image ghcr.io/troupe-dev/troupe-scheduler:<pyproject version> with docker, podman or buildah
	hack/image.sh

# Root only (setpriv); the package index is needed for the wheel's dependencies.
image-check: ## no builder needed: wheel into a fresh venv, `troupe --version` as uid 65532, Dockerfile and manifests
	$(PYTHON) hack/image-check.py

demo: venv controlplane ## run hack/demo.py against a local control plane (DEMO_ARGS=...)
	$(VENV)/bin/python hack/demo.py $(DEMO_ARGS)

clean: ## remove .venv and the caches inside the repository (not the control-plane build cache)
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache build dist
	find . -path ./.git -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +

bench: venv ## core scheduling benchmark, no API (BENCH_ARGS="core --quick", "--shapes a,b", "--profile")
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

BENCH_E2E_STAMP := $(VENV)/.troupe-bench-installed
$(BENCH_E2E_STAMP): pyproject.toml $(VENV_STAMP)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	@touch $@

bench-e2e: $(BENCH_E2E_STAMP) controlplane ## troupe vs kube-scheduler vs a raw bind loop on a real API server (BENCH_ARGS="--quick")
	$(VENV)/bin/python -m bench e2e $(BENCH_ARGS)
