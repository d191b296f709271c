"""Dramatiq's StubBroker in place of RabbitMQ, for the fast service-level tests: the actors a test
needs declared on it, it made the global broker for the test, an in-process worker on it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import dramatiq
import pytest
from django_dramatiq.middleware import DbConnectionsMiddleware
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage, Retries


@contextlib.contextmanager
def stub_broker_with(monkeypatch: pytest.MonkeyPatch, actors: Iterable[Any]) -> Iterator[StubBroker]:
    broker = StubBroker(middleware=[Retries(), CurrentMessage(), DbConnectionsMiddleware()])
    broker.emit_after("process_boot")
    for actor in actors:
        monkeypatch.setattr(actor, "broker", broker)
        broker.declare_actor(actor)
    original = dramatiq.get_broker()
    dramatiq.set_broker(broker)
    try:
        yield broker
    finally:
        dramatiq.set_broker(original)
        broker.close()


@contextlib.contextmanager
def stub_worker_on(broker: StubBroker) -> Iterator[dramatiq.Worker]:
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def drain(broker: StubBroker, worker: dramatiq.Worker, queues: Iterable[str]) -> None:
    """Until every message of ``queues`` (and what they enqueue there) is processed."""
    for queue in queues:
        broker.join(queue, timeout=20_000, fail_fast=False)
    worker.join()
