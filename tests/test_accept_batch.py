"""A batch is accepted item by item in its answers, but written and published together: one read
of the batch's recipients and one of its suppressions, one statement inserting the keys and the
notifications whose keys went in (its own commit), one round trip to RabbitMQ for the messages;
a read of the keys only for the items whose key was taken."""

from __future__ import annotations

import datetime

import dramatiq
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications import services
from notifications.conf import HIGH_QUEUE
from notifications.errors import IdempotencyConflict, ValidationFailed
from notifications.models import IdempotencyKey, Notification, Status

from .factories import make_api_client

pytestmark = pytest.mark.django_db(transaction=True)


def item(n: int, *, key: str | None = None, **fields: str) -> services.BatchItem:
    payload = {"user_id": f"u{n}", "message": f"hello {n}", "to": f"u{n}@example.com", **fields}
    return services.BatchItem(
        request=services.NotificationRequest(**payload),
        idempotency_key=key or f"batch-{n}",
        fingerprint=services.request_fingerprint(payload),
    )


def drain_message_ids(broker: dramatiq.Broker, queue: str) -> list[tuple[str, ...]]:
    """Take every ready message off ``queue``; the notification ids each carries."""
    carried = []
    while True:
        _, _, body = broker.channel.basic_get(queue=queue, auto_ack=True)
        if body is None:
            return carried
        carried.append(tuple(dramatiq.Message.decode(body).args))


def test_a_batch_is_two_reads_one_write_statement_and_one_publish_with_an_answer_per_item(broker: dramatiq.Broker) -> None:
    client, _ = make_api_client()
    stored = services.notification_accept(
        client=client, request=item(0).request, idempotency_key="batch-0", fingerprint=item(0).fingerprint
    )
    batch = [
        item(1),
        item(0),  # replays the stored request
        item(2, to="not-an-email"),  # its own 400
        item(3),
        item(1),  # the same key and body again within the batch: the first item's answer
        item(4, key="batch-3"),  # the same key as item 3 with another body: 422
    ]
    with CaptureQueriesContext(connection) as queries:
        results = services.notification_accept_batch(client=client, items=batch)

    first, replay, invalid, third, repeat, conflict = results
    assert isinstance(first, services.AcceptResult) and not first.replayed and first.body["status"] == Status.QUEUED
    assert isinstance(replay, services.AcceptResult) and replay.replayed and replay.body == stored.body
    assert isinstance(invalid, ValidationFailed) and invalid.extra["field"] == "to"
    assert isinstance(third, services.AcceptResult) and not third.replayed
    assert isinstance(repeat, services.AcceptResult) and repeat.replayed and repeat.body == first.body
    assert isinstance(conflict, IdempotencyConflict)
    sql = [q["sql"] for q in queries.captured_queries]
    statements = [text.split()[0].upper() for text in sql]
    # The batch's recipients and its addresses' suppressions (the category was read, and cached, by
    # the first accept); the keys and notifications in one statement, committed on its own (no
    # BEGIN/COMMIT round trips); then the keys of the items not accepted as new (a replay, a
    # repeat, a conflict, the refused one in case its key was stored), read once.
    assert statements == ["SELECT", "SELECT", "WITH", "SELECT"], sql
    assert "notifications_recipient" in sql[0] and "notifications_suppression" in sql[1]
    assert sql[2].count("INSERT INTO") == 2 and "ON CONFLICT" in sql[2]
    assert "notifications_idempotencykey" in sql[3]
    assert Notification.objects.count() == 3
    assert set(IdempotencyKey.objects.values_list("key", flat=True)) == {"batch-0", "batch-1", "batch-3"}
    # The stored one's message plus one message carrying the batch's two ids.
    assert sorted(len(ids) for ids in drain_message_ids(broker, HIGH_QUEUE)) == [1, 2]


def test_a_batch_of_a_hundred_is_published_in_one_rabbitmq_transaction(
    broker: dramatiq.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_api_client()
    commits: list[int] = []
    from notifications import broker_batch

    original = broker_batch._transaction_channel

    def counting(rabbit):  # type: ignore[no-untyped-def]
        channel = original(rabbit)
        real_commit = channel.channel.tx_commit
        monkeypatch.setattr(channel.channel, "tx_commit", lambda: (commits.append(1), real_commit())[1])
        return channel

    monkeypatch.setattr(broker_batch, "_transaction_channel", counting)
    results = services.notification_accept_batch(client=client, items=[item(n) for n in range(100)])
    assert all(isinstance(r, services.AcceptResult) and not r.replayed for r in results)
    assert commits == [1]
    # DELIVERY_BATCH_SIZE (50) ids a message: a worker claims each message's ids in one statement.
    carried = drain_message_ids(broker, HIGH_QUEUE)
    assert [len(ids) for ids in carried] == [50, 50]
    assert sorted(i for ids in carried for i in ids) == sorted(r.notification_id for r in results)
    assert Notification.objects.filter(status=Status.QUEUED, enqueued_at__isnull=False).count() == 100


def test_an_expired_key_in_a_batch_is_free_again_as_for_a_single_accept(broker: dramatiq.Broker) -> None:
    from datetime import timedelta

    from django.utils import timezone

    client, _ = make_api_client()
    first = services.notification_accept(
        client=client, request=item(7).request, idempotency_key="batch-7", fingerprint=item(7).fingerprint
    )
    IdempotencyKey.objects.filter(key="batch-7").update(expires_at=timezone.now() - timedelta(seconds=1))
    [again] = services.notification_accept_batch(client=client, items=[item(7, message="a new body")])
    assert isinstance(again, services.AcceptResult) and not again.replayed
    assert again.notification_id != first.notification_id
    assert Notification.objects.count() == 2
    assert IdempotencyKey.objects.get(key="batch-7").response_body == again.body


def test_a_batch_while_the_database_is_down_answers_503_not_a_500_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError
    from rest_framework.test import APIClient

    _, token = make_api_client()

    def database_gone(**kwargs: object) -> object:
        raise OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused")

    monkeypatch.setattr(services, "notification_accept_batch", database_gone)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"notifications": [{"user_id": f"u{n}", "to": f"u{n}@example.com", "message": "hi"} for n in range(3)]}
    response = api.post("/api/v1/notifications/batch", body, format="json")
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "unavailable" and int(response["Retry-After"]) > 0
    assert Notification.objects.count() == 0


def test_an_address_suppressed_at_accept_in_a_batch_is_counted_once(broker: dramatiq.Broker) -> None:
    from prometheus_client import REGISTRY

    from notifications.models import Suppression

    def counted() -> float:
        return (
            REGISTRY.get_sample_value("notifications_suppressed_total", {"channel": "email", "reason": "bounced", "mode": "live"})
            or 0.0
        )

    client, _ = make_api_client()
    Suppression.objects.create(client=client, channel="email", address="u2@example.com", reason="bounced")
    before = counted()
    kept, suppressed = services.notification_accept_batch(client=client, items=[item(1), item(2)])
    assert isinstance(suppressed, services.AcceptResult) and suppressed.body["status"] == Status.SUPPRESSED
    assert isinstance(kept, services.AcceptResult) and kept.body["status"] == Status.QUEUED
    assert counted() == before + 1


def test_a_notification_written_by_the_batch_statement_reads_back_as_the_orms_save_writes_it(broker: dramatiq.Broker) -> None:
    # The group's statement dumps rows to JSON as they are (sql._insert_select): what the field's
    # get_prep_value would have done must come out the same, to the microsecond and the character.
    client, _ = make_api_client()
    send_at = timezone.now() + datetime.timedelta(hours=1, microseconds=123457)
    fields = {
        "message": 'Größe 📦 "quoted" \\ back\nline',
        "subject": "Bestellung — 発送済み",
        "metadata": {"nested": {"list": [1, 2.5, None, True, "ü"]}, "empty": {}},
        "send_at": send_at,
        "priority": "low",
    }
    (batched,) = services.notification_accept_batch(client=client, items=[item(1, **fields)])
    saved = services.notification_accept(
        client=client, request=item(2, **fields).request, idempotency_key="batch-2", fingerprint=item(2, **fields).fingerprint
    )
    assert isinstance(batched, services.AcceptResult)
    one, other = (Notification.objects.get(pk=result.notification_id) for result in (batched, saved))
    differ = {"id", "user_id", "address", "idempotency_key", "created_at", "updated_at", "next_attempt_at", "enqueued_at"}
    differ |= {"headers", "trace_id"}  # the unsubscribe link names the user; each request its own trace
    for field in Notification._meta.concrete_fields:
        if field.name not in differ:
            assert getattr(one, field.attname) == getattr(other, field.attname), field.name
    assert one.send_at == other.send_at == send_at and one.next_attempt_at == send_at
    assert one.metadata == fields["metadata"] and one.message == fields["message"]
