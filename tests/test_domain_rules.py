"""Fast service-level tests of the delivery rules: Dramatiq's StubBroker and an in-process worker
instead of RabbitMQ and worker processes, the real PostgreSQL and Redis, providers faked at the
network boundary. A rule here is checked in milliseconds to a second; the end-to-end tests beside
these prove the same paths through the real broker and processes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from notifications import actors, services
from notifications.conf import BULK_QUEUE, HIGH_QUEUE
from notifications.models import AttemptOutcome, DeadLetter, DeadLetterReason, Notification, Status

from .factories import accept_notification, make_api_client, make_recipient
from .fakes import FakeProviderServer, Reply, override_notifications, provider_server_fixture  # noqa: F401  (fixture)
from .stub_broker import drain as drain_queues
from .stub_broker import stub_broker_with, stub_worker_on

DELIVERY_ACTORS = (actors.deliver_notification, actors.deliver_bulk_notification)


@pytest.fixture
def stub_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubBroker]:
    """A StubBroker with the delivery actors, made the global broker for this test."""
    with stub_broker_with(monkeypatch, DELIVERY_ACTORS) as broker:
        yield broker


@pytest.fixture
def stub_worker(stub_broker: StubBroker, transactional_db: None) -> Iterator[dramatiq.Worker]:
    with stub_worker_on(stub_broker) as worker:
        yield worker


def drain(broker: StubBroker, worker: dramatiq.Worker) -> None:
    drain_queues(broker, worker, (HIGH_QUEUE, BULK_QUEUE))


def test_accepting_enqueues_one_message_on_the_queue_of_its_priority(
    stub_broker: StubBroker, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    client, _ = make_api_client()
    with django_capture_on_commit_callbacks(execute=True):
        high = accept_notification(client)
        bulk = accept_notification(client, priority="bulk")
    [high_message] = [dramatiq.Message.decode(data) for data in stub_broker.queues[HIGH_QUEUE].queue]
    [bulk_message] = [dramatiq.Message.decode(data) for data in stub_broker.queues[BULK_QUEUE].queue]
    assert (high_message.actor_name, list(high_message.args)) == ("deliver_notification", [str(high.pk)])
    assert (bulk_message.actor_name, list(bulk_message.args)) == ("deliver_bulk_notification", [str(bulk.pk)])
    assert Notification.objects.get(pk=high.pk).status == Status.QUEUED
    assert Notification.objects.get(pk=bulk.pk).enqueued_at is not None


def test_rate_limit_waits_do_not_spend_the_retries_of_an_unexpected_error(
    stub_broker: StubBroker, stub_worker: dramatiq.Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four waits for a send slot, then an error nobody modelled: the error still gets all of its
    broker retries (Dramatiq's Retries middleware counts every exception, Retry included)."""
    calls: list[str] = []
    published: list[float | None] = []

    def deliver(
        *, notification_ids: list[Any], backlog_priority: str | None = None, published_ms: float | None = None
    ) -> dict[str, services.DeliveryOutcome]:
        assert notification_ids == ["any-id"]
        published.append(published_ms)
        calls.append("wait" if len(calls) < 4 else "error")
        if len(calls) <= 4:
            raise services.SendRateLimited(0.001, notification_ids=notification_ids)
        raise RuntimeError("the database said something odd")

    monkeypatch.setattr(services, "notifications_deliver", deliver)
    actors.deliver_notification.send_with_options(args=("any-id",), min_backoff=1, max_backoff=5)
    drain(stub_broker, stub_worker)

    assert calls == ["wait"] * 4 + ["error"] * (1 + actors.UNEXPECTED_ERROR_RETRIES)
    # Only its first delivery is told when it was published: a message coming back keeps that
    # timestamp but may carry rows a backlog claim gave back since (services/delivery/backlog.py).
    assert published[0] is not None and published[1:5] == [None] * 4
    [failed] = stub_broker.dead_letters
    assert failed.options["retries"] == actors.UNEXPECTED_ERROR_RETRIES + 1


def test_a_destination_that_only_answers_429_is_dead_after_its_budget_with_one_attempt_row_each(
    stub_broker: StubBroker, stub_worker: dramatiq.Worker, provider_server: FakeProviderServer
) -> None:
    too_many = Reply(429, {"code": 20429, "message": "Too Many Requests", "status": 429}, {"Retry-After": "30"})
    provider_server.reply_next(*[too_many] * 10)
    client, _ = make_api_client()
    make_recipient(client, "u1", phone="+14155550100")
    with override_notifications(RETRY_MAX_ATTEMPTS=3, RETRY_BASE_SECONDS=0.01, RETRY_CAP_SECONDS=0.05):
        notification = accept_notification(client, channel="sms", to="")
        services.notification_enqueue(notification_id=notification.pk)
        # Each retry is a delayed message (the backoff is far below BROKER_DELAY_MAX_SECONDS), so
        # the stub's delay queue carries the notification through its whole budget.
        drain(stub_broker, stub_worker)

    notification.refresh_from_db()
    assert notification.status == Status.DEAD
    assert notification.attempt_count == 3
    assert list(notification.attempts.values_list("outcome", flat=True)) == [AttemptOutcome.TRANSIENT_ERROR] * 3
    assert len(provider_server.requests) == 3
    assert DeadLetter.objects.filter(notification=notification, reason=DeadLetterReason.RETRIES_EXHAUSTED).count() == 1


def test_a_429_retry_after_beyond_the_cap_waits_only_the_cap(provider_server: FakeProviderServer, db: None) -> None:
    provider_server.reply_next(Reply(429, {"message": "slow down"}, {"Retry-After": "86400"}))
    client, _ = make_api_client()
    with override_notifications(RETRY_MAX_ATTEMPTS=3, RETRY_BASE_SECONDS=1, RETRY_CAP_SECONDS=60):
        notification = accept_notification(client, channel="sms", to="+14155550100")
        outcome = services.notification_deliver(notification_id=notification.pk)
    notification.refresh_from_db()
    assert outcome.outcome == "retrying"
    assert notification.attempt_count == 1
    wait = (notification.next_attempt_at - notification.updated_at).total_seconds()
    assert 59 <= wait <= 61
