"""Helpers of the fault tests (tests/test_faults.py): a webhook receiver that records the id of every
notification sent to it, the platform's processes for one test, a RabbitMQ node of a test's own,
and the checks and figures every fault test ends with (accepted, delivered, duplicates, time to
recover)."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pika
import pika.exceptions
import requests
from prometheus_client.parser import text_string_to_metric_families

from notifications import services
from notifications.models import FINISHED_STATUSES, ApiClient, AttemptOutcome, DeliveryAttempt, Notification, Status

from .fakes import FakeProviderServer, Reply
from .helpers import PlatformProcess, platform_env, wait_until
from .live_servers import WebServer, free_port, gunicorn_server

T = TypeVar("T")
# A scripted reply that never comes: the receiver holds the request open (status 0 in its record).
HANG = Reply(status=0, hang=True)


class WebhookReceiver(FakeProviderServer):
    """The webhook endpoint of a fault test: records every POST (the notification id is its
    ``Idempotency-Key``), answers after ``latency`` seconds, and answers the first ``times``
    requests of each notification to a scripted path with the scripted reply (every request
    with ``times=None``)."""

    def __init__(self, *, latency: float = 0.0) -> None:
        super().__init__()
        self.latency = latency
        self._scripts: dict[str, tuple[Reply, int | None]] = {}
        self._seen: collections.Counter[tuple[str, str]] = collections.Counter()
        self._script_lock = threading.Lock()

    def script(self, path: str, reply: Reply, *, times: int | None = None) -> str:
        """Answer requests to ``path`` with ``reply``; returns the path's URL."""
        self._scripts[path] = (reply, times)
        return self.url(path)

    def _default_reply(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if path in self._scripts:
            reply, times = self._scripts[path]
            with self._script_lock:
                key = (path, headers.get("idempotency-key", ""))
                self._seen[key] += 1
                if times is None or self._seen[key] <= times:
                    return reply
        if self.latency:
            time.sleep(self.latency)  # the provider's own time to answer: the send is in flight meanwhile
        return super()._default_reply(path, headers, body)

    def receipts(self) -> collections.Counter[str]:
        """How many times each notification id came here and may have been acted on: answered with
        a success, or never answered (a refusal, 4xx or 5xx, is not counted)."""
        with self._lock:
            return collections.Counter(
                request.headers.get("idempotency-key", "")
                for request in self.requests
                if request.reply_status == HANG.status or 200 <= request.reply_status < 300
            )

    def answered_at(self) -> list[float]:
        """When each send was answered with a success (time.monotonic()), in order."""
        with self._lock:
            return sorted(request.received_at for request in self.requests if 200 <= request.reply_status < 300)


class ProcessExited(AssertionError):
    """A process of the test stopped without being told to."""


class FaultPlatform:
    """The processes of one fault test, on this run's database, vhost and key prefix unless the test
    names others: workers, sweepers and gunicorn, sending webhooks to the receiver with short
    retry timings. All are stopped at the end, whatever happened."""

    def __init__(self, receiver: WebhookReceiver, **env: str) -> None:
        self.env = {
            "WEBHOOK_ALLOW_HOSTS": receiver.host_port,
            "WEBHOOK_TIMEOUT_SECONDS": "2",
            "PROVIDER_TIMEOUT_SECONDS": "2",
            "NOTIFICATIONS_RATE_LIMITS": "webhook=1000/s",
            "RETRY_BASE_SECONDS": "0.1",
            "RETRY_CAP_SECONDS": "0.5",
            "RETRY_MAX_ATTEMPTS": "5",
            "SWEEPER_INTERVAL_SECONDS": "0.2",
            "QUEUED_TIMEOUT_SECONDS": "10",
            # Far longer than a send takes here, so only a send whose worker is gone is recovered.
            "SENDING_TIMEOUT_SECONDS": "4",
            "LOG_FORMAT": "text",
            **env,
        }
        self.processes: list[PlatformProcess] = []
        self.servers: list[WebServer] = []
        self._servers = ExitStack()
        self._killed: set[int] = set()

    def worker(self, *, threads: int = 4, **env: str) -> PlatformProcess:
        return self._start("rundramatiq", "--processes", "1", "--threads", str(threads), **env)

    def sweeper(self, **env: str) -> PlatformProcess:
        return self._start("run_sweeper", **env)

    def web(self, **env: str) -> WebServer:
        server = self._servers.enter_context(gunicorn_server(**{**self.env, **env}))
        self.servers.append(server)
        return server

    def _start(self, *args: str, **env: str) -> PlatformProcess:
        process = PlatformProcess(*args, env=platform_env(**{**self.env, **env}))
        self.processes.append(process)
        return process

    def kill(self, process: PlatformProcess) -> None:
        """SIGKILL a process of the test (its whole group), as a crash would."""
        self._killed.add(process.pid)
        process.kill()

    def wait(self, predicate: Callable[[], T], *, timeout: float, message: str) -> T:
        """``wait_until``, failing at once with the logs when a process exited on its own (a crash
        at start-up, a crash loop) rather than at the deadline."""

        def checked() -> T:
            running = [(" ".join(p.args), p.process) for p in self.processes if p.pid not in self._killed]
            for name, process in running + [(f"gunicorn {s.base_url}", s.process) for s in self.servers]:
                if process.poll() is not None:
                    raise ProcessExited(f"{name} exited while waiting for: {message}\n{self.logs()}")
            return predicate()

        try:
            return wait_until(checked, timeout=timeout, interval=0.1, message=message)
        except ProcessExited:
            raise
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.logs()}") from None

    def logs(self) -> str:
        parts = [f"--- {' '.join(p.args)} (pid {p.pid})\n{p.output()[-4000:]}" for p in self.processes]
        parts += [f"--- gunicorn {s.base_url}\n{s.output()[-4000:]}" for s in self.servers]
        return "\n".join(parts)

    def stop(self) -> None:
        # Killed, not stopped: nothing of theirs is left to finish, and teardown stays fast.
        for process in self.processes:
            process.kill()
        self._servers.close()


def accept_webhooks(client: ApiClient, urls: Iterable[str], **fields: Any) -> list[str]:
    """Accept a webhook to each URL through the batch accept service (one transaction and one
    publish per hundred), so a backlog is queued at once; returns the ids in order."""
    items = []
    for n, url in enumerate(urls):
        payload = {"user_id": f"u{n}", "channel": "webhook", "to": url, "message": f"event {n}", **fields}
        items.append(
            services.BatchItem(
                request=services.NotificationRequest(**payload),
                idempotency_key=f"fault-{uuid.uuid4().hex}",
                fingerprint=services.request_fingerprint(payload),
            )
        )
    ids: list[str] = []
    for start in range(0, len(items), 100):
        for result in services.notification_accept_batch(client=client, items=items[start : start + 100]):
            assert isinstance(result, services.AcceptResult) and result.status_code == 202, result
            ids.append(result.notification_id)
    return ids


def post_webhook(web: WebServer, token: str, to: str, n: int) -> requests.Response:
    """POST one webhook notification to the web process's API."""
    return requests.post(
        web.url("/api/v1/notifications"),
        json={"user_id": f"u{n}", "channel": "webhook", "to": to, "message": f"event {n}"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def assert_unavailable(responses: list[requests.Response]) -> None:
    """Each answered what a client can act on while the database is away: 503 JSON, code
    ``unavailable``, a Retry-After."""
    for response in responses:
        assert response.status_code == 503, response.content[:500]
        assert response.headers["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "unavailable"
        assert int(response.headers["Retry-After"]) > 0


def accepted_again(platform: FaultPlatform, web: WebServer, token: str, url: str, *, timeout: float) -> requests.Response:
    """POST until the API accepts again after an outage; the first 202."""
    answers: list[requests.Response] = []

    def accepted() -> bool:
        response = post_webhook(web, token, url, 200 + len(answers))
        answers.append(response)
        return response.status_code == 202

    platform.wait(accepted, timeout=timeout, message="the API accepts again")
    return answers[-1]


def interrupted_ids(ids: Iterable[str]) -> set[str]:
    """The notifications of ``ids`` with a send the sweeper recovered as interrupted: those whose
    outcome a fault hid."""
    attempts = DeliveryAttempt.objects.filter(notification__in=list(ids), outcome=AttemptOutcome.INTERRUPTED)
    return {str(pk) for pk in attempts.values_list("notification_id", flat=True)}


def ids_in(ids: Iterable[str], status: str) -> set[str]:
    return {str(pk) for pk in Notification.objects.filter(pk__in=list(ids), status=status).values_list("pk", flat=True)}


def wait_until_final(ids: list[str], *, timeout: float, platform: FaultPlatform) -> float:
    """Wait until every notification of ``ids`` is in a final state; returns when (time.monotonic())."""

    def unfinished() -> int:
        return Notification.objects.filter(pk__in=ids).exclude(status__in=FINISHED_STATUSES).count()

    try:
        platform.wait(lambda: unfinished() == 0, timeout=timeout, message="every notification final")
    except AssertionError as error:
        counts = collections.Counter(Notification.objects.filter(pk__in=ids).values_list("status", flat=True))
        raise type(error)(f"statuses {dict(counts)}: {error}") from None
    return time.monotonic()


@dataclass(frozen=True)
class FaultFigures:
    """What a fault test reports: notifications accepted and delivered, sends the receiver saw more
    than once (and how many were in flight when the fault came), and the time to recover."""

    fault: str
    accepted: int
    delivered: int
    duplicates: int
    in_flight: int
    recovery_seconds: float
    note: str = ""

    def __str__(self) -> str:
        note = f"; {self.note}" if self.note else ""
        return (
            f"FAULT {self.fault}: accepted {self.accepted}, delivered {self.delivered}, duplicates {self.duplicates} "
            f"(in flight at the fault: {self.in_flight}), recovered in {self.recovery_seconds:.1f} s{note}"
        )


def check_nothing_lost(
    fault: str, *, ids: list[str], receiver: WebhookReceiver, in_flight: set[str], recovery_seconds: float, note: str = ""
) -> FaultFigures:
    """The fault tests' common verdict, printed: every accepted notification is stored and final,
    every delivered one reached the receiver, and any the receiver got more than once was in
    flight at the fault (a send whose outcome the fault hid)."""
    statuses = {str(pk): status for pk, status in Notification.objects.filter(pk__in=ids).values_list("pk", "status")}
    assert len(statuses) == len(set(ids)), "accepted notifications are missing from the database"
    assert all(status in FINISHED_STATUSES for status in statuses.values()), collections.Counter(statuses.values())
    receipts = receiver.receipts()
    delivered = {pk for pk, status in statuses.items() if status == Status.DELIVERED}
    assert not {pk for pk in delivered if receipts[pk] == 0}, "delivered without the receiver seeing it"
    duplicated = {pk for pk, count in receipts.items() if count > 1}
    assert duplicated <= in_flight, f"sent twice without being in flight at the fault: {duplicated - in_flight}"
    figures = FaultFigures(
        fault=fault,
        accepted=len(ids),
        delivered=len(delivered),
        duplicates=sum(count - 1 for count in receipts.values() if count > 1),
        in_flight=len(in_flight),
        recovery_seconds=recovery_seconds,
        note=note,
    )
    print(f"\n{figures}")
    return figures


def worker_metric(port: int, name: str, **labels: str) -> float:
    """A sample of a worker's /metrics (0 until its exporter answers)."""
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except requests.RequestException:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def connections_with_heartbeat(vhost: str, heartbeat: int) -> int:
    """Client connections to ``vhost`` that negotiated a ``heartbeat`` of that many seconds."""
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "vhost", "timeout", "--no-table-headers"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return sum(1 for line in listed.stdout.splitlines() if line.split("\t") == [vhost, str(heartbeat)])


# --- A RabbitMQ node of the test's own -----------------------------------------------------------

# Debian's server script itself: /usr/sbin/rabbitmq-server would run it as the shared node's user.
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitmqNode:
    """A RabbitMQ node of one test (its own node name, ports, data, log and configuration in a
    temporary directory, no plugins), for what RabbitMQ 3.10 sets only node-wide, such as the
    consumer timeout: the shared node is never reconfigured. ``stop()`` removes it all."""

    def __init__(self, *, config: str, advanced_config: str = "[].") -> None:
        # A free port may be taken again before the node binds it (another process's outgoing
        # connection draws from the same ephemeral range): then the node is started again on others.
        for attempt in range(3):
            try:
                self._start(config=config, advanced_config=advanced_config)
                return
            except AssertionError:
                if attempt == 2:
                    raise

    def _start(self, *, config: str, advanced_config: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="fault-rabbitmq-"))
        self.port = free_port()
        dist_port = free_port()
        while dist_port == self.port:
            dist_port = free_port()
        files = {
            "rabbitmq.conf": f"listeners.tcp.default = 127.0.0.1:{self.port}\n{config}\n",
            "advanced.config": f"{advanced_config}\n",
            "enabled_plugins": "[].\n",
            "rabbitmq-env.conf": "",  # not the shared node's /etc/rabbitmq/rabbitmq-env.conf
        }
        for name, text in files.items():
            (self.directory / name).write_text(text)
        # None of the shared node's settings (this run's RABBITMQ_VHOST, say): only its own.
        inherited = {name: value for name, value in os.environ.items() if not name.startswith(("RABBITMQ_", "ERL_"))}
        env = {
            **inherited,
            "HOME": str(self.directory),  # its Erlang cookie
            "RABBITMQ_NODENAME": f"fault-{self.port}@localhost",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONF_ENV_FILE": str(self.directory / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.directory / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_LOGS": "-",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.process = PlatformProcess(env=env, program=(RABBITMQ_SERVER,))
        try:
            exited = lambda: self.process.process.poll() is not None  # noqa: E731  (its boot failed: a port taken)
            wait_until(
                lambda: exited() or self._answers(), timeout=60, interval=0.25, message=f"RabbitMQ node on port {self.port}"
            )
            if exited():
                raise AssertionError(f"RabbitMQ node on port {self.port} exited at boot: {self.process.output()[-500:]}")
        except AssertionError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(f"{self.url}?connection_attempts=1&socket_timeout=2"))

    def _answers(self) -> bool:
        assert self.process.process.poll() is None, self.output()[-3000:]
        # Its listener starts last, once the node is up; until then pika would log each refusal.
        if "started TCP listener" not in self.output():
            return False
        try:
            self.connect().close()
        except pika.exceptions.AMQPError:
            return False
        return True

    def output(self) -> str:
        return self.process.output()

    def stop(self) -> None:
        self.process.stop(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)
