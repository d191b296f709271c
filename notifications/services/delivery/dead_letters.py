"""Dead letters: create, redrive with a fresh budget, discard, and republish an event's body."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pika.exceptions
from django.db import transaction
from django.utils import timezone

from ...event_bus import event_publish
from ...models import (
    DeadLetter,
    DeadLetterReason,
    DeadLetterSource,
    Notification,
    Resolution,
    Status,
)
from ..policy.routing import route_restart
from ..records.outbox import notification_enqueue
from ..records.outcome_counts import outcome_counts_take_for_retry

logger = logging.getLogger("notifications.services")


def dead_letter_create(notification: Notification, reason: str, error: str) -> DeadLetter:
    return DeadLetter.objects.create(
        source=DeadLetterSource.NOTIFICATION,
        notification=notification,
        channel=notification.channel,
        reason=reason,
        last_error=error[:4000],
        attempts=notification.attempt_count,
    )


@dataclass(frozen=True)
class RedriveResult:
    done: bool
    detail: str


def dead_letter_redrive(*, dead_letter: DeadLetter, by: Any) -> RedriveResult:
    """Send a dead letter again with a fresh attempt budget, recording who asked and when.

    The admin's Retry button, its bulk action and ``manage.py redrive`` all come here. A dead
    letter already resolved, or whose notification has since been delivered, is left alone.
    """
    if dead_letter.source == DeadLetterSource.EVENT:
        return dead_letter_republish(dead_letter=dead_letter, by=by)
    if dead_letter.notification_id is None:
        return RedriveResult(False, "this dead letter has no notification to send")
    if dead_letter.reason == DeadLetterReason.RENDER_FAILED:
        return RedriveResult(False, "its digest could not be rendered: there is no message to send again (discard it)")
    now = timezone.now()
    with transaction.atomic():
        claimed = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
            resolution=Resolution.RETRIED, resolved_by=by, resolved_at=now
        )
        if not claimed:
            dead_letter.refresh_from_db()
            return RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
        # A fallback notification starts its route again from its first channel.
        restart = route_restart(dead_letter.notification_id)
        if restart is None:
            transaction.set_rollback(True)
            return RedriveResult(False, "no channel of its route can be tried now (no address, opted out or suppressed)")
        # Out of the dashboard's failed or dead count (it locks the row the transition moves).
        outcome_counts_take_for_retry(dead_letter.notification_id)
        requeued = Notification.transition(
            dead_letter.notification_id,
            Status.QUEUED,
            only_from=[Status.FAILED, Status.DEAD],
            failure_reason="",
            attempt_count=0,
            next_attempt_at=now,
            enqueued_at=None,
            claimed_at=None,
            **restart,
        )
        if not requeued:
            # Read before marking the rollback: no query may run in the block after set_rollback.
            status = Notification.objects.filter(pk=dead_letter.notification_id).values_list("status", flat=True).first()
            transaction.set_rollback(True)
            return RedriveResult(False, f"its notification is {status}, not failed or dead")
        notification_id = dead_letter.notification_id
        transaction.on_commit(lambda: notification_enqueue(notification_id=notification_id))
    dead_letter.refresh_from_db()
    return RedriveResult(True, "re-enqueued")


def dead_letter_discard(*, dead_letter: DeadLetter, by: Any) -> RedriveResult:
    """Mark a dead letter as dealt with, without sending anything."""
    updated = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
        resolution=Resolution.DISCARDED, resolved_by=by, resolved_at=timezone.now()
    )
    dead_letter.refresh_from_db()
    if not updated:
        return RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
    return RedriveResult(True, "discarded")


def dead_letter_republish(*, dead_letter: DeadLetter, by: Any) -> RedriveResult:
    """Publish an event dead letter's original body again (the admin's Retry for source=event).

    The resolution is claimed first and given back if the publish fails, so two clicks publish once.
    """
    now = timezone.now()
    claimed = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
        resolution=Resolution.RETRIED, resolved_by=by, resolved_at=now
    )
    if not claimed:
        dead_letter.refresh_from_db()
        return RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
    headers = {k: v for k, v in (dead_letter.headers or {}).items() if not str(k).startswith("x-")}
    try:
        event_publish(body=dead_letter.raw_body.encode(), routing_key=dead_letter.routing_key or None, headers=headers or None)
    except (pika.exceptions.AMQPError, OSError) as exc:
        DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.RETRIED, resolved_at=now).update(
            resolution=Resolution.UNRESOLVED, resolved_by=None, resolved_at=None
        )
        dead_letter.refresh_from_db()
        return RedriveResult(False, f"could not publish: {exc}")
    dead_letter.refresh_from_db()
    return RedriveResult(True, "republished")


def dead_letter_record_event(
    *, reason: str, error: str, attempts: int, raw_body: str, routing_key: str, headers: dict[str, Any]
) -> DeadLetter:
    """Store an event the consumer could not process, as it came off the DLQ."""
    return DeadLetter.objects.create(
        source=DeadLetterSource.EVENT,
        reason=reason,
        last_error=error[:4000],
        attempts=attempts,
        raw_body=raw_body,
        routing_key=routing_key[:255],
        headers=headers,
    )
