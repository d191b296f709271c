"""Reads of the delivery path and the sweeps: a pending notification with what its consent depends
on now, the suppressed ones of a batch of addresses, the rows a sweep takes in turns by client."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection, models
from django.db.models import F, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..connections import prepared_cursor
from ..models import (
    PENDING_STATUSES,
    Category,
    Notification,
    Recipient,
    Status,
    Suppression,
)


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


def notifications_pending_delivery(notification_ids: list[Any], *, claimed: bool = False) -> dict[str, PendingDelivery]:
    """Those of ``notification_ids`` still pending, by id, with their consent inputs, in one query.
    ``claimed``: those in ``sending`` instead (a backlog claim's rows, read after the claim).

    Written in SQL: every delivery runs it, and as a queryset with a subquery per recipient field
    Django spent longer building it than PostgreSQL running it (a third of a single delivery).
    Prepared (sql.prepared_cursor): every message runs it, most of them during a backlog finding
    nothing, and PostgreSQL would otherwise plan its joins each time."""
    pk_field: Any = Notification._meta.pk
    ids = [pk_field.get_db_prep_value(uuid.UUID(str(pk)), connection) for pk in notification_ids]
    if not ids:
        return {}
    sources = [Status.SENDING] if claimed else sorted(PENDING_STATUSES)
    sql = _pending_delivery_sql(len(ids), len(sources))
    with prepared_cursor() as cursor:
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


@functools.cache
def _pending_delivery_sql(ids: int, statuses: int) -> str:
    """The statement of notifications_pending_delivery for so many ids and statuses: made once."""
    quote = connection.ops.quote_name

    def col(model: type[models.Model], name: str) -> str:
        field: Any = model._meta.get_field(name)
        return quote(str(field.column))

    n, c, r, s = (
        quote(Notification._meta.db_table),
        quote(Category._meta.db_table),
        quote(Recipient._meta.db_table),
        quote(Suppression._meta.db_table),
    )
    return (
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
        f"WHERE n.{col(Notification, 'id')} IN ({', '.join(['%s'] * ids)}) "
        f"AND n.{col(Notification, 'status')} IN ({', '.join(['%s'] * statuses)})"
    )


def _aware(value: Any) -> datetime | None:
    """A datetime column read by a raw cursor: PostgreSQL's is aware; SQLite's is naive (or a
    string), in UTC."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    return timezone.make_aware(parsed, UTC) if parsed is not None and timezone.is_naive(parsed) else parsed


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
