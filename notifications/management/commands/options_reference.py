"""Write docs/operations.md's environment table and .env.example from the declared options."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.options.reference import stale_references, write_references


class Command(BaseCommand):
    help = "Write the environment table of docs/operations.md and .env.example from notifications/options/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="Write nothing; exit 1 if either file is out of date.")

    def handle(self, *args: Any, check: bool, **options: Any) -> None:
        if check:
            stale = stale_references(settings.BASE_DIR)
            if stale:
                raise CommandError(f"out of date: {', '.join(map(str, stale))}; run manage.py options_reference")
            self.stdout.write("docs/operations.md and .env.example match the options")
            return
        written = write_references(settings.BASE_DIR)
        self.stdout.write("wrote " + ", ".join(map(str, written)) if written else "nothing to write: both files are up to date")
