"""Email drain against django-post_office: the same emails through a local SMTP sink (bench/smtp_sink.py)
by our workers (the real email provider: Django's SMTP backend) and by post_office's
``send_queued_mail --processes 2``, in alternating rounds.

Both are timed alike: from the first message the sink receives to the last email recorded as sent
(ours: every notification delivered; post_office: its command has exited, every email sent). CPU
is user + system time (bench/cpu.py): of our worker processes from the publish of the backlog, of
post_office's command and its pool processes from the first message at the sink (``wait4`` of the
command: its reaped children included), and of the PostgreSQL, RabbitMQ and Redis servers over the
same windows.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from bench.cpu import CpuMeter, tree_cpu
from bench.drain import Drain, backlog_accept, backlog_drain, notifications_reset
from bench.harness import (
    EMAIL_PROVIDER,
    LOG_DIR,
    PG_URL,
    POST_OFFICE_DATABASE,
    ROOT,
    BenchProcess,
    free_port,
    log,
    run,
    wait_for,
)


class Sink:
    """bench/smtp_sink.py on a free port, recording into a file of its own."""

    def __init__(self, name: str) -> None:
        self.port = free_port()
        LOG_DIR.mkdir(exist_ok=True)
        self.record = LOG_DIR / f"{name}.arrivals"
        self.record.unlink(missing_ok=True)
        self.process = BenchProcess(
            name, [sys.executable, str(ROOT / "bench" / "smtp_sink.py"), str(self.port), str(self.record)], env=dict(os.environ)
        )
        try:
            wait_for(lambda: "listening" in self.process.tail(), timeout=30, what="the SMTP sink", watch=self.process)
        except BaseException:
            self.process.stop()
            raise

    def arrivals(self) -> list[float]:
        if not self.record.exists():
            return []
        return [float(line) for line in self.record.read_text().split()]

    def count(self) -> int:
        return self.record.read_bytes().count(b"\n") if self.record.exists() else 0

    def first(self) -> float | None:
        return next(iter(self.arrivals()), None)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop()


def _post_office_env(port: int) -> dict[str, str]:
    return dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="bench.post_office_settings",
        POST_OFFICE_DATABASE_URL=f"{PG_URL}/{POST_OFFICE_DATABASE}",
        EMAIL_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )


def post_office_migrate() -> None:
    run(sys.executable, "-m", "django", "migrate", "--no-input", "-v0", cwd=ROOT, env=_post_office_env(0))


def ours(count: int, *, round_number: int) -> Drain:
    notifications_reset()
    ids = backlog_accept(count, tag=f"email-{round_number}")
    with Sink(f"sink-ours-{round_number}") as sink:
        return backlog_drain(
            ids,
            processes=2,
            first_send=sink.first,
            sent=sink.count,
            name="workers-email",
            EMAIL_PROVIDER=EMAIL_PROVIDER,
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=str(sink.port),
            EMAIL_USE_TLS="false",
        )


def post_office(count: int, *, round_number: int, processes: int = 2) -> Drain:
    with Sink(f"sink-post-office-{round_number}") as sink:
        env = _post_office_env(sink.port)
        queued = run(sys.executable, "-m", "bench.post_office_queue", str(count), cwd=ROOT, env=env).stdout.split()
        if queued != [str(count)]:
            raise SystemExit(f"bench: post_office queued {queued}, not {count} emails")
        argv = [sys.executable, "-m", "django", "send_queued_mail", "--processes", str(processes)]
        lockfile = str(LOG_DIR / "post_office")
        meter = CpuMeter()  # finds the services' processes now, so that start() is quick
        with BenchProcess(f"post-office-{round_number}", [*argv, "--lockfile", lockfile], env=env) as command:
            wait_for(lambda: sink.count() > 0, timeout=120, what="post_office's first email", interval=0.01, watch=command)
            cpu_at_first = tree_cpu(command.pid)
            meter.start()
            cpu_total, status = _wait_with_rusage(command, timeout=600)
            finished = time.time()
            services = meter.read()
        if status != 0:
            raise SystemExit(f"bench: send_queued_mail exited {status}:\n{command.tail()}")
        sent, unsent = (
            int(n) for n in run(sys.executable, "-m", "bench.post_office_queue", "sent", cwd=ROOT, env=env).stdout.split()
        )
        if sent != count or unsent:
            raise SystemExit(f"bench: post_office sent {sent} of {count} emails ({unsent} not sent); see {command.log_path}")
        first = sink.first()
        assert first is not None
        return Drain(
            count=count, processes=processes, seconds=finished - first, cpu={"workers": cpu_total - cpu_at_first, **services}
        )


def _wait_with_rusage(command: BenchProcess, *, timeout: float) -> tuple[float, int]:
    """Wait for ``command`` to exit; its CPU seconds (its reaped children included) and exit code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(command.pid, os.WNOHANG)
        if pid:
            command.process.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime, command.process.returncode
        time.sleep(0.01)
    raise SystemExit(f"bench: send_queued_mail still running after {timeout:.0f}s:\n{command.tail()}")


@dataclass(frozen=True)
class EmailComparison:
    count: int
    ours: list[Drain]
    post_office: list[Drain]


def email_drain(count: int, *, rounds: int) -> EmailComparison:
    """Alternate: ours, post_office, ours, post_office, ... ``rounds`` each."""
    post_office_migrate()
    mine: list[Drain] = []
    theirs: list[Drain] = []
    for number in range(1, rounds + 1):
        mine.append(ours(count, round_number=number))
        log(f"email round {number}: ours {mine[-1].rate:.0f}/s")
        theirs.append(post_office(count, round_number=number))
        log(f"email round {number}: post_office {theirs[-1].rate:.0f}/s")
    return EmailComparison(count=count, ours=mine, post_office=theirs)
