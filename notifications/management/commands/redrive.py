"""Send dead letters again with a fresh attempt budget (the same service as the admin's Retry)."""

from __future__ import annotations

from typing import Any

import dramatiq
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications import services
from notifications.models import DeadLetter, Resolution


class Command(BaseCommand):
    help = "Re-drive dead letters: reset the attempt budget, re-enqueue, and record who and when."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dead_letter_ids", nargs="*", type=int, metavar="dead_letter_id")
        parser.add_argument("--all-unresolved", action="store_true", help="Re-drive every unresolved dead letter.")
        parser.add_argument("--user", default=None, help="Username recorded as the one who re-drove them.")

    def handle(self, *args: Any, dead_letter_ids: list[int], all_unresolved: bool, user: str | None, **options: Any) -> None:
        if not dead_letter_ids and not all_unresolved:
            raise CommandError("give one or more dead letter ids, or --all-unresolved")
        by = None
        if user is not None:
            by = get_user_model().objects.filter(username=user).first()
            if by is None:
                raise CommandError(f"no user named {user!r}")
        wanted = set(dead_letter_ids)
        queryset = DeadLetter.objects.filter(pk__in=wanted)
        if all_unresolved:
            queryset = DeadLetter.objects.filter(pk__in=wanted) | DeadLetter.objects.filter(resolution=Resolution.UNRESOLVED)
        dead_letters = list(queryset.order_by("pk"))
        retried = skipped = 0
        for missing in sorted(wanted - {dead_letter.pk for dead_letter in dead_letters}):
            self.stdout.write(f"dead letter {missing}: skipped (no such dead letter)")
            skipped += 1
        for dead_letter in dead_letters:
            result = services.dead_letter_redrive(dead_letter=dead_letter, by=by)
            if result.done:
                retried += 1
                self.stdout.write(f"dead letter {dead_letter.pk}: {result.detail}")
            else:
                skipped += 1
                self.stdout.write(f"dead letter {dead_letter.pk}: skipped ({result.detail})")
        self.stdout.write(f"{retried} retried, {skipped} skipped")
        if retried and settings.BROKER_IS_EMBEDDED:
            self._deliver_in_process()
        unknown = wanted - {dead_letter.pk for dead_letter in dead_letters}
        if unknown:
            raise CommandError(f"no dead letter with id {', '.join(map(str, sorted(unknown)))}")

    def _deliver_in_process(self) -> None:
        """The embedded broker lives and dies with this command: deliver what it queued before
        exiting, or the running platform's sweeper would only find it after QUEUED_TIMEOUT_SECONDS."""
        broker = dramatiq.get_broker()
        worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
        worker.start()
        try:
            for queue in list(broker.get_declared_queues()):
                broker.join(queue, timeout=120_000)  # type: ignore[attr-defined]
        finally:
            worker.stop()
        self.stdout.write("delivered in this process (embedded broker)")
