# The two commands of the README: `make run` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.lock | cut -c1-12)
# Where `make run` serves: `make run ADDRESS=127.0.0.1:8010` when 8000 is taken.
ADDRESS ?= 127.0.0.1:8000

.PHONY: run test test-fast lint format install lock migrate demo bench clean

$(STAMP): requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

migrate: install
	mkdir -p var
	$(PY) manage.py migrate --no-input -v0

demo: migrate
	$(PY) manage.py bootstrap_demo --address $(ADDRESS)

## Bring up API, admin, workers, sweeper (and the event consumer on RabbitMQ) on $(ADDRESS).
run: demo
	$(PY) manage.py runplatform --addrport $(ADDRESS)

## Lint, type-check, the fast tier, then the whole suite against the real PostgreSQL, RabbitMQ and Redis
## (on two pytest-xdist workers, then the tests that stop a shared service alone: scripts/test.sh).
## The fast tier runs with only the venv and the base system on PATH: it must need no tool that a
## session installed by hand (tests/external_tools.py guards the rest).
test: install lint
	PATH="$(CURDIR)/$(VENV)/bin:/usr/bin:/bin" scripts/test-fast.sh -q
	scripts/test.sh

## The domain's rules on the embedded default (SQLite, StubBroker, local-memory cache): no service needed.
test-fast: install
	scripts/test-fast.sh

lint: install
	$(PY) -m ruff check notifications platform tests bench manage.py gunicorn.conf.py
	$(PY) -m ruff format --check notifications platform tests bench manage.py gunicorn.conf.py
	$(PY) -m mypy notifications platform
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_house.py notifications platform

format: install
	$(PY) -m ruff check --fix notifications platform tests bench manage.py gunicorn.conf.py
	$(PY) -m ruff format notifications platform tests bench manage.py gunicorn.conf.py

## Re-resolve the dependencies of pyproject.toml into requirements.lock.
lock:
	rm -rf /tmp/lock-venv && $(PYTHON) -m venv /tmp/lock-venv
	/tmp/lock-venv/bin/pip install -q --upgrade pip
	/tmp/lock-venv/bin/pip install -q ".[dev]"
	/tmp/lock-venv/bin/pip freeze --exclude notification-platform > requirements.lock

## Benchmarks by hand (never in `make test`): bench/RESULTS.md. PROFILE=1 adds py-spy profiles;
## BENCH_ARGS passes options (python bench/run.py --help), e.g. BENCH_ARGS="--only accept --duration 5".
bench: install
	bench/wrk.sh
	$(PY) bench/run.py $(if $(PROFILE),--profile) $(BENCH_ARGS)

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
