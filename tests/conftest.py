"""Shared fixtures. The suite runs against the real PostgreSQL, RabbitMQ and Redis that
scripts/test.sh points it at (a database, vhost and key prefix of this run's own)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import dramatiq
import pytest
from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from rest_framework.test import APIClient

from notifications.models import ApiClient

from .factories import make_api_client


def pytest_configure(config: pytest.Config) -> None:
    # The suite is about the real services; refuse to run quietly on the embedded fallbacks.
    missing = [
        name
        for name, ok in (
            ("DATABASE_URL (PostgreSQL)", "postgresql" in settings.DATABASES["default"]["ENGINE"]),
            ("BROKER_URL (RabbitMQ)", not settings.BROKER_IS_EMBEDDED),
            ("REDIS_URL (Redis)", bool(settings.REDIS_URL)),
        )
        if not ok
    ]
    if missing:
        raise pytest.UsageError(
            "the test suite needs the real services; not configured: " + ", ".join(missing) + ". Run it with `make test`."
        )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests marked `fault` break a process or service on purpose and take the longest: they run
    # last (a stable sort keeps every other order, after any plugin's own reordering).
    items.sort(key=lambda item: item.get_closest_marker("fault") is not None)


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
    # delete_pattern honours this run's key prefix; cache.clear() would FLUSHDB other runs' keys.
    cache.delete_pattern("*")  # type: ignore[attr-defined]


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
