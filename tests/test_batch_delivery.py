"""Delivery of the ids one message carries (a batch accept, a broadcast, a sweep): one statement
claims them, one transaction records their deliveries, and each keeps its own attempt, outcome,
retry and send slot. Against the real PostgreSQL, with a local SMTP server and a fake Twilio."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from notifications import services
from notifications.conf import get_config
from notifications.models import AttemptOutcome, DeadLetter, DeliveryAttempt, Notification, OutcomeCount, Status
from notifications.services.delivery import send as delivery

from .factories import make_api_client
from .fakes import (  # noqa: F401  (fixtures)
    FakeProviderServer,
    LocalSmtpServer,
    Reply,
    override_notifications,
    provider_server_fixture,
    provider_settings,
    smtp_server_fixture,
    twilio_error,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_publish(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The delivery messages the batch accept would publish, kept here instead."""
    published: list[str] = []

    def keep(*, notification_ids: list[str], priority: str, delay_seconds: float = 0.0, carriers: object = None) -> None:
        published.extend(notification_ids)

    monkeypatch.setattr(services.records.outbox, "delivery_message_send", keep)
    yield published


def accept_batch(count: int, *, channel: str = "email", tag: str = "b") -> list[str]:
    client, _ = make_api_client()
    items = []
    for n in range(count):
        to = f"u{n}@example.com" if channel == "email" else f"+1415555{n:04d}"
        payload = {"user_id": f"u{n}", "message": f"hello {n}", "to": to, "channel": channel}
        items.append(
            services.BatchItem(
                request=services.NotificationRequest(**payload),
                idempotency_key=f"{tag}-{n}",
                fingerprint=services.request_fingerprint(payload),
            )
        )
    results = services.notification_accept_batch(client=client, items=items)
    return [result.notification_id for result in results if isinstance(result, services.AcceptResult)]


def statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"].split()[0].upper() for q in queries.captured_queries]


def test_twenty_ids_are_claimed_in_one_statement_and_recorded_in_one_transaction(
    no_publish: list[str], smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = accept_batch(20)
    assert sorted(no_publish) == sorted(ids)
    monkeypatch.setattr(delivery, "FIRST_CHUNK", 50)  # one chunk, so the statements are exact
    with CaptureQueriesContext(connection) as queries:
        outcomes = services.notifications_deliver(notification_ids=ids)
    # The same statements as one notification's delivery (tests/test_hot_path_queries.py), for 20:
    # the rows' UPDATE carries the dashboard's counters (WITH ... INSERT ... ON CONFLICT).
    assert statements(queries) == ["SELECT", "WITH", "BEGIN", "UPDATE", "WITH", "COMMIT"], queries.captured_queries
    assert OutcomeCount.objects.filter(status=Status.DELIVERED).aggregate(n=Sum("count"))["n"] == 20
    assert {pk: o.outcome for pk, o in outcomes.items()} == dict.fromkeys(ids, "delivered")
    assert sorted(mail.rcpt_tos[0] for mail in smtp_server.received) == sorted(f"u{n}@example.com" for n in range(20))
    rows = Notification.objects.filter(pk__in=ids)
    assert {(n.status, n.attempt_count) for n in rows} == {(Status.DELIVERED, 1)}
    # Each has its own provider message id and its own attempt row.
    assert len({n.provider_message_id for n in rows}) == 20
    attempts = DeliveryAttempt.objects.filter(notification_id__in=ids)
    assert Counter(a.notification_id for a in attempts) == Counter({n.pk: 1 for n in rows})
    assert {(a.number, a.outcome, a.provider_response) for a in attempts} == {(1, AttemptOutcome.DELIVERED, "accepted by SMTP")}


def test_the_next_chunk_follows_the_providers_pace_not_a_slow_claim(
    no_publish: list[str], smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A database slow to answer the claim says nothing about how long the next sends take: a
    # chunk's size follows the providers' calls alone, so a busy moment does not shrink the next
    # claims (each claim, record and read of its own) for the rest of a drain.
    ids = accept_batch(10)
    monkeypatch.setattr(delivery, "_send_seconds", {})
    real_claim = delivery._notifications_claim

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)  # the database, busy; not a wait for work
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(delivery, "_notifications_claim", slow_claim)
    outcomes = services.notifications_deliver(notification_ids=ids)
    assert {o.outcome for o in outcomes.values()} == {"delivered"}
    # The local SMTP server answers in milliseconds: the next chunk is a whole batch.
    assert delivery._send_seconds["email"] < 0.1, delivery._send_seconds
    assert delivery._paced_chunk("email") == get_config().delivery_batch_size


def test_each_notification_of_a_batch_keeps_its_own_outcome_retry_and_dead_letter(
    no_publish: list[str], provider_server: FakeProviderServer
) -> None:
    with override_notifications(**provider_settings(provider_server)):
        ids = accept_batch(5, channel="sms")
        services.notification_cancel(client=Notification.objects.get(pk=ids[4]).client, notification_id=ids[4])
        provider_server.reply_next(
            Reply(201, {"sid": "SM1", "status": "queued"}),
            twilio_error(400, 21211, "The 'To' number is not a valid phone number."),
            twilio_error(503, 20503, "Service unavailable"),
            Reply(201, {"sid": "SM4", "status": "queued"}),
        )
        outcomes = services.notifications_deliver(notification_ids=ids)
    assert [outcomes[pk].outcome for pk in ids] == ["delivered", "failed", "retrying", "delivered", "skipped"]
    rows = {str(n.pk): n for n in Notification.objects.filter(pk__in=ids)}
    assert [rows[pk].status for pk in ids] == [
        Status.DELIVERED,
        Status.FAILED,
        Status.RETRYING,
        Status.DELIVERED,
        Status.CANCELLED,
    ]
    assert [rows[pk].provider_message_id for pk in (ids[0], ids[3])] == ["SM1", "SM4"]
    assert rows[ids[2]].next_attempt_at is not None and rows[ids[2]].attempt_count == 1
    assert list(DeadLetter.objects.values_list("notification_id", flat=True)) == [rows[ids[1]].pk]
    assert Counter(str(pk) for pk in DeliveryAttempt.objects.values_list("notification_id", flat=True)) == Counter(ids[:4])
    # The retry is its own message, one id, published after its commit.
    assert no_publish.count(ids[2]) == 2


def test_a_batch_keeps_to_the_rate_limit_and_gives_back_what_found_no_slot(
    no_publish: list[str], smtp_server: LocalSmtpServer
) -> None:
    ids = accept_batch(20)
    with override_notifications(RATE_LIMITS="email=5/s"), pytest.raises(services.SendRateLimited) as limited:
        services.notifications_deliver(notification_ids=ids)
    left = limited.value.notification_ids
    sent = [pk for pk in ids if pk not in left]
    # A slot every 200 ms, none reserved more than a second ahead: the first chunk's five, then as
    # many of the next chunk as fit in the second ahead; the rest go back to the queue untouched.
    assert 6 <= len(sent) <= 12 and sent == ids[: len(sent)]
    assert limited.value.retry_after > 0
    assert Notification.objects.filter(pk__in=sent, status=Status.DELIVERED).count() == len(sent)
    waiting = Notification.objects.filter(pk__in=left)
    assert {(n.status, n.attempt_count) for n in waiting} == {(Status.QUEUED, 0)}
    assert not DeliveryAttempt.objects.filter(notification_id__in=left).exists()
    arrivals = sorted(mail.received_at for mail in smtp_server.received)
    # Paced, not a burst: a slot every 200 ms (the first send also opens the SMTP connection, so
    # its arrival may lag its slot by more than the others').
    assert arrivals[-1] - arrivals[0] >= 0.2 * (len(arrivals) - 1) - 0.25


def test_two_workers_with_the_same_batch_send_each_notification_once(no_publish: list[str], smtp_server: LocalSmtpServer) -> None:
    ids = accept_batch(30)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(order: list[str]) -> None:
        try:
            barrier.wait()
            services.notifications_deliver(notification_ids=order)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(order,)) for order in (ids, ids[::-1])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(smtp_server.received) == 30
    assert Notification.objects.filter(pk__in=ids, status=Status.DELIVERED).count() == 30
    assert sorted(Counter(DeliveryAttempt.objects.values_list("notification_id", flat=True)).values()) == [1] * 30


def test_a_sweep_hands_what_is_due_to_the_broker_in_batch_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    from django.utils import timezone

    published: list[list[str]] = []
    monkeypatch.setattr(services.records.outbox, "delivery_message_send", lambda **kwargs: None)  # lost at accept
    ids = accept_batch(120)
    Notification.objects.filter(pk__in=ids).update(enqueued_at=None, status=Status.ACCEPTED)
    monkeypatch.setattr(
        services.records.outbox,
        "delivery_message_send",
        lambda *, notification_ids, priority, delay_seconds=0.0, carriers=None: published.append(notification_ids),
    )
    report = services.notification_sweep(now=timezone.now() + timedelta(seconds=10))
    assert report.enqueued == 120
    # One call for all 120 (outbox.delivery_message_send packs them 50 to a message) and one UPDATE.
    assert [sorted(batch) for batch in published] == [sorted(ids)]
    assert Notification.objects.filter(pk__in=ids, status=Status.QUEUED, enqueued_at__isnull=False).count() == 120
