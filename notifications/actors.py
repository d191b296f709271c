"""Dramatiq actors: decode the message, call a service, nothing else."""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq import Retry

from . import services

HIGH_QUEUE = "notifications.high"
BULK_QUEUE = "notifications.bulk"
# Unexpected errors (the database briefly gone, say) get a few broker retries; the row's state
# lets the sweeper pick the notification up again after that in any case.
UNEXPECTED_ERROR_RETRIES = 3


def _retry_when(retries: int, exception: BaseException) -> bool:
    # A rate-limit wait arrives as Retry: always retried and never counted against a budget. Our
    # delivery retries live in the database (services), so the broker's count is not consulted.
    if isinstance(exception, Retry):
        return True
    return retries < UNEXPECTED_ERROR_RETRIES


_ACTOR_OPTIONS: dict[str, Any] = {
    "retry_when": _retry_when,
    "min_backoff": 1_000,
    "max_backoff": 30_000,
    "time_limit": 120_000,
}


def _deliver(notification_id: str) -> None:
    try:
        services.notification_deliver(notification_id=notification_id)
    except services.SendRateLimited as limited:
        raise Retry(str(limited), delay=max(1, int(limited.retry_after * 1000))) from None


@dramatiq.actor(actor_name="deliver_notification", queue_name=HIGH_QUEUE, priority=0, **_ACTOR_OPTIONS)
def deliver_notification(notification_id: str) -> None:
    _deliver(notification_id)


@dramatiq.actor(actor_name="deliver_bulk_notification", queue_name=BULK_QUEUE, priority=10, **_ACTOR_OPTIONS)
def deliver_bulk_notification(notification_id: str) -> None:
    _deliver(notification_id)


def actor_for_priority(priority: str) -> dramatiq.Actor:  # type: ignore[type-arg]
    return deliver_bulk_notification if priority == "bulk" else deliver_notification
