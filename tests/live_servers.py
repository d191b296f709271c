"""Real web servers for the tests that must go through one (Django's test client skips the server
and its WSGI environ): gunicorn with uvicorn workers as deployed by gunicorn.conf.py on this run's
services, and the embedded default as `make run` starts it (`runplatform`: uvicorn, in-process
broker, SQLite)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from .helpers import ROOT, platform_env, wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class WebServer:
    """A server process on 127.0.0.1:``port`` with its output in a file, stopped with its group."""

    def __init__(self, command: list[str], *, port: int, env: dict[str, str]) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="web-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_until(lambda: self.process.poll() is not None or self._answers(), timeout=60, message="server up")
        except AssertionError:
            self.stop()
            raise
        assert self.process.poll() is None, self.output()

    def _answers(self) -> bool:
        try:
            return requests.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def url(self, path: str) -> str:
        return self.base_url + path

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def gunicorn_server(**env: str) -> Iterator[WebServer]:
    """gunicorn with gunicorn.conf.py (only the bind differs), on this run's database, vhost and
    key prefix. Needs the test database to exist (``django_db_setup``)."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"]
    # One worker unless a test asks for more (tests/test_metrics.py): each starts Django, which is
    # most of a server's start-up on two cores.
    env = {"WEB_CONCURRENCY": "1", **env}
    with WebServer([*command, "platform.asgi:application"], port=port, env=platform_env(**env)) as server:
        yield server


def embedded_env(directory: Path, **overrides: str) -> dict[str, str]:
    """The embedded default's environment: SQLite in ``directory``, the in-process broker, the
    local-memory cache; whatever this run's services are, they are not named."""
    env = platform_env(
        DATABASE_URL=f"sqlite:///{directory / 'db.sqlite3'}",
        BROKER_URL="memory://",
        REDIS_URL="",
        EMAIL_FILE_PATH=str(directory / "mail"),
        **overrides,
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


@contextlib.contextmanager
def embedded_platform(directory: Path, **env: str) -> Iterator[tuple[WebServer, str]]:
    """``manage.py runplatform`` on a fresh SQLite file, as `make run` starts it (migrate, an API
    client, then the platform); yields the server and the client's token."""
    environment = embedded_env(directory, **env)
    manage(environment, "migrate", "--no-input", "-v0")
    printed = manage(environment, "create_api_client", "embedded")
    token = next(word for word in printed.split() if word.startswith("ntf_live_"))
    port = free_port()
    command = [sys.executable, str(ROOT / "manage.py"), "runplatform", "--addrport", f"127.0.0.1:{port}"]
    with WebServer(command, port=port, env=environment) as server:
        yield server, token
