"""Delete old finished notifications, their attempts, expired idempotency keys and event dedup records, in batches."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications import services
from notifications.conf import get_config

_AGE_RE = re.compile(r"^\s*(?P<count>\d+)\s*(?P<unit>[dhm]?)\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "": "days"}
# Zero would purge every finished row at once, and ages past this overflow the cutoff date; both
# are typos, so they are refused rather than acted on.
_MAX_AGE = timedelta(days=36500)


def parse_age(value: str) -> timedelta:
    """``30d``, ``12h``, ``90m`` or a bare number of days; more than zero, at most 36500 days."""
    match = _AGE_RE.match(value)
    if not match:
        raise CommandError(f"--older-than {value!r}: give an age like 30d, 12h or 90m")
    count = int(match["count"])
    unit = _UNITS[match["unit"]]
    if count < 1:
        raise CommandError(f"--older-than {value!r}: the age must be more than zero")
    if count > _MAX_AGE / timedelta(**{unit: 1}):
        raise CommandError(f"--older-than {value!r}: the age must be at most {_MAX_AGE.days}d")
    return timedelta(**{unit: count})


def describe_age(age: timedelta) -> str:
    """``30 days`` rather than timedelta's ``30 days, 0:00:00``."""
    seconds = int(age.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"


class Command(BaseCommand):
    help = (
        "Delete finished notifications older than --older-than (default: RETENTION_DAYS) with their attempts, "
        "and expired idempotency keys and event dedup records. Unresolved dead letters, and their notifications, are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", default=None, help="Age like 30d, 12h or 90m (default: RETENTION_DAYS days).")
        parser.add_argument("--batch-size", type=int, default=1000, help="Rows deleted per transaction.")

    def handle(self, *args: Any, older_than: str | None, batch_size: int, **options: Any) -> None:
        age = parse_age(older_than) if older_than else timedelta(days=get_config().retention_days)
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        report = services.notification_purge(older_than=age, batch_size=batch_size)
        self.stdout.write(
            f"deleted {report.notifications} notifications, {report.attempts} attempts, "
            f"{report.dead_letters} resolved dead letters, {report.idempotency_keys} expired idempotency keys, "
            f"{report.processed_events} expired event dedup records, {report.outcome_counts} dashboard counters "
            f"(older than {describe_age(age)})"
        )
