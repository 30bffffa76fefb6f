# pdscaler: `make help` lists the targets. Everything runs from a fresh clone.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help venv dynamo-venv lint test unit drill lab-build lab-up lab-down lab-status demo bench bench-diurnal dashboard-preview fmt clean images chart install-yaml

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP) ## Create the virtualenv and install pdscaler with its dev tools

lint: $(STAMP) ## ruff, mypy --strict and the import-linter contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP) ## Format and auto-fix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dynamo-venv: ## NVIDIA Dynamo's planner in its own venv (~/.cache/pdscaler/dynamo-venv; cold ~4 min)
	bash bench/install-dynamo.sh

test: lint lab-build dynamo-venv ## The whole suite: lint, unit tests (on both cores), and lab tests (starts the lab if needed)
	$(BIN)/pytest -n 2 tests/unit; unit=$$?; \
	  $(BIN)/pytest --durations=40 tests/drills tests/lab; lab=$$?; \
	  test $$unit -eq 0 -a $$lab -eq 0

unit: $(STAMP) ## Unit tests of the pure core only (no lab)
	$(BIN)/pytest tests/unit

drill: $(STAMP) lab-build ## Fault drills against the lab: bench/results/reliability.md + README
	rm -rf bench/results/drills
	PDSCALER_DRILL_OUT=bench/results/drills $(BIN)/pytest tests/drills; status=$$?; \
	  $(BIN)/python -m bench.reliability >/dev/null; exit $$status

lab-build: ## Build (or reuse from ~/.cache/pdscaler) the control-plane binaries
	bash operator/pdlab/cluster/build-bins.sh

lab-up: $(STAMP) lab-build ## Start the lab (etcd, apiserver, controller-manager, scheduler, kwok, Prometheus)
	$(BIN)/python -m pdlab up

lab-down: $(STAMP) ## Stop exactly the lab processes that were started
	$(BIN)/python -m pdlab down

lab-status: $(STAMP) ## Show the lab's components
	$(BIN)/python -m pdlab status

demo: $(STAMP) lab-build ## The main job: lab + operator + traffic scenario, pools rebalancing live
	$(BIN)/python -m pdlab demo

bench: $(STAMP) ## Decision-quality and overhead benchmarks: tables in bench/results/
	$(BIN)/python -m bench
	$(BIN)/python -m bench.readme

bench-diurnal: $(STAMP) ## Diurnal traffic, cut to a 60-minute budget (python -m bench.diurnal --full: all of it): bench/results/diurnal.md/json
	$(BIN)/python -m bench.diurnal --workers 2
	$(BIN)/python -m bench.readme
	$(BIN)/python -m bench.speed --render

dashboard-preview: $(STAMP) lab-build ## Redraw docs/img/dashboard-preview.png from the dashboard's queries in the lab
	PDSCALER_DASHBOARD_PREVIEW=$(CURDIR)/docs/img/dashboard-preview.png \
	  $(BIN)/pytest -q tests/lab/test_lab_grafana_dashboard.py

images: ## Build the operator and router images: REGISTRY=<registry> [PUSH=1] [DRY_RUN=1] (podman, buildah or docker)
	REGISTRY="$(REGISTRY)" PUSH="$(PUSH)" DRY_RUN="$(DRY_RUN)" BUILDER="$(BUILDER)" bash deploy/router/build-images.sh

# helm: the version pinned in operator/pdlab/cluster/versions.env, as make lab-build builds it
HELM ?= $(shell $(BIN)/python -c 'from pdlab.cluster.config import helm_path; print(helm_path())' 2>/dev/null || echo helm)
INSTALL_YAML ?= deploy/install.yaml

chart: $(STAMP) ## Package the Helm chart: dist/pdscaler-<version>.tgz (docs/install.md, "Packaging and versions")
	$(HELM) lint --strict charts/pdscaler
	$(HELM) package charts/pdscaler --destination dist

install-yaml: $(STAMP) ## Render deploy/install.yaml from the chart (kubectl users; a unit test checks it is current)
	@{ printf '%s\n' \
	  '# pdscaler for kubectl users, rendered from charts/pdscaler by `make install-yaml` (do not edit:' \
	  '# tests/unit/test_install_yaml.py fails when it differs from the chart). The chart'"'"'s defaults,' \
	  '# watching namespace serving (create it first), allowing Prometheus at' \
	  '# http://prometheus.monitoring:9090 (PDSCALER_PROMETHEUS_ALLOWED_URLS below), image' \
	  '# pdscaler/pdscaler:<appVersion> (prefix your registry). docs/install.md, "Without Helm".' \
	  '---' 'apiVersion: v1' 'kind: Namespace' 'metadata:' '  name: pdscaler-system'; \
	  $(HELM) template pdscaler charts/pdscaler -n pdscaler-system --skip-tests \
	    --set 'watchNamespaces={serving}'; } > $(INSTALL_YAML)
	@echo "wrote $(INSTALL_YAML)"

clean: ## Remove the virtualenv and caches (not the lab binary cache)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
