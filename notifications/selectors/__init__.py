"""Every read query the API, the admin, metrics and the services share; none of them writes."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypedDict

from django.db import connection, models
from django.db.models import F, Q, QuerySet, Subquery
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ..connections import prepared_cursor
from ..errors import NotFound
from ..models import (
    ApiClient,
    CapturedMessage,
    Category,
    DeadLetter,
    Notification,
    NotificationTemplate,
    Recipient,
    Resolution,
    Suppression,
    TemplateVariant,
    model_instances,
)

# Re-exported: every read is reached as ``selectors.<name>``, whichever module of this package holds it.
from .dashboard import AccountRate as AccountRate
from .dashboard import ChannelSeries as ChannelSeries
from .dashboard import Dashboard as Dashboard
from .dashboard import FailureReason as FailureReason
from .dashboard import Latency as Latency
from .dashboard import dashboard as dashboard
from .dashboard import dead_letter_unresolved_count as dead_letter_unresolved_count
from .dashboard import failure_reasons_recent as failure_reasons_recent
from .dashboard import provider_accounts_recent as provider_accounts_recent
from .delivery import PendingDelivery as PendingDelivery
from .delivery import due_in_turns as due_in_turns
from .delivery import notification_pending_delivery as notification_pending_delivery
from .delivery import notifications_pending_delivery as notifications_pending_delivery
from .delivery import suppressed_addresses as suppressed_addresses
from .fanout import BroadcastCounts as BroadcastCounts
from .fanout import broadcast_counts as broadcast_counts
from .fanout import broadcast_get as broadcast_get
from .fanout import recipient_ids_by_user_id as recipient_ids_by_user_id
from .fanout import topic_get as topic_get
from .fanout import topic_subscriber_count as topic_subscriber_count
from .fanout import topic_subscribers_after as topic_subscribers_after
from .suppressions import address_suppressed_reason as address_suppressed_reason
from .suppressions import addresses_suppressed_reasons as addresses_suppressed_reasons


class NotificationFilters(TypedDict, total=False):
    """What a client may narrow its notification list by; a missing key does not filter."""

    status: str
    channel: str
    user_id: str
    created_after: datetime  # inclusive
    created_before: datetime  # exclusive
    broadcast: uuid.UUID  # the notifications a broadcast made


def dead_letter_unresolved_of(*, notification_id: Any) -> DeadLetter | None:
    """The notification's newest unresolved dead letter: what its Retry redrives (a failed or dead
    notification has one until it is retried or discarded)."""
    return DeadLetter.objects.filter(notification_id=notification_id, resolution=Resolution.UNRESOLVED).order_by("-pk").first()


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
    if "broadcast" in filters:
        queryset = queryset.filter(broadcast_id=filters["broadcast"])
    return queryset


def suppression_list(*, client: ApiClient, channel: str = "", address: str = "") -> QuerySet[Suppression]:
    """The client's suppressions, narrowed by channel and address, unordered (the caller paginates)."""
    suppressions = Suppression.objects.filter(client=client)
    if channel:
        suppressions = suppressions.filter(channel=channel)
    if address:
        suppressions = suppressions.filter(address=address)
    return suppressions


def captured_message_list(*, client: ApiClient) -> QuerySet[CapturedMessage]:
    """The test-mode client's captured messages, unordered (the caller paginates)."""
    return CapturedMessage.objects.filter(client=client)


def recipient_get(*, client: ApiClient, user_id: str) -> Recipient | None:
    """The client's recipient ``user_id``, or None when it has stored none."""
    return Recipient.objects.filter(client=client, user_id=user_id).first()


# --- Templates, categories and consent ---------------------------------------------------------


def _own_then_platform(queryset: QuerySet[Any], client: ApiClient) -> QuerySet[Any]:
    """The client's own rows and the platform's (client null), the client's first: a client's
    template or category shadows the platform's of the same key. A client's test mode reads its
    live client's (ApiClient.content_owner_id): templates and categories are shared by both modes."""
    owner = client.content_owner_id
    return queryset.filter(Q(client_id=owner) | Q(client__isnull=True)).order_by(F("client_id").asc(nulls_last=True))


# Every accept reads its category, and categories change rarely: each process keeps what it read
# for CATEGORY_CACHE_SECONDS. A save in this process forgets them all at once (the signal below);
# other processes see a changed category within those seconds.
CATEGORY_CACHE_SECONDS = 5.0
_categories: dict[tuple[int, str], tuple[float, Category | None]] = {}


def category_get(*, client: ApiClient, key: str) -> Category | None:
    """The category ``key`` as the client sees it: its own, else the platform's; None when neither."""
    cached = _categories.get((client.pk, key))
    if cached is not None and time.monotonic() - cached[0] < CATEGORY_CACHE_SECONDS:
        return cached[1]
    category = _own_then_platform(Category.objects.filter(key=key), client).first()
    if len(_categories) > 10_000:
        _categories.clear()
    _categories[(client.pk, key)] = (time.monotonic(), category)
    return category


@receiver([post_save, post_delete], sender=Category)
def _categories_forget(**kwargs: Any) -> None:
    _categories.clear()


def category_keys_known(*, client: ApiClient, keys: list[str]) -> set[str]:
    """Which of ``keys`` name a category the client may use."""
    if not keys:
        return set()
    owner = client.content_owner_id
    return set(Category.objects.filter(Q(client_id=owner) | Q(client__isnull=True), key__in=keys).values_list("key", flat=True))


def recipient_and_category(*, client: ApiClient, user_id: str, category_key: str) -> tuple[Recipient | None, Category | None]:
    """What accepting a notification reads: the category ``category_key`` as the client sees it
    (None: unknown) and the client's recipient ``user_id`` (None: not stored), whose preferences
    and quiet hours apply even when the request gives the address itself. Two plain primary-key
    or unique-index probes (the category usually cached): building one query with a subquery per
    recipient column cost more CPU in the ORM than the second round trip costs."""
    category = category_get(client=client, key=category_key)
    if category is None:
        return None, None
    return recipients_by_user_id(client=client, user_ids=[user_id]).get(user_id), category


def recipients_by_user_id(*, client: ApiClient, user_ids: Iterable[str]) -> dict[str, Recipient]:
    """The client's stored recipients among ``user_ids``, by user_id, in one query (a batch's)."""
    wanted = list(set(user_ids))
    if not wanted:
        return {}
    # Raw SQL and a plain cursor: on a group commit's path, building the filter's SQL cost more
    # than PostgreSQL took to answer it, and a RawQuerySet worked out its columns and converters
    # again on every call. The rows are converted as the ORM converts them (its compiler's
    # converters: jsonb arrives as text, SQLite's datetimes as strings).
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {_recipient_columns()} FROM {quote(Recipient._meta.db_table)} "
        f"WHERE {quote('client_id')} = %s AND {quote('user_id')} IN ({', '.join(['%s'] * len(wanted))})"
    )
    # One user, a single accept's: prepared, as every single accept runs it (connections.prepared_cursor).
    with prepared_cursor() if len(wanted) == 1 else connection.cursor() as cursor:
        cursor.execute(sql, [client.pk, *wanted])
        rows = cursor.fetchall()
    return {recipient.user_id: recipient for recipient in model_instances(Recipient, rows)}


def recipient_with_suppression(*, client: ApiClient, user_id: str, channel: str, address: str) -> tuple[Recipient | None, str]:
    """A single accept's two reads in one statement, when its request gives the address: the
    client's recipient ``user_id`` (None: not stored) and why ``address`` is on the client's
    suppression list for ``channel`` ("" when it is not). Prepared: every such accept runs it, and
    two statements were two round trips and two executions of the web's cursor wrappers."""
    quote = connection.ops.quote_name
    recipients, suppressions = quote(Recipient._meta.db_table), quote(Suppression._meta.db_table)
    sql = (
        f"SELECT {_recipient_columns(prefix='r.')}, (SELECT s.reason FROM {suppressions} s WHERE s.client_id = %s "
        f"AND s.channel = %s AND s.address = %s LIMIT 1) FROM (SELECT 1) AS one "
        f"LEFT JOIN {recipients} r ON r.client_id = %s AND r.user_id = %s"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, [client.pk, channel, address, client.pk, user_id])
        row = cursor.fetchone()
    *values, reason = row
    if values[0] is None:  # no recipient: the LEFT JOIN's columns are all NULL
        return None, reason or ""
    return model_instances(Recipient, [values])[0], reason or ""


@functools.cache
def _recipient_columns(prefix: str = "") -> str:
    return ", ".join(prefix + connection.ops.quote_name(str(field.column)) for field in Recipient._meta.concrete_fields)


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
