"""Every read query the API, the admin, metrics and the services share; none of them writes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db import connection, models
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from .errors import NotFound
from .models import (
    PENDING_STATUSES,
    ApiClient,
    Category,
    DeadLetter,
    Notification,
    NotificationTemplate,
    Recipient,
    Resolution,
    Status,
    TemplateVariant,
)


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
        return Notification.objects.select_related("category").get(pk=uuid.UUID(str(notification_id)), client=client)
    except (Notification.DoesNotExist, ValueError):
        raise NotFound("no such notification") from None


def notification_list(*, client: ApiClient, filters: NotificationFilters) -> QuerySet[Notification]:
    """The client's notifications narrowed by ``filters``, unordered (the caller paginates)."""
    queryset = Notification.objects.filter(client=client).select_related("category")
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


# --- Templates, categories and consent ---------------------------------------------------------


def _own_then_platform(queryset: QuerySet[Any], client: ApiClient) -> QuerySet[Any]:
    """The client's own rows and the platform's (client null), the client's first: a client's
    template or category shadows the platform's of the same key."""
    return queryset.filter(Q(client=client) | Q(client__isnull=True)).order_by(F("client_id").asc(nulls_last=True))


def category_get(*, client: ApiClient, key: str) -> Category | None:
    """The category ``key`` as the client sees it: its own, else the platform's; None when neither."""
    return _own_then_platform(Category.objects.filter(key=key), client).first()


def category_keys_known(*, client: ApiClient, keys: list[str]) -> set[str]:
    """Which of ``keys`` name a category the client may use."""
    if not keys:
        return set()
    return set(Category.objects.filter(Q(client=client) | Q(client__isnull=True), key__in=keys).values_list("key", flat=True))


def recipient_and_category(*, client: ApiClient, user_id: str, category_key: str) -> tuple[Recipient | None, Category | None]:
    """What accepting a notification reads: the category ``category_key`` as the client sees it
    (None: unknown) and the client's recipient ``user_id`` (None: not stored), whose preferences
    and quiet hours apply even when the request gives the address itself. Two plain primary-key
    or unique-index probes: building one query with a subquery per recipient column cost more
    CPU in the ORM than the second round trip costs."""
    category = category_get(client=client, key=category_key)
    if category is None:
        return None, None
    return Recipient.objects.filter(client=client, user_id=user_id).first(), category


def template_get(*, client: ApiClient, key: str) -> NotificationTemplate | None:
    """The template ``key`` as the client sees it (its own, else the platform's), variants prefetched."""
    return _own_then_platform(NotificationTemplate.objects.filter(key=key), client).prefetch_related("variants").first()


def template_variants_for(*, client: ApiClient, key: str, channel: str) -> list[TemplateVariant] | None:
    """The ``channel`` variants of the template ``key`` as the client sees it, in one query; None
    when there is no such template (its own, or the platform's when it has none of its own)."""
    template = _own_then_platform(NotificationTemplate.objects.filter(key=key), client).values("pk")[:1]
    variants = list(TemplateVariant.objects.filter(template_id=Subquery(template), channel=channel))
    if variants:
        return variants
    return [] if template.exists() else None


@dataclass(frozen=True)
class PendingDelivery:
    """A pending notification as the delivery reads it before its claim: when it is due, and what
    its consent depends on now (its category; its recipient's preferences and quiet hours)."""

    channel: str
    next_attempt_at: datetime | None
    category_key: str | None  # None: accepted before categories existed; not checked
    critical: bool
    default_enabled: bool
    preferences: dict[str, Any]
    quiet_hours: dict[str, str] | None
    timezone: str


def notification_pending_delivery(notification_id: Any) -> PendingDelivery | None:
    """The notification ``notification_id`` if it is pending, with its consent inputs, in one query."""
    return notifications_pending_delivery([notification_id]).get(str(notification_id))


def notifications_pending_delivery(notification_ids: list[Any]) -> dict[str, PendingDelivery]:
    """Those of ``notification_ids`` still pending, by id, with their consent inputs, in one query."""
    recipient = Recipient.objects.filter(client_id=OuterRef("client_id"), user_id=OuterRef("user_id"))
    rows = (
        Notification.objects.filter(pk__in=notification_ids, status__in=PENDING_STATUSES)
        .annotate(
            recipient_preferences=Subquery(recipient.values("preferences")[:1]),
            recipient_quiet_hours=Subquery(recipient.values("quiet_hours")[:1]),
            recipient_timezone=Subquery(recipient.values("timezone")[:1]),
        )
        .order_by()
        .values_list(
            "id",
            "channel",
            "next_attempt_at",
            "category__key",
            "category__critical",
            "category__default_enabled",
            "recipient_preferences",
            "recipient_quiet_hours",
            "recipient_timezone",
        )
    )
    return {
        str(pk): PendingDelivery(
            channel=channel,
            next_attempt_at=next_attempt_at,
            category_key=category_key,
            critical=bool(critical),
            default_enabled=bool(default_enabled) if default_enabled is not None else True,
            preferences=preferences or {},
            quiet_hours=quiet_hours,
            timezone=zone or "",
        )
        for pk, channel, next_attempt_at, category_key, critical, default_enabled, preferences, quiet_hours, zone in rows
    }


def table_row_estimate(model: type[models.Model]) -> int | None:
    """PostgreSQL's own estimate of ``model``'s row count (``pg_class.reltuples``, kept by
    autovacuum and ANALYZE): a catalogue read instead of a COUNT(*) of millions of rows. None on
    another database or before the table was ever analysed."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] >= 0 else None
