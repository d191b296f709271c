"""Send dead letters again with a fresh attempt budget (the same service as the admin's Retry)."""

from __future__ import annotations

from typing import Any

import dramatiq
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

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
        selected = Q(pk__in=wanted) | Q(resolution=Resolution.UNRESOLVED) if all_unresolved else Q(pk__in=wanted)
        dead_letters = list(DeadLetter.objects.filter(selected).order_by("pk"))
        unknown = sorted(wanted - {dead_letter.pk for dead_letter in dead_letters})
        retried = 0
        for missing in unknown:
            self.stdout.write(f"dead letter {missing}: skipped (no such dead letter)")
        for dead_letter in dead_letters:
            result = services.dead_letter_redrive(dead_letter=dead_letter, by=by)
            retried += result.done
            self.stdout.write(f"dead letter {dead_letter.pk}: {result.detail if result.done else f'skipped ({result.detail})'}")
        self.stdout.write(f"{retried} retried, {len(unknown) + len(dead_letters) - retried} skipped")
        if retried and settings.BROKER_IS_EMBEDDED:
            self._deliver_in_process()
        if unknown:
            raise CommandError(f"no dead letter with id {', '.join(map(str, unknown))}")

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
