"""Test helpers: waiting on conditions, and running real platform processes against the test
database, vhost and key prefix of this run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.05, message: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(interval)


def test_database_url() -> str:
    """DATABASE_URL of the database pytest-django created for this run (for child processes)."""
    settings = connection.settings_dict
    host = settings.get("HOST") or "127.0.0.1"
    port = settings.get("PORT") or 5432
    user = settings.get("USER") or "postgres"
    password = settings.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    return f"postgres://{auth}{host}:{port}/{settings['NAME']}"


def platform_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["DJANGO_SETTINGS_MODULE"] = "platform.settings"
    env["PYTHONUNBUFFERED"] = "1"
    # Metrics exporters off unless a test asks for one on a free port: the defaults (9191, 9192)
    # may be held by a platform running beside the suite.
    env["WORKER_METRICS_PORT"] = "0"
    env["CONSUMER_METRICS_PORT"] = "0"
    env.update(overrides)
    return env


class PlatformProcess:
    """A real ``manage.py`` process (worker, sweeper, consumer) with its output kept in a file; with
    ``program``, another server run the same way (a test's own redis-server or RabbitMQ node)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, program: tuple[str, ...] | None = None):
        self.args = args
        self.log = tempfile.NamedTemporaryFile(prefix="platform-proc-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            [*(program or (sys.executable, str(ROOT / "manage.py"))), *args],
            cwd=ROOT,
            env=env or platform_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:
                pass
        return self.process.wait(timeout=5)

    def __enter__(self) -> PlatformProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
