"""Dramatiq actors: decode the message, call a service, nothing else."""

from __future__ import annotations

import random
from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage

from . import services
from .conf import BROADCAST_FAN_OUT_ROUTE, DELIVERY_ROUTES, DIGEST_CLOSE_ROUTE, STATUS_EVENT_ROUTE, get_config

# Unexpected errors (the database briefly gone, say) get a few broker retries; the row's state
# lets the sweeper pick the notification up again after that in any case. Our delivery retries
# live in the database (services), so this budget is only for errors nobody modelled.
UNEXPECTED_ERROR_RETRIES = 3

_ACTOR_OPTIONS: dict[str, Any] = {
    "max_retries": UNEXPECTED_ERROR_RETRIES,
    "min_backoff": 1_000,
    "max_backoff": 30_000,
    "time_limit": 120_000,
}


# A message that finds no send slot again and again comes back later and later (full jitter):
# a client's backlog of many messages on a slow limit would otherwise cycle through the broker
# and the worker threads many times a slot (ratelimit.py reserves a backlog only a short way
# ahead), keeping the threads that other clients' notifications wait for busy with nothing.
SLOT_WAITS_OPTION = "slot_waits"
SLOT_WAIT_BASE_SECONDS = 0.1
SLOT_WAIT_CAP_SECONDS = 3.0


def _deliver(notification_ids: tuple[str, ...], *, priority: str) -> None:
    message = CurrentMessage.get_current_message()
    # When it was published, for the backlog claims made since (services/delivery/backlog.py). A
    # message coming back keeps its first publish's timestamp, so it has none: it may carry rows
    # given back by a claim made after that publish.
    published_ms = None
    if message is not None and not message.options.get(SLOT_WAITS_OPTION):
        published_ms = message.message_timestamp
    try:
        services.notifications_deliver(
            notification_ids=list(notification_ids), backlog_priority=priority, published_ms=published_ms
        )
    except services.SendRateLimited as limited:
        _wait_for_send_slot(limited.retry_after, notification_ids=limited.notification_ids)


def _wait_for_send_slot(seconds: float, *, notification_ids: list[str]) -> None:
    """Put the message in hand back on its queue after ``seconds`` (or its backoff, if longer), as
    it is, with only the ids that found no send slot.

    Our own rate limit is a wait, not an attempt. Dramatiq's Retries middleware counts every
    exception it sees, ``Retry`` included (dramatiq 2.x ``middleware/retries.py``), so raising
    ``Retry`` here would spend the unexpected-error budget on waits; re-enqueueing the same
    message keeps its ``retries`` count and its trace context, and the actor returns normally.
    """
    message = CurrentMessage.get_current_message()
    if message is None:  # called outside a worker (a direct call in a test): nothing to requeue
        raise services.SendRateLimited(seconds, notification_ids=notification_ids)
    waits = int(message.options.get(SLOT_WAITS_OPTION, 0))
    # Never past BROKER_DELAY_MAX_SECONDS: a longer wait is held in PostgreSQL, not in a message.
    cap = min(SLOT_WAIT_CAP_SECONDS, get_config().broker_delay_max_seconds)
    backoff = random.uniform(0, min(cap, SLOT_WAIT_BASE_SECONDS * 2**waits))
    again = message.copy(args=tuple(notification_ids), options={SLOT_WAITS_OPTION: waits + 1})
    dramatiq.get_broker().enqueue(again, delay=max(1, int(max(seconds, backoff) * 1000)))


# A message carries one notification id, or several enqueued together (services/records/outbox.py); its
# claim also takes the backlog of its queue (services/delivery/backlog.py).
@dramatiq.actor(
    actor_name=DELIVERY_ROUTES["high"].actor_name, queue_name=DELIVERY_ROUTES["high"].queue_name, priority=0, **_ACTOR_OPTIONS
)
def deliver_notification(*notification_ids: str) -> None:
    _deliver(notification_ids, priority="high")


@dramatiq.actor(
    actor_name=DELIVERY_ROUTES["bulk"].actor_name, queue_name=DELIVERY_ROUTES["bulk"].queue_name, priority=10, **_ACTOR_OPTIONS
)
def deliver_bulk_notification(*notification_ids: str) -> None:
    _deliver(notification_ids, priority="bulk")


@dramatiq.actor(actor_name=STATUS_EVENT_ROUTE.actor_name, queue_name=STATUS_EVENT_ROUTE.queue_name, **_ACTOR_OPTIONS)
def deliver_status_event(event_id: str) -> None:
    services.status_event_deliver(event_id=event_id)


# A fan-out runs in slices (services/fanout/broadcasts.py FAN_OUT_SLICE_SECONDS) well within the time limit.
@dramatiq.actor(actor_name=BROADCAST_FAN_OUT_ROUTE.actor_name, queue_name=BROADCAST_FAN_OUT_ROUTE.queue_name, **_ACTOR_OPTIONS)
def fan_out_broadcast(broadcast_id: str, lease: str | None = None) -> None:
    services.broadcast_fan_out(broadcast_id=broadcast_id, lease=lease)


@dramatiq.actor(actor_name=DIGEST_CLOSE_ROUTE.actor_name, queue_name=DIGEST_CLOSE_ROUTE.queue_name, **_ACTOR_OPTIONS)
def close_digest(digest_id: str) -> None:
    services.digest_close(digest_id=digest_id)
