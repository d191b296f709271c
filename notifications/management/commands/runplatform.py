"""Bring the whole platform up in one command: web (API + admin), workers, sweeper, consumer.

The web is platform/asgi.py's application on uvicorn: the API and admin (the WSGI application in
a thread pool) and the inbox's live stream (an async view) at one address.

On the embedded default (BROKER_URL unset) everything runs in this one process: uvicorn, a
Dramatiq worker on the in-process broker, and the sweeper thread. It has to be one process: the
in-process broker's queue and the inbox's wake-ups live in the memory of the process that accepts
the notification. With BROKER_URL naming RabbitMQ the web is gunicorn with uvicorn workers,
configured by gunicorn.conf.py, as deployed (only the bind address differs), and it, the worker,
the sweeper and the event consumer run as child processes; when one of them exits, or this
command is stopped, the others are stopped too.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Any

import dramatiq
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.conf import get_config

from .run_sweeper import sweep_forever

# Past gunicorn's graceful timeout (30 s) and a worker's in-flight send.
CHILD_STOP_SECONDS = 35


# A burst of a few hundred clients waits in the listen queue rather than being reset (the kernel
# caps it at somaxconn).
LISTEN_BACKLOG = 1024


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
        host, _, port = addrport.rpartition(":")
        config = uvicorn.Config(
            "platform.asgi:application",
            host=host or "127.0.0.1",
            port=int(port),
            backlog=LISTEN_BACKLOG,
            access_log=False,  # the app logs one line per request (notifications.request)
            log_config=None,  # Django's LOGGING is in force
            lifespan="on",
        )
        try:
            uvicorn.Server(config).run()
        finally:
            stop.set()
            worker.stop()

    def _run_with_services(self, addrport: str) -> None:
        base_dir = settings.BASE_DIR
        manage = [sys.executable, str(base_dir / "manage.py")]
        # `python -m gunicorn` from the repo root, so `platform` is the project package (docs/operations.md).
        gunicorn = [sys.executable, "-m", "gunicorn", "--config", str(base_dir / "gunicorn.conf.py"), "--bind", addrport]
        commands = {
            "web": [*gunicorn, "platform.asgi:application"],
            "worker": [*manage, "rundramatiq", "--processes", "2", "--threads", "8"],
            "sweeper": [*manage, "run_sweeper"],
            "consumer": [*manage, "consume_events"],
        }
        exited = threading.Event()
        children: dict[str, subprocess.Popen[bytes]] = {}

        def watch(process: subprocess.Popen[bytes]) -> None:
            process.wait()
            exited.set()

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            for name, command in commands.items():
                children[name] = subprocess.Popen(command, cwd=base_dir)
                threading.Thread(target=watch, args=(children[name],), name=f"watch-{name}", daemon=True).start()
            self.stdout.write(
                f"platform on services: web (gunicorn, uvicorn workers) on http://{addrport}/, "
                + ", ".join(f"{name} pid {process.pid}" for name, process in children.items())
            )
            exited.wait()
            gone = ", ".join(f"{name} (exit {p.returncode})" for name, p in children.items() if p.returncode is not None)
            raise CommandError(f"stopping the platform: {gone} exited")
        finally:
            for process in children.values():
                if process.poll() is None:
                    process.terminate()
            for process in children.values():
                try:
                    process.wait(timeout=CHILD_STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
