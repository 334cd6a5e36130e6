# Two entry points a newcomer needs: `make app` and `make test`.
# Both create (or refresh) .venv from nothing, then run. The stamp file makes a second run fast:
# pip runs again only when pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hbmsim-installed

.PHONY: app test lint bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "hbmsim needs Python 3.11 or newer (found %s)" % sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

app: $(STAMP)
	$(BIN)/streamlit run app.py --browser.gatherUsageStats false

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/counts.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/impls.py
	$(BIN)/python bench/app.py
	$(BIN)/python bench/hostile.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
