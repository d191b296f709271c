"""Bring the whole platform up in one command: web (API + admin), workers, sweeper, consumer.

On the embedded default (BROKER_URL unset) everything runs in this one process: Django's server,
a Dramatiq worker on the in-process broker, and the sweeper thread. With BROKER_URL naming
RabbitMQ the worker, sweeper and event consumer run as child processes beside the web server and
are stopped with it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Any

import dramatiq
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from notifications.conf import get_config

from .run_sweeper import sweep_forever


class Command(BaseCommand):
    help = "Run web, workers, sweeper (and the event consumer when on RabbitMQ) together."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addrport", default="127.0.0.1:8000")
        parser.add_argument("--worker-threads", type=int, default=4)

    def handle(self, *args: Any, addrport: str, worker_threads: int, **options: Any) -> None:
        if settings.BROKER_IS_EMBEDDED:
            self._run_embedded(addrport, worker_threads)
        else:
            self._run_with_services(addrport)

    def _run_embedded(self, addrport: str, worker_threads: int) -> None:
        worker = dramatiq.Worker(dramatiq.get_broker(), worker_threads=worker_threads, worker_timeout=100)
        worker.start()
        stop = threading.Event()
        sweeper = threading.Thread(
            target=sweep_forever, args=(stop, get_config().sweeper_interval_seconds), name="sweeper", daemon=True
        )
        sweeper.start()
        self.stdout.write(
            f"embedded platform: in-process broker with {worker_threads} worker threads, sweeper, web on http://{addrport}/"
        )
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            stop.set()
            worker.stop()

    def _run_with_services(self, addrport: str) -> None:
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = {
            "worker": subprocess.Popen([*manage, "rundramatiq", "--processes", "2", "--threads", "8"]),
            "sweeper": subprocess.Popen([*manage, "run_sweeper"]),
            "consumer": subprocess.Popen([*manage, "consume_events"]),
        }
        self.stdout.write(
            f"platform on services: web on http://{addrport}/, " + ", ".join(f"{n} pid {p.pid}" for n, p in children.items())
        )
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            for process in children.values():
                process.terminate()
            for process in children.values():
                try:
                    process.wait(timeout=35)
                except subprocess.TimeoutExpired:
                    process.kill()
