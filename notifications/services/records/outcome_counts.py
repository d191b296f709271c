"""The dashboard's counters (models.OutcomeCount): added to in the transaction of each outcome,
taken from when a retry sends a failed notification again, counted again from the notifications
on demand (after an upgrade, or to check them).

A counter says how many notifications accepted in an hour are *now* delivered, failed or dead, so
the dashboard and the notifications list filtered the same way agree: a dead notification that is
retried leaves the dead count, and is counted again where it ends next.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, Count, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce, TruncHour

from ...errors import NotificationError
from ...models import (
    LATENCY_BEYOND_MS,
    LATENCY_BOUNDS_MS,
    OUTCOME_COUNT_KEY,
    OUTCOME_COUNT_SHARDS,
    DeliveryAttempt,
    Notification,
    OutcomeCount,
    Status,
    hour_of,
    latency_bucket_ms,
)
from ...sql import counts_add

logger = logging.getLogger("notifications.services")

# The statuses counted: how sends end. The others are few, or pending, and counted from the
# notifications themselves (selectors/dashboard.py).
COUNTED_STATUSES = (Status.DELIVERED, Status.FAILED, Status.DEAD)

OutcomeKey = tuple[datetime, str, str, str, str, int, int]

_thread = threading.local()
# Shards are handed to this process's threads in turn from a random start: its eight worker threads
# get eight rows, and another process's threads mostly others.
_next_shard = itertools.count(random.randrange(OUTCOME_COUNT_SHARDS))
_next_shard_lock = threading.Lock()


def _shard() -> int:
    """This thread's row of every counter (models.OUTCOME_COUNT_SHARDS), taken at its first
    outcome: sixteen worker threads recording deliveries at once each waited for the one row's
    lock, held until its holder's commit, a Python round trip away (a tenth of a second at a
    drain's start)."""
    shard = getattr(_thread, "shard", None)
    if shard is None:
        with _next_shard_lock:
            shard = _thread.shard = next(_next_shard) % OUTCOME_COUNT_SHARDS
    return int(shard)


def failure_reason_of(error: BaseException) -> str:
    """What the dashboard groups failures by: the error's code, with the provider's HTTP or SMTP
    status when it gave one ("rejected HTTP 400", "permanent SMTP 550"); "unexpected" for an
    error that is not ours (a provider's bug)."""
    if not isinstance(error, NotificationError):
        return "unexpected"
    if "http_status" in error.extra:
        return f"{error.code} HTTP {error.extra['http_status']}"[:64]
    if "smtp_code" in error.extra:
        return f"{error.code} SMTP {error.extra['smtp_code']}"[:64]
    return error.code[:64]


def outcome_key(
    notification: Notification, status: str, *, account: str = "", reason: str = "", delivered_at: datetime | None = None
) -> OutcomeKey:
    """The counter (OUTCOME_COUNT_KEY) one notification's outcome adds one to."""
    latency = 0
    if delivered_at is not None:
        latency = latency_bucket_ms((delivered_at - notification.created_at).total_seconds())
    return (hour_of(notification.created_at), notification.channel, account, status, reason[:64], latency, _shard())


def outcome_counts_add(keys: Iterable[OutcomeKey], *, taken: bool = False) -> None:
    """Add one to the counter of each of ``keys`` (``taken``: take one away), in one statement,
    inside the caller's transaction: the counters move with the status they count."""
    sign = -1 if taken else 1
    counts_add(OutcomeCount, {key: sign * n for key, n in Counter(keys).items()}, key_fields=OUTCOME_COUNT_KEY)


def outcome_counts_take_for_retry(notification_id: Any) -> None:
    """Take a failed or dead notification out of its counter, before a retry sends it again. Runs
    inside the retry's transaction, before its conditional UPDATE: the row is locked here, so the
    status read is the one that UPDATE moves it from."""
    ended = (
        Notification.objects.select_for_update()
        .filter(pk=notification_id, status__in=[Status.FAILED, Status.DEAD])
        .only("id", "created_at", "channel", "status", "failure_reason")
        .first()
    )
    if ended is None:
        return
    # The account of the attempt that ended it, as it was counted (services/delivery/outcomes.py).
    account = (
        DeliveryAttempt.objects.filter(notification_id=notification_id)
        .order_by("-number")
        .values_list("account", flat=True)
        .first()
    )
    outcome_counts_add([outcome_key(ended, ended.status, account=account or "", reason=ended.failure_reason)], taken=True)


def outcome_counts_rebuild(*, since: datetime) -> int:
    """Count again, from the notifications, every hour from ``since`` (to its hour) on; returns
    how many notifications it counted. For the notifications stored before the counters existed
    (after upgrading), or to check them. The counters are locked meanwhile: outcomes being
    recorded wait for it, so none is lost or counted twice."""
    since = hour_of(since)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {connection.ops.quote_name(OutcomeCount._meta.db_table)} IN SHARE ROW EXCLUSIVE MODE")
        OutcomeCount.objects.filter(hour__gte=since).delete()
        rows = [
            OutcomeCount(
                hour=row["hour"],
                channel=row["channel"],
                account=row["account"],
                status=row["status"],
                reason=row["failure_reason"],
                latency_le_ms=row["latency"],
                count=row["n"],
            )
            for row in _counted_rows(since)
        ]
        OutcomeCount.objects.bulk_create(rows, batch_size=1000)
    counted = sum(row.count for row in rows)
    logger.info("outcome counts rebuilt from %s: %d notifications in %d counters", since.isoformat(), counted, len(rows))
    return counted


def _counted_rows(since: datetime) -> Iterable[Any]:
    """The counters' rows from the notifications made since ``since``, grouped by PostgreSQL (or
    SQLite): the account of each one's last attempt, its delivery's latency bucket."""
    last_account = DeliveryAttempt.objects.filter(notification=OuterRef("pk")).order_by("-number").values("account")[:1]
    latency = Case(
        When(~Q(status=Status.DELIVERED) | Q(delivered_at__isnull=True), then=Value(0)),
        *(
            When(delivered_at__lte=F("created_at") + timedelta(milliseconds=bound), then=Value(bound))
            for bound in LATENCY_BOUNDS_MS
        ),
        default=Value(LATENCY_BEYOND_MS),
    )
    return (
        Notification.objects.filter(created_at__gte=since, status__in=COUNTED_STATUSES)
        .annotate(hour=TruncHour("created_at", tzinfo=UTC), account=Coalesce(Subquery(last_account), Value("")), latency=latency)
        .values("hour", "channel", "account", "status", "failure_reason", "latency")
        .annotate(n=Count("pk"))
        .order_by()
    )
