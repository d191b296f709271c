"""Run the RabbitMQ consumer that turns domain events (order.created) into notifications."""

from __future__ import annotations

import logging
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.events import EventConsumer
from notifications.metrics import serve_process_metrics

logger = logging.getLogger("notifications.events")


class Command(BaseCommand):
    help = "Consume order.created events from RabbitMQ into notifications (dead letters into the admin's DLQ)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-dead-letters",
            action="store_true",
            help="Do not consume the DLQ into dead letter rows (leave its messages on the broker).",
        )

    def handle(self, *args: Any, no_dead_letters: bool, **options: Any) -> None:
        if settings.BROKER_IS_EMBEDDED:
            raise CommandError("consume_events needs RabbitMQ: set BROKER_URL=amqp://user:pass@host:5672/vhost")
        consumer = EventConsumer(ingest_dead_letters=not no_dead_letters)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda signum, frame: self._stop(consumer, signum))
        # Process-wide extras (e.g. a metrics exporter on its own port) start here, before consuming.
        if settings.CONSUMER_METRICS_PORT:
            serve_process_metrics(settings.CONSUMER_METRICS_PORT)
        consumer.run()

    def _stop(self, consumer: EventConsumer, signum: int) -> None:
        logger.info("%s received: finishing the message in hand, then stopping", signal.Signals(signum).name)
        consumer.stop()
