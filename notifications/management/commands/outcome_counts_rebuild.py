"""Count the dashboard's outcome counters again from the notifications of the last --days days."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from notifications import services

# The dashboard shows a week; older hours are only counted again when asked for.
DEFAULT_DAYS = 7
MAX_DAYS = 36500


class Command(BaseCommand):
    help = (
        "Count the admin dashboard's outcome counters again from the notifications made in the last --days days "
        "(once after upgrading to the dashboard, or to check them). Outcomes recorded meanwhile wait for it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"Days counted again (default {DEFAULT_DAYS}).")

    def handle(self, *args: Any, days: int, **options: Any) -> None:
        if not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days must be between 1 and {MAX_DAYS}")
        counted = services.outcome_counts_rebuild(since=timezone.now() - timedelta(days=days))
        self.stdout.write(f"counted {counted} delivered, failed or dead notifications of the last {days} days")
