"""A batch publish to a queue deleted since this process declared it loses nothing: RabbitMQ
returns the unroutable messages (they are published ``mandatory``), the queue is declared again
and they go once more; when the queue cannot come back, the rows stay for the sweeper."""

from __future__ import annotations

from datetime import timedelta

import dramatiq
import pytest
from django.utils import timezone

from notifications import services
from notifications.broker_batch import MessagesReturned, messages_publish
from notifications.conf import HIGH_QUEUE
from notifications.models import Notification, Status
from notifications.services.records.outbox import delivery_message
from notifications.services.sweeper import notification_sweep

from .factories import make_api_client
from .test_accept_batch import drain_message_ids, item

pytestmark = pytest.mark.django_db(transaction=True)


def _queue_delete(broker: dramatiq.Broker, queue: str) -> None:
    broker.declare_queue(queue, ensure=True)
    broker.channel.queue_delete(queue=queue)


def test_a_batch_whose_queue_was_deleted_lands_in_the_queue_declared_again(broker: dramatiq.Broker) -> None:
    client, _ = make_api_client()
    _queue_delete(broker, HIGH_QUEUE)

    results = services.notification_accept_batch(client=client, items=[item(n) for n in range(60)])

    carried = sorted(pk for ids in drain_message_ids(broker, HIGH_QUEUE) for pk in ids)
    assert carried == sorted(r.notification_id for r in results)
    assert Notification.objects.filter(status=Status.QUEUED, enqueued_at__isnull=False).count() == 60


def test_messages_still_returned_after_a_declare_raise_and_name_their_queue(
    broker: dramatiq.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queue_delete(broker, HIGH_QUEUE)
    # The queue does not come back (declared elsewhere with other arguments, a policy, ...).
    monkeypatch.setattr(broker, "_ensure_queue", lambda name: None)
    messages = [delivery_message(notification_ids=[f"id-{n}"], priority="high") for n in range(3)]
    try:
        with pytest.raises(MessagesReturned, match=HIGH_QUEUE) as raised:
            messages_publish(broker, messages)
        assert [m.message_id for m in raised.value.messages] == [m.message_id for m in messages]
    finally:
        monkeypatch.undo()
        broker.queues_pending.add(HIGH_QUEUE)
        broker.declare_queue(HIGH_QUEUE, ensure=True)


def test_rows_whose_messages_were_returned_are_published_by_the_sweeper_once_the_queue_is_back(
    broker: dramatiq.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_api_client()
    _queue_delete(broker, HIGH_QUEUE)
    monkeypatch.setattr(broker, "_ensure_queue", lambda name: None)
    try:
        # More ids than one message holds (DELIVERY_BATCH_SIZE): the batch publish, not a single enqueue.
        results = services.notification_accept_batch(client=client, items=[item(n) for n in range(60)])
    finally:
        monkeypatch.undo()
        broker.queues_pending.add(HIGH_QUEUE)
    ids = sorted(r.notification_id for r in results)
    # Nothing was taken: every row is left for the sweeper (no enqueued_at).
    assert Notification.objects.filter(pk__in=ids, enqueued_at__isnull=True).count() == 60

    report = notification_sweep(now=timezone.now() + timedelta(minutes=1))

    assert report.requeued + report.enqueued == 60
    assert sorted(pk for message_ids in drain_message_ids(broker, HIGH_QUEUE) for pk in message_ids) == ids
    assert Notification.objects.filter(pk__in=ids, status=Status.QUEUED, enqueued_at__isnull=False).count() == 60
