"""A pytest plugin (scripts/test.sh loads it with ``-p tests.xdist_isolation``) that gives each
pytest-xdist worker a RabbitMQ vhost and a Redis key prefix of its own, as pytest-django gives it a
database of its own (``test_…_gw0``): two workers never see each other's messages, queues, rate
limits or cached tokens.

platform/settings.py reads the environment once, at import, and pytest-django imports it while
the initial conftests load, so the worker's names go into the environment first (``tryfirst``);
every process a test starts (tests/helpers.py ``platform_env``) inherits them. scripts/test.sh
creates the vhosts ``<this run's vhost>-gw0``, ``-gw1``, … and removes them and the keys after."""

from __future__ import annotations

import os
from urllib.parse import quote, unquote, urlsplit

import pytest


def worker_vhost_url(broker_url: str, worker: str) -> str:
    """``broker_url`` with ``-<worker>`` added to its vhost name (the rest of the URL kept)."""
    parts = urlsplit(broker_url)
    vhost = unquote(parts.path[1:]) or "/"
    return parts._replace(path="/" + quote(f"{vhost}-{worker}", safe="")).geturl()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    broker_url = os.environ.get("BROKER_URL", "")
    if not worker or not broker_url.startswith("amqp"):
        return  # the controller, a run without xdist, or the embedded default: nothing shared
    os.environ["BROKER_URL"] = worker_vhost_url(broker_url, worker)
    os.environ["RABBITMQ_VHOST"] = unquote(urlsplit(os.environ["BROKER_URL"]).path[1:])
    os.environ["CACHE_KEY_PREFIX"] = f"{os.environ.get('CACHE_KEY_PREFIX', 'notifications')}-{worker}"
