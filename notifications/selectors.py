"""Read queries shared by the admin and the API: what support staff look at."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from .models import DeadLetter, Notification, Resolution, Status


@dataclass(frozen=True)
class SystemHealth:
    since: datetime
    status_counts: dict[str, int]
    unresolved_dead_letters: int

    @property
    def total(self) -> int:
        return sum(self.status_counts.values())


def notification_status_counts(*, since: datetime) -> dict[str, int]:
    """How many notifications made since ``since`` are in each status (every status listed)."""
    counts = {status.value: 0 for status in Status}
    rows = Notification.objects.filter(created_at__gte=since).values("status").annotate(n=Count("pk")).order_by()
    for row in rows:
        counts[row["status"]] = row["n"]
    return counts


def dead_letter_unresolved_count() -> int:
    return DeadLetter.objects.filter(resolution=Resolution.UNRESOLVED).count()


def system_health(*, hours: int = 24) -> SystemHealth:
    """The admin index's health at a glance: statuses of the last ``hours`` and the open DLQ."""
    since = timezone.now() - timedelta(hours=hours)
    return SystemHealth(
        since=since,
        status_counts=notification_status_counts(since=since),
        unresolved_dead_letters=dead_letter_unresolved_count(),
    )
