# rStar2-Agent reproducibility kit. `make reproduce` runs the main job, `make test` the tests.
# Both depend on `setup`, which is idempotent and quick when already done.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= tiny
RUN ?= main
PYTEST_ARGS ?=
APT_PACKAGES := bubblewrap iproute2 texlive-xetex texlive-fonts-recommended texlive-plain-generic pandoc poppler-utils \
                librsvg2-bin fonts-dejavu-core fonts-wqy-microhei chromium chromium-driver
STAMP := $(VENV)/.kit-installed
APT_STAMP := $(VENV)/.kit-apt
# pip's "[notice] A new release of pip is available" banner (a WARNING, so -q keeps it) after every
# install: the venv's pip is the one `make setup` chose, so the notice names nothing to act on here.
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup test test-fast test-verl reproduce report lint clean selftest

setup: $(STAMP) $(APT_STAMP)

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip

# torch first, pinned to the CPU wheel that installs offline on CPU machines; a GPU user who
# already has a CUDA torch in the venv keeps it (the range in pyproject.toml admits it).
# Then rfc3987-syntax goes: nbformat's jsonschema[format-nongpl] pulls it in for the `iri` formats (no schema the kit,
# Jupyter or Ray validates uses them), and it builds ~35 Lark parsers at import, ~2 s of CPU in every process that
# imports jsonschema: every Ray worker and VERL process, ~8 per VERL launch (python-jsonschema/jsonschema#1428).
$(STAMP): pyproject.toml Makefile | $(VENV)/bin/python
	@if ! $(PY) -c 'import torch' 2>/dev/null; then $(VENV)/bin/pip install -q torch==2.13.0; fi
	$(VENV)/bin/pip install -q -e '.[dev]'
	@if $(PY) -c 'import importlib.util as u, sys; sys.exit(u.find_spec("rfc3987_syntax") is None)'; then \
	  $(VENV)/bin/pip uninstall -y -q rfc3987-syntax; fi
	@touch $@

# Debian packages: bubblewrap (sandbox isolation), TeX + pandoc (notebook PDFs), poppler (PDF checks),
# rsvg-convert (SVG outputs in the PDF), DejaVu + WenQuanYi fonts (box drawing, arrows, Greek, CJK in the PDF).
# Rechecked when this Makefile changes (a package added to the list is installed on the next setup).
$(APT_STAMP): Makefile | $(VENV)/bin/python
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	elif command -v apt-get >/dev/null && command -v sudo >/dev/null; then \
	  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else \
	  echo "WARNING: cannot install Debian packages:$$missing (no apt/root). The sandbox needs bubblewrap;"; \
	  echo "         PDFs fall back to matplotlib without TeX. Install them with your package manager."; \
	fi
	@touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# The inner loop: everything but the slow, VERL-on-CPU and browser tests (under 5 minutes on 2 cores).
test-fast: setup
	$(PY) -m pytest -m 'not gpu and not slow and not verl_cpu and not browser' $(PYTEST_ARGS)

# Only VERL's own trainer on CPU (Ray in a private network namespace, minutes): issue #15's tests, also in `make test`.
test-verl: setup
	$(PY) -m pytest -m verl_cpu $(PYTEST_ARGS)

reproduce: setup
	$(PY) -m kit reproduce --profile $(PROFILE) --run $(RUN)

report: setup
	$(PY) -m kit report --profile $(PROFILE) --run $(RUN)

selftest: setup
	$(PY) -m kit selftest

lint: setup
	$(VENV)/bin/ruff check kit tests benchmarks

clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis build dist *.egg-info runs
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
	rm -rf reports/*/
