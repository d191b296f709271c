"""Start the Dramatiq workers that deliver notifications (replaces django_dramatiq's command).

Ours runs ``python -m dramatiq`` from the repo root instead of the ``dramatiq`` script, so the
project's ``platform`` package is first on ``sys.path`` in every worker (platform/__init__.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.conf import BROADCAST_QUEUE, BULK_QUEUE, HIGH_QUEUE, STATUS_EVENT_QUEUE
from notifications.metrics import worker_metrics_environment


class Command(BaseCommand):
    help = "Run Dramatiq worker processes for the notification queues."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--processes", "-p", type=int, default=2)
        parser.add_argument("--threads", "-t", type=int, default=8)
        parser.add_argument("--queues", "-Q", nargs="*", default=[HIGH_QUEUE, BULK_QUEUE, STATUS_EVENT_QUEUE, BROADCAST_QUEUE])
        parser.add_argument("--worker-shutdown-timeout", type=int, default=30_000, help="Milliseconds.")

    def handle(
        self, *args: Any, processes: int, threads: int, queues: list[str], worker_shutdown_timeout: int, **options: Any
    ) -> None:
        if settings.BROKER_IS_EMBEDDED:
            raise CommandError(
                "BROKER_URL is the embedded in-process broker, whose worker runs inside `manage.py runplatform`; "
                "set BROKER_URL=amqp://... to run separate workers."
            )
        argv = [
            sys.executable,
            "-m",
            "dramatiq",
            "django_dramatiq.setup",
            "notifications.actors",
            "--processes",
            str(processes),
            "--threads",
            str(threads),
            "--worker-shutdown-timeout",
            str(worker_shutdown_timeout),
            "--skip-logging",
            "--queues",
            *queues,
        ]
        self.stdout.write(f"starting workers: {' '.join(argv[1:])}")
        self.stdout.flush()
        os.chdir(settings.BASE_DIR)
        # Before the exec, so prometheus_client starts in multiprocess mode in every worker process.
        os.environ.update(worker_metrics_environment())
        os.execv(sys.executable, argv)
