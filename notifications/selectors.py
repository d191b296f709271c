"""Every read query the API, the admin, metrics and the services share; none of them writes."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from django.db import connection, connections, models
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, Window
from django.db.models.functions import Coalesce, RowNumber
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .errors import NotFound
from .models import (
    PENDING_STATUSES,
    ApiClient,
    Broadcast,
    Category,
    DeadLetter,
    Notification,
    NotificationTemplate,
    Recipient,
    Resolution,
    Status,
    Suppression,
    TemplateVariant,
    Topic,
    TopicSubscription,
)


class NotificationFilters(TypedDict, total=False):
    """What a client may narrow its notification list by; a missing key does not filter."""

    status: str
    channel: str
    user_id: str
    created_after: datetime  # inclusive
    created_before: datetime  # exclusive
    broadcast: uuid.UUID  # the notifications a broadcast made


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


def dead_letter_unresolved_of(*, notification_id: Any) -> DeadLetter | None:
    """The notification's newest unresolved dead letter: what its Retry redrives (a failed or dead
    notification has one until it is retried or discarded)."""
    return DeadLetter.objects.filter(notification_id=notification_id, resolution=Resolution.UNRESOLVED).order_by("-pk").first()


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


def recipient_get(*, client: ApiClient, user_id: str) -> Recipient | None:
    """The client's recipient ``user_id``, or None when it has stored none."""
    return Recipient.objects.filter(client=client, user_id=user_id).first()


# --- Templates, categories and consent ---------------------------------------------------------


def _own_then_platform(queryset: QuerySet[Any], client: ApiClient) -> QuerySet[Any]:
    """The client's own rows and the platform's (client null), the client's first: a client's
    template or category shadows the platform's of the same key."""
    return queryset.filter(Q(client=client) | Q(client__isnull=True)).order_by(F("client_id").asc(nulls_last=True))


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
    return set(Category.objects.filter(Q(client=client) | Q(client__isnull=True), key__in=keys).values_list("key", flat=True))


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
    with connection.cursor() as cursor:
        cursor.execute(sql, [client.pk, *wanted])
        rows = cursor.fetchall()
    if not rows:
        return {}
    compiler, converters = _recipient_converters(connections[connection.alias])
    names = [field.attname for field in Recipient._meta.concrete_fields]
    recipients = (Recipient.from_db(connection.alias, names, values) for values in compiler.apply_converters(rows, converters))
    return {recipient.user_id: recipient for recipient in recipients}


@functools.cache
def _recipient_columns() -> str:
    return ", ".join(connection.ops.quote_name(str(field.column)) for field in Recipient._meta.concrete_fields)


@functools.lru_cache(maxsize=256)
def _recipient_converters(database: Any) -> tuple[Any, dict[int, Any]]:
    """The ORM's compiler and converters of Recipient's columns, made once per thread's database
    connection (``database``, its DatabaseWrapper), to which they are bound."""
    compiler = Recipient.objects.all().query.get_compiler(connection=database)
    table = Recipient._meta.db_table
    return compiler, compiler.get_converters([field.get_col(table) for field in Recipient._meta.concrete_fields])


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
    # Why its address is on the client's suppression list (a bounce or complaint since accept); "".
    suppression_reason: str = ""
    # A fallback notification (a route of channels): a channel withheld now is skipped, not the whole.
    has_route: bool = False
    # Whose it is: a client's sends hold only its share of a channel's rate limit (ratelimit.py).
    client_id: int | None = None


def notification_pending_delivery(notification_id: Any) -> PendingDelivery | None:
    """The notification ``notification_id`` if it is pending, with its consent inputs, in one query."""
    return notifications_pending_delivery([notification_id]).get(str(notification_id))


def notifications_pending_delivery(notification_ids: list[Any]) -> dict[str, PendingDelivery]:
    """Those of ``notification_ids`` still pending, by id, with their consent inputs, in one query.

    Written in SQL: every delivery runs it, and as a queryset with a subquery per recipient field
    Django spent longer building it than PostgreSQL running it (a third of a single delivery)."""
    quote = connection.ops.quote_name

    def col(model: type[models.Model], name: str) -> str:
        field: Any = model._meta.get_field(name)
        return quote(str(field.column))

    pk_field: Any = Notification._meta.pk
    ids = [pk_field.get_db_prep_value(uuid.UUID(str(pk)), connection) for pk in notification_ids]
    if not ids:
        return {}
    sources = sorted(PENDING_STATUSES)
    n, c, r, s = (
        quote(Notification._meta.db_table),
        quote(Category._meta.db_table),
        quote(Recipient._meta.db_table),
        quote(Suppression._meta.db_table),
    )
    sql = (
        f"SELECT n.{col(Notification, 'id')}, n.{col(Notification, 'channel')}, n.{col(Notification, 'next_attempt_at')}, "
        f"n.{col(Notification, 'route')}, c.{col(Category, 'key')}, c.{col(Category, 'critical')}, "
        f"c.{col(Category, 'default_enabled')}, r.{col(Recipient, 'preferences')}, r.{col(Recipient, 'quiet_hours')}, "
        f"r.{col(Recipient, 'timezone')}, n.{col(Notification, 'client')}, "
        f"(SELECT s.{col(Suppression, 'reason')} FROM {s} s WHERE s.{col(Suppression, 'client')} = n.{col(Notification, 'client')} "
        f"AND s.{col(Suppression, 'channel')} = n.{col(Notification, 'channel')} "
        f"AND s.{col(Suppression, 'address')} = n.{col(Notification, 'address')} LIMIT 1) "
        f"FROM {n} n LEFT JOIN {c} c ON c.{col(Category, 'id')} = n.{col(Notification, 'category')} "
        f"LEFT JOIN {r} r ON r.{col(Recipient, 'client')} = n.{col(Notification, 'client')} "
        f"AND r.{col(Recipient, 'user_id')} = n.{col(Notification, 'user_id')} "
        f"WHERE n.{col(Notification, 'id')} IN ({', '.join(['%s'] * len(ids))}) "
        f"AND n.{col(Notification, 'status')} IN ({', '.join(['%s'] * len(sources))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*ids, *sources])
        rows = cursor.fetchall()
    json_value: Any = Recipient._meta.get_field("preferences").from_db_value  # type: ignore[union-attr]
    pending = {}
    for (
        pk,
        channel,
        next_attempt_at,
        route,
        key,
        critical,
        default_enabled,
        preferences,
        quiet_hours,
        zone,
        client,
        suppressed,
    ) in rows:
        pending[str(pk_field.to_python(pk))] = PendingDelivery(
            channel=channel,
            next_attempt_at=_aware(next_attempt_at),
            category_key=key,
            critical=bool(critical),
            default_enabled=bool(default_enabled) if default_enabled is not None else True,
            preferences=json_value(preferences, None, connection) or {},
            quiet_hours=json_value(quiet_hours, None, connection),
            timezone=zone or "",
            suppression_reason=suppressed or "",
            has_route=bool(json_value(route, None, connection)),
            client_id=client,
        )
    return pending


def _aware(value: Any) -> datetime | None:
    """A datetime column read by a raw cursor: PostgreSQL's is aware; SQLite's is naive (or a
    string), in UTC."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    return timezone.make_aware(parsed, UTC) if parsed is not None and timezone.is_naive(parsed) else parsed


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


# --- Topics and broadcasts ---------------------------------------------------------------------


def topic_get(*, client: ApiClient, key: str, counted: bool = True) -> Topic | None:
    """The client's topic ``key``, with ``subscriber_count`` (a count over its unique index)
    unless ``counted`` is False: a write only needs the row, and the count reads every
    subscription, so a topic built a thousand at a time would be counted over and over."""
    topics = Topic.objects.filter(client=client, key=key)
    if not counted:
        return topics.first()
    subscribers = TopicSubscription.objects.filter(topic_id=OuterRef("pk")).order_by().values("topic_id")
    count = subscribers.annotate(n=Count("pk")).values("n")
    return topics.annotate(subscriber_count=Coalesce(Subquery(count), 0)).first()


def topic_subscriber_count(*, topic_id: int) -> int:
    return TopicSubscription.objects.filter(topic_id=topic_id).count()


def recipient_ids_by_user_id(*, client: ApiClient, user_ids: list[str]) -> dict[str, int]:
    """The stored recipients of ``user_ids`` (those the client has), by user id."""
    rows = Recipient.objects.filter(client=client, user_id__in=user_ids).values_list("user_id", "pk")
    return dict(rows)


def topic_subscribers_after(*, topic_id: int, after: int, limit: int) -> tuple[list[Recipient], int | None]:
    """The next ``limit`` subscribers of a topic in recipient id order after ``after``: one keyset
    page over the unique (topic, recipient) index (an index-only range scan, never an OFFSET), then
    those recipients by primary key. As one join, the planner merged with a scan of the topic's
    subscriptions from its first one, every page: quadratic over a fan-out. Returns the page's
    recipients and the cursor after it (None: no subscriber left); a recipient deleted between the
    two reads is simply not in the page."""
    page = TopicSubscription.objects.filter(topic_id=topic_id, recipient_id__gt=after).order_by("recipient_id")
    recipient_ids = list(page.values_list("recipient_id", flat=True)[:limit])
    if not recipient_ids:
        return [], None
    return list(Recipient.objects.filter(pk__in=recipient_ids).order_by("pk")), recipient_ids[-1]


def broadcast_get(*, client: ApiClient, broadcast_id: Any) -> Broadcast:
    """The client's broadcast ``broadcast_id``; NotFound for another client's or a bad id."""
    try:
        return Broadcast.objects.select_related("topic", "category").get(pk=uuid.UUID(str(broadcast_id)), client=client)
    except (Broadcast.DoesNotExist, ValueError):
        raise NotFound("no such broadcast") from None


@dataclass(frozen=True)
class BroadcastCounts:
    """A broadcast's notifications by outcome; ``pending`` is everything not final yet."""

    created: int = 0
    delivered: int = 0
    suppressed: int = 0
    failed: int = 0  # failed or dead
    cancelled: int = 0
    pending: int = 0


def broadcast_counts(*, broadcast_id: Any) -> BroadcastCounts:
    """How many notifications a broadcast made, by outcome: one GROUP BY status over the
    (broadcast, status) index."""
    rows = Notification.objects.filter(broadcast_id=broadcast_id).values("status").annotate(n=Count("pk")).order_by()
    by_status = {row["status"]: row["n"] for row in rows}
    created = sum(by_status.values())
    delivered = by_status.get(Status.DELIVERED, 0)
    suppressed = by_status.get(Status.SUPPRESSED, 0)
    failed = by_status.get(Status.FAILED, 0) + by_status.get(Status.DEAD, 0)
    cancelled = by_status.get(Status.CANCELLED, 0)
    return BroadcastCounts(
        created=created,
        delivered=delivered,
        suppressed=suppressed,
        failed=failed,
        cancelled=cancelled,
        pending=created - delivered - suppressed - failed - cancelled,
    )


def suppressed_addresses(*, client_id: Any, channel: str, addresses: list[str]) -> dict[str, str]:
    """The client's suppressed ones of ``addresses`` on ``channel``, with their reasons: one IN
    probe of the suppression list's unique index for a whole batch of a broadcast."""
    if not addresses:
        return {}
    rows = Suppression.objects.filter(client_id=client_id, channel=channel, address__in=addresses).values_list(
        "address", "reason"
    )
    return {address: str(reason) for address, reason in rows}


def due_in_turns(queryset: QuerySet[Any], *, due: Any, limit: int, candidates: int | None = None) -> QuerySet[Any]:
    """The rows of ``queryset`` a sweep takes, at most ``limit``, oldest ``due`` first and in
    turns by client: every client's oldest, then every client's second oldest, and so on (one
    statement: ``row_number() OVER (PARTITION BY client_id ORDER BY due)``), so a client with a
    backlog takes at most its share while another client has work due. ``candidates``: rank only
    that many of the oldest due rows (a table whose due set can be millions of rows); None: all."""
    ordered = queryset.order_by(due, "pk")
    if candidates is not None:
        queryset = queryset.filter(pk__in=Subquery(ordered.values("pk")[:candidates]))
    turn = Window(RowNumber(), partition_by=[F("client_id")], order_by=[due, F("pk").asc()])
    return queryset.annotate(sweep_turn=turn).order_by("sweep_turn", due, "pk")[:limit]
