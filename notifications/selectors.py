"""Every read query the API, the admin, metrics and the services share; none of them writes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db.models import Count, QuerySet
from django.utils import timezone

from .errors import NotFound
from .models import ApiClient, DeadLetter, Notification, Recipient, Resolution, Status


class NotificationFilters(TypedDict, total=False):
    """What a client may narrow its notification list by; a missing key does not filter."""

    status: str
    channel: str
    user_id: str
    created_after: datetime  # inclusive
    created_before: datetime  # exclusive


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


def notification_get(*, client: ApiClient, notification_id: Any) -> Notification:
    """The client's notification ``notification_id``; NotFound for another client's or a bad id."""
    try:
        return Notification.objects.get(pk=uuid.UUID(str(notification_id)), client=client)
    except (Notification.DoesNotExist, ValueError):
        raise NotFound("no such notification") from None


def notification_list(*, client: ApiClient, filters: NotificationFilters) -> QuerySet[Notification]:
    """The client's notifications narrowed by ``filters``, unordered (the caller paginates)."""
    queryset = Notification.objects.filter(client=client)
    if "status" in filters:
        queryset = queryset.filter(status=filters["status"])
    if "channel" in filters:
        queryset = queryset.filter(channel=filters["channel"])
    if "user_id" in filters:
        queryset = queryset.filter(user_id=filters["user_id"])
    if "created_after" in filters:
        queryset = queryset.filter(created_at__gte=filters["created_after"])
    if "created_before" in filters:
        queryset = queryset.filter(created_at__lt=filters["created_before"])
    return queryset


def recipient_get(*, client: ApiClient, user_id: str) -> Recipient | None:
    """The client's recipient ``user_id``, or None when it has stored none."""
    return Recipient.objects.filter(client=client, user_id=user_id).first()
