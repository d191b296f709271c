"""What every part of the bench shares: this run's database, vhost and key prefix, the platform's
environment as deployed, and the processes the bench starts (each in its own process group, each
stopped by the ``with`` that started it)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUN_ID = f"{int(time.time())}{os.getpid()}"
DATABASE = f"notifications_bench_{RUN_ID}"
POST_OFFICE_DATABASE = f"post_office_bench_{RUN_ID}"
VHOST = f"notifications-bench-{RUN_ID}"
PREFIX = f"nt-bench-{RUN_ID}"
PG_URL = "postgres://postgres@127.0.0.1:5432"
BROKER_URL = f"amqp://guest:guest@127.0.0.1:5672/{VHOST}"
LOG_DIR = Path(f"/tmp/bench-{RUN_ID}")
NOOP_PROVIDER = "bench.noop_provider.NoopProvider"
EMAIL_PROVIDER = "notifications.channels.email.DjangoEmailProvider"
UNLIMITED = "email=1000000/s,sms=1000000/s,push=1000000/s,webhook=1000000/s"

# As deployed (deploy/production.env.example) where it matters for speed: DEBUG off, JSON logs at
# INFO for the web process (gunicorn's access log), a secret key; but plain HTTP on 127.0.0.1, no
# API throttle (the bench is one client sending far over the default 6000/min), no metrics ports
# (a platform running beside the bench holds the defaults), and the no-op email provider.
BENCH_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": f"bench-{RUN_ID}-not-a-secret-but-long-enough-for-django-checks",
    "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
    "DATABASE_URL": f"{PG_URL}/{DATABASE}",
    "BROKER_URL": BROKER_URL,
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "CACHE_KEY_PREFIX": PREFIX,
    "EMAIL_PROVIDER": NOOP_PROVIDER,
    "NOTIFICATIONS_RATE_LIMITS": UNLIMITED,
    "API_THROTTLE_RATE": "100000000/s",
    "LOG_LEVEL": "WARNING",
    "LOG_FORMAT": "json",
    "WORKER_METRICS_PORT": "0",
    "CONSUMER_METRICS_PORT": "0",
    "PYTHONUNBUFFERED": "1",
}


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"bench: `{' '.join(args)}` failed ({exc.returncode}):\n{exc.stderr or exc.stdout}") from None


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"bench: `{name}` is not on PATH; {hint}")
    return path


def psql(sql: str, *, database: str = "postgres") -> str:
    return run("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-AtqXc", sql).stdout


def platform_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ, **BENCH_ENV, DJANGO_SETTINGS_MODULE="platform.settings")
    env.update(overrides)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05, watch: BenchProcess | None = None
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the bench after ``timeout`` s, or
    at once when the process ``watch`` has died (with the end of its log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if watch is not None and not watch.alive():
            raise SystemExit(f"bench: {watch.name} exited ({watch.process.returncode}) while waiting for {what}:\n{watch.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class BenchProcess:
    """A process the bench starts, in a session of its own so that stop() ends it and every child
    it forked; its output goes to a file under LOG_DIR. Use it as a context manager."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path = ROOT) -> None:
        self.name = name
        LOG_DIR.mkdir(exist_ok=True)
        self.log_path = LOG_DIR / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.process.wait()
        # Children that outlived their parent are still in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self._log.close()

    def __enter__(self) -> BenchProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def manage(name: str, *args: str, env: dict[str, str] | None = None) -> BenchProcess:
    return BenchProcess(name, [sys.executable, str(ROOT / "manage.py"), *args], env=env or platform_env())


def workers(*, processes: int = 2, threads: int = 8, name: str = "workers", **env: str) -> BenchProcess:
    """``manage.py rundramatiq`` as deployed (its defaults: 2 processes x 8 threads)."""
    return manage(
        f"{name}-p{processes}", "rundramatiq", "--processes", str(processes), "--threads", str(threads), env=platform_env(**env)
    )


# --- Resources of this run ---------------------------------------------------------------------


@contextlib.contextmanager
def bench_resources() -> Iterator[None]:
    """This run's two databases, vhost and key prefix, removed afterwards whatever happened."""
    run(str(ROOT / "scripts" / "services.sh"))
    require_tool("psql", "install Debian's postgresql-client")
    require_tool("rabbitmqctl", "the bench makes a RabbitMQ vhost of its own with it")
    require_tool("redis-cli", "install Debian's redis-tools")
    try:
        for database in (DATABASE, POST_OFFICE_DATABASE):
            psql(f'CREATE DATABASE "{database}"')
        run("rabbitmqctl", "-q", "add_vhost", VHOST)
        run("rabbitmqctl", "-q", "set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
        yield
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", VHOST], capture_output=True)
        keys = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "--scan", "--pattern", f"{PREFIX}:*"], capture_output=True, text=True
        ).stdout.split()
        for start in range(0, len(keys), 1000):
            subprocess.run(["redis-cli", "-h", "127.0.0.1", "del", *keys[start : start + 1000]], capture_output=True)
        if "django" in sys.modules:
            from django.db import connections

            connections.close_all()
        for database in (DATABASE, POST_OFFICE_DATABASE):
            subprocess.run(
                [
                    "psql",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-qc",
                    f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)',
                ],
                capture_output=True,
            )


def setup_django() -> None:
    """Migrate this run's database, then set Django up in the bench process on the same settings."""
    run(sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v0", cwd=ROOT, env=platform_env())
    os.environ.update(platform_env())
    import django

    django.setup()


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (sorted or not); nan when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]
