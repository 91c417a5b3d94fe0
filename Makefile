# Habits: `make demo`, `make test`, `make test-unit`, `make lint`, `make bench`. Every target sets itself up.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-unit test-quick lint format bench bench-quick docs docs-config dist release-check clean

$(BIN)/relay: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,bench,docs]"
	touch $(BIN)/relay

setup: $(BIN)/relay

# The demo needs the runtime dependencies only: its own virtualenv, without the dev and bench extras.
DEMO_VENV ?= .venv-demo

$(DEMO_VENV)/bin/relay: pyproject.toml
	$(PY) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/pip install --quiet -e .
	touch $(DEMO_VENV)/bin/relay

demo: $(DEMO_VENV)/bin/relay
	$(DEMO_VENV)/bin/relay demo

# Three at a time (pytest-xdist: on two cores the third fills the others' waits on servers and
# subprocesses; four kept the CPU 90% busy and made load-sensitive fault tests flaky, as
# docs/development.md says), then the timing-sensitive tests (marker `serial`: latency bounds,
# pauses) alone, since a second test on the same two cores would distort what they measure.
test: setup
	$(BIN)/pytest -n 3 --dist loadfile -m "not serial" --durations=20
	$(BIN)/pytest -m serial --durations=10

# The fast tier, with no server: the unit tests and the documentation's examples (which run on the
# embedded default, SQLite and filesystem://), two at a time, each file or page on one worker
# (a page's blocks share a namespace). RELAY_TEST_NO_SERVICES fails any test that reaches for a
# server, up or not, and leaves out a page with a block that needs one (tests/support/services.py).
test-unit: setup
	RELAY_TEST_NO_SERVICES=1 $(BIN)/pytest -n 2 --dist loadfile tests/unit README.md docs

test-quick: setup
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow and not serial"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/python -m bench --quick

# The documentation site into site/, failing on any warning (a broken link or anchor included).
# The configuration page is generated from relay.config.Settings first, so it cannot drift.
docs: setup docs-config
	$(BIN)/mkdocs build --strict --site-dir site

docs-config: setup
	$(BIN)/python -m tools.settings_page docs/configuration.md

# The release's files: sdist and wheel into dist/, their metadata and README checked by twine.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# The wheel as a user gets it: a fresh virtualenv with the runtime dependencies only, `relay demo`
# run from a folder away from the checkout (whose relay/ would otherwise shadow the wheel).
WHEEL_VENV ?= .venv-wheel

release-check: dist
	rm -rf $(WHEEL_VENV)
	$(PY) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/pip install --quiet dist/*.whl
	run=$$(mktemp -d) && cd "$$run" && $(CURDIR)/$(WHEEL_VENV)/bin/relay demo && rm -rf "$$run"
	# relay migrate --check and --sql from the wheel: not at head (1), migrated, at head (0),
	# the SQL of the last revision for a DBA.
	run=$$(mktemp -d) && cd "$$run" && export RELAY_DATABASE_URL="sqlite:///$$run/check.sqlite3" \
	  RELAY_BROKER_URL=memory:// && relay=$(CURDIR)/$(WHEEL_VENV)/bin/relay \
	  && { $$relay migrate --check; test $$? -eq 1; } && $$relay migrate && $$relay migrate --check \
	  && $$relay migrate --sql --from 0014 | grep "expires_at" >/dev/null && rm -rf "$$run"

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(WHEEL_VENV) dist .mypy_cache .ruff_cache .pytest_cache relay.sqlite3* relay-broker* site
