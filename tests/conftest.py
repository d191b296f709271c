"""Shared fixtures. The suite runs against the real PostgreSQL, RabbitMQ and Redis that
scripts/test.sh points it at (a database, vhost and key prefix of this run's own, and of each
pytest-xdist worker's: tests/xdist_isolation.py); the fast tier (scripts/test-fast.sh) runs the
tests not marked ``services`` on the embedded default instead."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator

import dramatiq
import pytest
from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from rest_framework.test import APIClient

from notifications.models import ApiClient
from notifications.token_cache import client_changes

from .external_tools import refused, started_commands
from .factories import make_api_client
from .helpers import wait_until

# `make test-fast` (scripts/test-fast.sh) sets this: the fast tier, on the embedded default.
FAST_TIER = os.environ.get("TEST_TIER") == "fast"


def _on_real_services() -> list[str]:
    """The real services this process is configured for."""
    return [
        name
        for name, ok in (
            ("DATABASE_URL (PostgreSQL)", "postgresql" in settings.DATABASES["default"]["ENGINE"]),
            ("BROKER_URL (RabbitMQ)", not settings.BROKER_IS_EMBEDDED),
            ("REDIS_URL (Redis)", bool(settings.REDIS_URL)),
        )
        if ok
    ]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exclusive",
        choices=("include", "exclude", "only"),
        default="include",
        help="tests marked `exclusive` (they stop a service every test process shares): run them too, "
        "leave them out (the parallel phase of scripts/test.sh), or run only them (its serial phase)",
    )


def pytest_configure(config: pytest.Config) -> None:
    real = _on_real_services()
    if FAST_TIER:
        # The fast tier is the domain's rules on SQLite, the StubBroker and the local-memory cache.
        if real:
            raise pytest.UsageError("the fast tier runs on the embedded default; configured: " + ", ".join(real))
        return
    # The full suite is about the real services; refuse to run quietly on the embedded fallbacks.
    missing = {"DATABASE_URL (PostgreSQL)", "BROKER_URL (RabbitMQ)", "REDIS_URL (Redis)"} - set(real)
    if missing:
        raise pytest.UsageError(
            "the test suite needs the real services; not configured: " + ", ".join(sorted(missing)) + ". Run it with `make test`."
        )


def _transactional(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("django_db")
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & {"transactional_db", "live_server"}) or bool(marker and marker.kwargs.get("transaction"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that commits for real (threads, server processes, workers on their own connections)
    # needs PostgreSQL's concurrency: it is a `services` test whatever its module says.
    for item in items:
        if _transactional(item):
            item.add_marker(pytest.mark.services)
        # A test that runs a command `make install` does not bring runs where scripts/test.sh has
        # installed it (tests/external_tools.py): the fast tier needs nothing but Python.
        if _declared_tools(item):
            item.add_marker(pytest.mark.services)
        # So does a test that alone would take a good part of the fast tier's minute and a half.
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.services)
    if FAST_TIER:
        fast = [item for item in items if item.get_closest_marker("services") is None]
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("services") is not None])
        items[:] = fast
        return
    _select_exclusive(config, items)
    # Tests marked `fault` break a process or service on purpose and take the longest: they run
    # last (a stable sort keeps every other order, after any plugin's own reordering).
    items.sort(key=lambda item: item.get_closest_marker("fault") is not None)


def _select_exclusive(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests ``--exclusive`` asks for. A test that stops the machine's RabbitMQ or
    PostgreSQL breaks whatever another pytest-xdist worker is doing meanwhile, so a worker refuses one."""
    choice = config.getoption("exclusive")
    if choice != "include":
        wanted = choice == "only"
        config.hook.pytest_deselected(items=[item for item in items if _exclusive(item) is not wanted])
        items[:] = [item for item in items if _exclusive(item) is wanted]
    if os.environ.get("PYTEST_XDIST_WORKER") and any(_exclusive(item) for item in items):
        raise pytest.UsageError(
            "tests marked `exclusive` cannot run beside other xdist workers: run them with --exclusive=only, without -n"
        )


def _declared_tools(item: pytest.Item) -> set[str]:
    names = {name for marker in item.iter_markers("tool") for name in marker.args}
    if item.get_closest_marker("browser") is not None:
        names.add("chromium")
    return names


@pytest.fixture(autouse=True)
def _only_installed_commands(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test started no program that the tier it runs in does not install first."""
    declared = _declared_tools(request.node)
    # What started since the last test ended: this test's broader fixtures (or a thread left behind).
    problems = refused(started_commands.take(), fast_tier=FAST_TIER, declared=declared)
    yield
    problems += refused(started_commands.take(), fast_tier=FAST_TIER, declared=declared)
    if problems:
        pytest.fail("started a command the suite does not install first:\n" + "\n".join(problems), pytrace=False)


def _exclusive(item: pytest.Item) -> bool:
    return item.get_closest_marker("exclusive") is not None


SEED_MIGRATION = importlib.import_module("notifications.migrations.0006_transactional_category_order_created_template")


@pytest.fixture(autouse=True)
def _seed_rows(request: pytest.FixtureRequest) -> None:
    """The rows migration 0006 makes (the default category every accept needs, the order_created
    template), put back for each test with a database: a transactional test's flush removes them."""
    marker = request.node.get_closest_marker("django_db")
    names = set(request.fixturenames)
    if marker is None and not names & {"db", "transactional_db", "live_server"}:
        return
    transactional = bool(names & {"transactional_db", "live_server"}) or bool(marker and marker.kwargs.get("transaction"))
    request.getfixturevalue("transactional_db" if transactional else "db")
    SEED_MIGRATION.seed(apps, None)


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    yield
    if FAST_TIER:
        # This process's own: the local-memory cache, and the in-process state that stands in for
        # Redis on the embedded default (ids are reused between tests on SQLite).
        cache.clear()
        _embedded_state_reset()
        return
    # delete_pattern honours this run's key prefix; cache.clear() would FLUSHDB other runs' keys.
    cache.delete_pattern("*")  # type: ignore[attr-defined]


def _embedded_state_reset() -> None:
    from notifications import circuit, concurrency, ratelimit
    from notifications.inbox import slots
    from notifications.services.policy import caps

    caps._local = caps._LocalLog()
    circuit._local = circuit._LocalCircuits()
    concurrency._local = concurrency.LocalTurns()
    slots._local = concurrency.LocalTurns()
    slots.process_streams.held = 0
    ratelimit._local = ratelimit._LocalReserver()


@pytest.fixture
def remembering_tokens() -> None:
    """This process listens for API client changes, so a token that authenticated is remembered
    (notifications/token_cache.py). A process's first token lookup only starts the listener, and
    until it listens every request reads its client again: a test that counts what a remembered
    token saves must not depend on an earlier test having started it."""
    wait_until(client_changes.trusted, timeout=10, message="listening for API client changes")


@pytest.fixture
def client_and_token(db: None) -> tuple[ApiClient, str]:
    return make_api_client("acme")


@pytest.fixture
def api(client_and_token: tuple[ApiClient, str]) -> APIClient:
    """A DRF test client authenticated as the API client ``acme``."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {client_and_token[1]}")
    return api


@pytest.fixture
def broker() -> Iterator[dramatiq.Broker]:
    """The real RabbitMQ broker of this run's vhost, emptied before and after the test."""
    broker = dramatiq.get_broker()
    # This thread's connection may have sat unused through other tests longer than RabbitMQ's
    # heartbeat timeout (a blocking connection answers heartbeats only when used), and been closed
    # by the server: each test starts on a fresh one (dramatiq's own deleter closes the old).
    if isinstance(broker, RabbitmqBroker):
        del broker.connection
    broker.flush_all()
    yield broker
    broker.flush_all()


@pytest.fixture
def worker(transactional_db: None, broker: dramatiq.Broker) -> Iterator[dramatiq.Worker]:
    """A Dramatiq worker consuming the real broker in this process (threads)."""
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    yield worker
    worker.stop()
