"""Run the outbox sweeper loop: enqueue due notifications, recover lost and stuck ones."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from notifications import services
from notifications.conf import get_config
from notifications.connections import database_connections_refresh

logger = logging.getLogger("notifications.sweeper")


def sweep_forever(stop: threading.Event, interval: float) -> None:
    """Sweep every ``interval`` seconds until ``stop`` is set; errors are logged, never fatal."""
    while not stop.is_set():
        try:
            database_connections_refresh()
            report = services.notification_sweep()
            if report.total:
                logger.info(
                    "sweeper: %d enqueued, %d re-enqueued, %d recovered", report.enqueued, report.requeued, report.recovered
                )
        except Exception:
            logger.exception("sweeper pass failed; trying again in %.1fs", interval)
        stop.wait(interval)


class Command(BaseCommand):
    help = "Run the sweeper that makes the database the outbox (run one or more per deployment)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=None, help="Seconds between passes (SWEEPER_INTERVAL_SECONDS).")
        parser.add_argument("--once", action="store_true", help="Run a single pass and exit.")

    def handle(self, *args: Any, interval: float | None, once: bool, **options: Any) -> None:
        if once:
            report = services.notification_sweep()
            self.stdout.write(f"{report.enqueued} enqueued, {report.requeued} re-enqueued, {report.recovered} recovered")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        interval = interval if interval is not None else get_config().sweeper_interval_seconds
        logger.info("sweeper started, every %.1fs", interval)
        sweep_forever(stop, interval)
        logger.info("sweeper stopped")
