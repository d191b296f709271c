"""The admin dashboard's numbers: how many notifications of each hour ended delivered, failed or dead."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models

# Upper bounds (ms) of the accept-to-delivered histogram a delivery is counted in: the dashboard's
# p95 is the bound of the bucket that holds the 95th percentile. Fine where deliveries usually are
# (tens of ms to seconds), coarse where held or scheduled ones are (hours).
LATENCY_BOUNDS_MS = (
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    14_400_000,
    86_400_000,
)
# The bucket of a delivery slower than the last bound.
LATENCY_BEYOND_MS = 2_147_483_647
# The key of a counter row, in the order its unique index has them (hour first: the dashboard
# reads a range of hours).
OUTCOME_COUNT_KEY = ("hour", "channel", "account", "status", "reason", "latency_le_ms", "shard")
# Rows a counter is spread over: a worker thread adds to one of them (services/records/outcome_counts.py),
# so threads recording at once do not queue on one row lock, each until its transaction commits.
OUTCOME_COUNT_SHARDS = 8


def latency_bucket_ms(seconds: float) -> int:
    """The upper bound of the histogram bucket ``seconds`` of accept-to-delivered falls in."""
    ms = seconds * 1000
    return next((bound for bound in LATENCY_BOUNDS_MS if ms <= bound), LATENCY_BEYOND_MS)


def hour_of(moment: datetime) -> datetime:
    """The UTC hour ``moment`` falls in: the counters' time key."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class OutcomeCount(models.Model):
    """One row (``shard``) of the counter of how many notifications accepted in ``hour`` are now
    ``status`` (delivered, failed or dead), by channel, the provider account of the attempt that
    ended them, the failure's reason and, for a delivery, its accept-to-delivered bucket: the sum
    of its rows is the count, a row alone may be negative. Added to in the transaction that records
    each outcome and taken from when a retry sends a failed one again (services/records/outcome_counts.py),
    so the dashboard sums some thousands of rows where a query of the notifications would read millions."""

    hour = models.DateTimeField(help_text="The notifications' created_at, to the hour (UTC).")
    channel = models.CharField(max_length=16)
    account = models.CharField(
        max_length=255, blank=True, default="", help_text="The provider account that ended them; blank: the channel's only one."
    )
    status = models.CharField(max_length=16)
    reason = models.CharField(
        max_length=64, blank=True, default="", help_text="Why they failed (the error's code); blank for deliveries."
    )
    latency_le_ms = models.IntegerField(
        default=0, help_text="A delivery's accept-to-delivered bucket: at most this many ms (0 for failures)."
    )
    count = models.BigIntegerField(default=0)
    # Which of the counter's rows (OUTCOME_COUNT_SHARDS): the dashboard sums them.
    shard = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=list(OUTCOME_COUNT_KEY), name="outcome_count_key")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.channel} {self.status}: {self.count}"
