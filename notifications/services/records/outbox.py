"""Handing a due notification to the broker: the database row is the outbox, a message only a hint."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import dramatiq
from django.utils import timezone

from ... import tracing
from ...broker_batch import messages_publish
from ...conf import delivery_route, get_config
from ...models import (
    Notification,
    Status,
)

logger = logging.getLogger("notifications.services")


def delivery_message_send(
    *, notification_ids: list[str], priority: str, delay_seconds: float = 0.0, carriers: Mapping[str, Any] | None = None
) -> None:
    """Publish delivery messages for ``notification_ids`` to their priority's queue, addressed to
    the delivery actor by name (services never import the actors; ``conf`` names the queues and
    actors). Ids sent together travel together: DELIVERY_BATCH_SIZE to a message, so a worker
    claims and records them in one statement each; several messages go in one AMQP transaction.
    With ``carriers`` (id -> trace context) the ids came from separate requests (a group commit):
    a message carries each id's request's trace (tracing.TRACES_OPTION) and none of its own, and
    a message of one id its request's trace as its own."""
    broker = dramatiq.get_broker()
    messages = delivery_messages(notification_ids=notification_ids, priority=priority, carriers=carriers)
    delay_ms = int(delay_seconds * 1000) or None
    if len(messages) > 1 and delay_ms is None:
        messages_publish(broker, messages)
        return
    for message in messages:
        broker.enqueue(message, delay=delay_ms)


def delivery_messages(
    *, notification_ids: list[str], priority: str, carriers: Mapping[str, Any] | None = None
) -> list[dramatiq.Message[Any]]:
    """The delivery messages of ``notification_ids`` (DELIVERY_BATCH_SIZE to a message), each
    carrying the trace of the request its ids came from (``carriers``; delivery_message_send)."""
    size = get_config().delivery_batch_size
    messages = [
        delivery_message(notification_ids=notification_ids[start : start + size], priority=priority)
        for start in range(0, len(notification_ids), size)
    ]
    if carriers is None:
        return messages
    for message in messages:
        if len(message.args) == 1:  # one request's: in its trace, as that request's own publish would be
            message.options[tracing.TRACE_OPTION] = carriers[message.args[0]]
            continue
        message.options[tracing.TRACE_OPTION] = {}  # not the publisher's: before_enqueue would add it
        message.options[tracing.TRACES_OPTION] = {pk: carriers[pk] for pk in message.args}
    return messages


def delivery_message(*, notification_ids: list[str], priority: str) -> dramatiq.Message[Any]:
    """The delivery message of some notifications, on their priority's queue, for its actor by name."""
    route = delivery_route(priority)
    return dramatiq.Message(
        queue_name=route.queue_name, actor_name=route.actor_name, args=tuple(notification_ids), kwargs={}, options={}
    )


def notification_enqueue(*, notification_id: Any) -> bool:
    """Hand a pending notification to the broker if it is due soon enough; True if a message went.

    Far-future sends and long backoffs stay in the database for the sweeper: Dramatiq keeps a
    delayed message unacked in worker memory until its ETA (dramatiq #827) and RabbitMQ requeues
    deliveries left unacked past its consumer timeout.
    """
    notification = Notification.objects.filter(pk=notification_id).only("id", "status", "priority", "next_attempt_at").first()
    if notification is None or notification.status not in (Status.ACCEPTED, Status.QUEUED, Status.RETRYING):
        return False
    now = timezone.now()
    due_at = notification.next_attempt_at or now
    delay = max(0.0, (due_at - now).total_seconds())
    if delay > get_config().broker_delay_max_seconds:
        return False
    try:
        delivery_message_send(notification_ids=[str(notification.pk)], priority=notification.priority, delay_seconds=delay)
    except Exception:
        # The row stays pending with no enqueued_at, which is exactly what the sweeper looks for.
        logger.warning("could not enqueue notification %s; the sweeper will retry", notification.pk, exc_info=True)
        return False
    fields: dict[str, Any] = {"enqueued_at": now}
    if delay == 0:
        Notification.transition(notification.pk, Status.QUEUED, only_from=[Status.ACCEPTED, Status.QUEUED], **fields)
        Notification.objects.filter(pk=notification.pk, status=Status.RETRYING).update(**fields)
    else:
        Notification.objects.filter(pk=notification.pk, status__in=[Status.ACCEPTED, Status.RETRYING]).update(**fields)
    return True


def notifications_enqueue(*, notification_ids: list[Any]) -> int:
    """Hand many pending notifications to the broker at once (a sweep); how many went. Those due
    now go as batch messages (DELIVERY_BATCH_SIZE ids each, one AMQP transaction a priority) and
    are marked in one UPDATE; one still waiting (a delayed message) goes on its own."""
    rows = list(
        Notification.objects.filter(pk__in=notification_ids, status__in=[Status.ACCEPTED, Status.QUEUED, Status.RETRYING])
        .only("id", "status", "priority", "next_attempt_at")
        .order_by()
    )
    now = timezone.now()
    waiting = [n for n in rows if n.next_attempt_at and n.next_attempt_at > now]
    sent = sum(notification_enqueue(notification_id=n.pk) for n in waiting)
    published, _ = _due_publish([n for n in rows if n not in waiting])
    if published:
        # After the publish, like notification_enqueue: a row a worker claimed meanwhile is left as it is.
        Notification.objects.filter(pk__in=published, status__in=[Status.ACCEPTED, Status.QUEUED]).update(
            status=Status.QUEUED, enqueued_at=now, updated_at=now
        )
        Notification.objects.filter(pk__in=published, status=Status.RETRYING).update(enqueued_at=now)
    return sent + len(published)


def _due_publish(due: list[Notification], carriers: Mapping[str, Any] | None = None) -> tuple[list[Any], list[Any]]:
    """Publish the messages of notifications due now, one round trip a priority; the ids the
    broker took and those it refused (logged: the sweeper tries them again). ``carriers``: the
    trace context of each, when they came from separate requests (delivery_message_send)."""
    published: list[Any] = []
    refused: list[Any] = []
    for priority in sorted({n.priority for n in due}):
        ids = [n.pk for n in due if n.priority == priority]
        try:
            delivery_message_send(notification_ids=[str(pk) for pk in ids], priority=priority, carriers=carriers)
        except Exception:
            logger.warning("could not enqueue a batch of %d notifications; the sweeper will retry", len(ids), exc_info=True)
            refused += ids
        else:
            published += ids
    return published, refused


def notification_enqueued_state(notification: Notification, *, now: datetime) -> float:
    """Give an unsaved notification the state it is written in, so the publish after its commit
    needs no further write: ``queued`` and enqueued when due now, enqueued but still ``accepted``
    when due within BROKER_DELAY_MAX_SECONDS (a delayed message), left for the sweeper beyond.
    Returns the publish delay in seconds. A notification suppressed at accept is never enqueued."""
    if notification.status != Status.ACCEPTED:
        return 0.0
    due_at = notification.next_attempt_at or now
    delay = max(0.0, (due_at - now).total_seconds())
    if delay > get_config().broker_delay_max_seconds:
        return delay
    notification.enqueued_at = now
    if delay == 0:
        notification.status = Status.QUEUED
    return delay


def notification_publish(*, notification: Notification, delay_seconds: float, carriers: Mapping[str, Any] | None = None) -> bool:
    """Publish the delivery message of a notification committed in its enqueued state. When the
    broker refuses, clear ``enqueued_at`` so the sweeper sends it as soon as its grace is over."""
    try:
        delivery_message_send(
            notification_ids=[str(notification.pk)],
            priority=notification.priority,
            delay_seconds=delay_seconds,
            carriers=carriers,
        )
    except Exception:
        logger.warning("could not enqueue notification %s; the sweeper will retry", notification.pk, exc_info=True)
        Notification.objects.filter(pk=notification.pk, enqueued_at=notification.enqueued_at).update(enqueued_at=None)
        return False
    return True


def notifications_publish(*, pending: list[tuple[Notification, float]], carriers: Mapping[str, Any] | None = None) -> None:
    """Publish the delivery messages of notifications committed in their enqueued state, each with
    its delay (notification_enqueued_state): those due now in one round trip a priority, a delayed
    one on its own (a delay is per message). What the broker refuses has its ``enqueued_at``
    cleared, so the sweeper sends it. ``carriers`` (str(id) -> trace context): each in a message
    of its own with its request's trace (a group commit of single accepts)."""
    for notification, delay in pending:
        if delay:
            notification_publish(notification=notification, delay_seconds=delay, carriers=carriers)
    _, refused = _due_publish([notification for notification, delay in pending if not delay], carriers)
    if refused:
        Notification.objects.filter(pk__in=refused, enqueued_at__isnull=False).update(enqueued_at=None)
