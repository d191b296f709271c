"""Retention: purge finished notifications and expired keys in short batches."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from ...models import (
    FINISHED_STATUSES,
    DeadLetter,
    DeliveryAttempt,
    IdempotencyKey,
    Notification,
    OutcomeCount,
    ProcessedEvent,
    Resolution,
    hour_of,
)

logger = logging.getLogger("notifications.services")


@dataclass
class PurgeReport:
    notifications: int = 0
    attempts: int = 0
    dead_letters: int = 0
    idempotency_keys: int = 0
    processed_events: int = 0
    outcome_counts: int = 0


def notification_purge(*, older_than: timedelta, batch_size: int = 1000, now: datetime | None = None) -> PurgeReport:
    """Delete finished notifications made before ``now - older_than`` with their attempts and
    resolved dead letters, the dashboard's counters of those hours, and expired idempotency keys
    and event dedup records, one short transaction per batch so the tables are never locked for
    long. A notification with an unresolved dead letter is kept, and so is every unresolved dead
    letter (retried later, it is taken from a counter no longer there: a negative one of that old
    hour, which its new outcome brings back to zero)."""
    now = now or timezone.now()
    cutoff = now - older_than
    report = PurgeReport()
    open_dead_letter = DeadLetter.objects.filter(notification=OuterRef("pk"), resolution=Resolution.UNRESOLVED)
    old_finished = Notification.objects.filter(status__in=list(FINISHED_STATUSES), created_at__lt=cutoff).filter(
        ~Exists(open_dead_letter)
    )
    while batch := list(old_finished.values_list("pk", flat=True)[:batch_size]):
        with transaction.atomic():
            report.attempts += DeliveryAttempt.objects.filter(notification_id__in=batch).delete()[0]
            report.dead_letters += DeadLetter.objects.filter(notification_id__in=batch).delete()[0]
            report.notifications += Notification.objects.filter(pk__in=batch).delete()[0]
    report.dead_letters += _delete_in_batches(
        DeadLetter.objects.filter(notification__isnull=True, resolved_at__lt=cutoff).exclude(resolution=Resolution.UNRESOLVED),
        batch_size,
    )
    report.idempotency_keys += _delete_in_batches(IdempotencyKey.objects.filter(expires_at__lt=now), batch_size)
    # The consumer only replaces an expired dedup record when the same event key comes again.
    report.processed_events += _delete_in_batches(ProcessedEvent.objects.filter(expires_at__lt=now), batch_size)
    # The dashboard's counters of hours wholly before the cutoff: they counted notifications gone now.
    report.outcome_counts += _delete_in_batches(OutcomeCount.objects.filter(hour__lt=hour_of(cutoff)), batch_size)
    return report


def _delete_in_batches(rows: QuerySet[Any], batch_size: int) -> int:
    """Delete ``rows`` ``batch_size`` at a time; each batch re-checks the filter as it deletes."""
    deleted = 0
    while ids := list(rows.values_list("pk", flat=True)[:batch_size]):
        deleted += rows.filter(pk__in=ids).delete()[0]
    return deleted
