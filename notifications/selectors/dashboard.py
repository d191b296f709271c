"""The admin dashboard's figures over the last hours, read from the outcome counters.

Delivered, failed and dead come from ``OutcomeCount`` (some thousands of rows for a week, whatever
the traffic, each counter's rows summed); the other statuses, which are few or short-lived, from the notifications through
their (status, created_at) index. Nothing here reads a window's notifications row by row: at a
million notifications a week that was 0.5 s a figure (bench/dashboard.py measures both).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from ..models import (
    DeadLetter,
    Notification,
    OutcomeCount,
    Resolution,
    Status,
    hour_of,
)

COUNTED = (Status.DELIVERED, Status.FAILED, Status.DEAD)
FAILURES = (Status.FAILED, Status.DEAD)
TOP_FAILURE_REASONS = 10
# The lists' provider-account filter's value for a channel's only account, whose name is blank.
ONLY_ACCOUNT = "-"


@dataclass(frozen=True)
class ChannelSeries:
    """One channel's delivered, failed and dead per hour (aligned with ``Dashboard.hours``)."""

    channel: str
    counts: dict[str, list[int]]

    def total(self, status: str) -> int:
        return sum(self.counts[status])


@dataclass(frozen=True)
class AccountRate:
    """How the notifications a provider account ended came out ("" is a channel's only account)."""

    channel: str
    account: str
    delivered: int
    failed: int
    dead: int

    @property
    def total(self) -> int:
        return self.delivered + self.failed + self.dead

    @property
    def rate(self) -> float:
        return self.delivered / self.total if self.total else 0.0


@dataclass(frozen=True)
class FailureReason:
    channel: str
    reason: str
    count: int


@dataclass(frozen=True)
class Latency:
    """Accept-to-delivered of the window's deliveries as a histogram: (bucket bound in ms, count)."""

    buckets: list[tuple[int, int]]

    @property
    def total(self) -> int:
        return sum(count for _, count in self.buckets)

    def percentile(self, share: float) -> int | None:
        """The bound (ms) of the bucket holding the ``share`` percentile: that share of the
        deliveries took at most this long. None without deliveries."""
        wanted, seen = share * self.total, 0
        for bound, count in self.buckets:
            seen += count
            if count and seen >= wanted:
                return bound
        return None


@dataclass(frozen=True)
class Dashboard:
    hours: list[datetime]  # the start of each hour of the window, oldest first; the last is now's
    status_counts: dict[str, int]  # every status, of the notifications made in the window
    channels: list[ChannelSeries]
    accounts: list[AccountRate]
    failure_reasons: list[FailureReason]
    latency: Latency
    unresolved_dead_letters: int

    @property
    def since(self) -> datetime:
        return self.hours[0]

    @property
    def total(self) -> int:
        return sum(self.status_counts.values())


def dashboard(*, hours: int, now: datetime | None = None) -> Dashboard:
    """The figures of the notifications made in the last ``hours`` hours (this one included)."""
    current = hour_of(now or timezone.now())
    window = [current - timedelta(hours=hours - 1 - index) for index in range(hours)]
    counters = OutcomeCount.objects.filter(hour__gte=window[0])
    channels = _channel_series(counters, window)
    return Dashboard(
        hours=window,
        status_counts=_status_counts(channels, since=window[0]),
        channels=channels,
        accounts=_account_rates(counters),
        failure_reasons=[
            FailureReason(row["channel"], row["reason"], row["n"])
            for row in counters.filter(status__in=FAILURES)
            .values("channel", "reason")
            .annotate(n=Sum("count"))
            .filter(n__gt=0)
            .order_by("-n", "channel", "reason")[:TOP_FAILURE_REASONS]
        ],
        latency=_latency(counters),
        unresolved_dead_letters=dead_letter_unresolved_count(),
    )


def dead_letter_unresolved_count() -> int:
    return DeadLetter.objects.filter(resolution=Resolution.UNRESOLVED).count()


def _status_counts(channels: list[ChannelSeries], *, since: datetime) -> dict[str, int]:
    """Every status's count: delivered, failed and dead from the counters, the others (pending,
    cancelled, suppressed, digested: a small share of a window) from the notifications' index."""
    counts = {str(status): 0 for status in Status}
    others = [status for status in Status if status not in COUNTED]
    # COUNT(*), not COUNT(id): an index-only scan of (status, created_at) answers it, not the heap.
    rows = (
        Notification.objects.filter(created_at__gte=since, status__in=others).values("status").annotate(n=Count("*")).order_by()
    )
    for row in rows:
        counts[row["status"]] = row["n"]
    for status in COUNTED:
        counts[status] = sum(series.total(status) for series in channels)
    return counts


def _channel_series(counters: QuerySet[OutcomeCount], window: list[datetime]) -> list[ChannelSeries]:
    # Aware datetimes compare and hash by their instant: the database's UTC hours find the window's.
    position = {hour: index for index, hour in enumerate(window)}
    series: dict[str, dict[str, list[int]]] = {}
    rows = counters.values("hour", "channel", "status").annotate(n=Sum("count")).order_by()
    for hour, channel, status, count in rows.values_list("hour", "channel", "status", "n"):
        counts = series.setdefault(channel, {counted: [0] * len(window) for counted in COUNTED})
        index = position.get(hour)
        if index is not None and status in counts:
            counts[status][index] += count
    return [ChannelSeries(channel, counts) for channel, counts in sorted(series.items()) if any(map(sum, counts.values()))]


def _account_rates(counters: QuerySet[OutcomeCount]) -> list[AccountRate]:
    by_account: dict[tuple[str, str], dict[str, int]] = {}
    rows = counters.values("channel", "account", "status").annotate(n=Sum("count")).order_by()
    for row in rows:
        by_account.setdefault((row["channel"], row["account"]), dict.fromkeys(COUNTED, 0))[row["status"]] += row["n"]
    rates = [
        AccountRate(channel, account, counts[Status.DELIVERED], counts[Status.FAILED], counts[Status.DEAD])
        for (channel, account), counts in sorted(by_account.items())
    ]
    return [rate for rate in rates if rate.total]


def _latency(counters: QuerySet[OutcomeCount]) -> Latency:
    rows = counters.filter(status=Status.DELIVERED).values("latency_le_ms").annotate(n=Sum("count")).order_by("latency_le_ms")
    return Latency([(row["latency_le_ms"], row["n"]) for row in rows if row["n"]])


def failure_reasons_recent(*, hours: int = 24 * 7) -> list[str]:
    """The failure reasons counted in the last ``hours`` (the notifications list's filter)."""
    since = hour_of(timezone.now()) - timedelta(hours=hours)
    rows = OutcomeCount.objects.filter(hour__gte=since, status__in=FAILURES).exclude(reason="")
    # Summed before the test: a counter's rows (shards) may be negative alone (a retry took from another's).
    counted = rows.values("reason").annotate(n=Sum("count")).filter(n__gt=0)
    return list(counted.values_list("reason", flat=True).order_by("reason"))


def provider_accounts_recent(*, hours: int = 24 * 7) -> list[str]:
    """The provider accounts counted in the last ``hours`` (the lists' account filter)."""
    since = hour_of(timezone.now()) - timedelta(hours=hours)
    counted = OutcomeCount.objects.filter(hour__gte=since).values("account").annotate(n=Sum("count")).filter(n__gt=0)
    return list(counted.values_list("account", flat=True).order_by("account"))
