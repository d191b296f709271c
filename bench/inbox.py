"""The in-app inbox's live streams (issue #27): STREAMS concurrent GET /api/v1/inbox/stream held by
one ASGI process (gunicorn --workers 1 with its uvicorn worker, as deployed), while notifications
are accepted over HTTP at RATE/s spread over their users and delivered by rundramatiq as deployed.
The figure is the time from the accept's request to its item.created event read at the client
(p50, p95, max), and the web process's memory per open stream (RSS after opening them, less
before). Also: GET /inbox/counts for a user with 100,000 items (p95), a row read.

The client is one asyncio loop of raw sockets in this process (no client library's overhead per
connection); the accepts are paced from a thread of their own.
"""

from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import requests

from bench.accept_http import api_token, web_server
from bench.harness import log, percentile, wait_for, workers

OPEN_AT_ONCE = 100  # connections being opened at a time


@dataclass
class InboxRun:
    streams: int
    rate: float
    seconds: float
    sent: int = 0
    received: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    # The same, split at the item's commit (its created_at): accept -> in the inbox -> at the client.
    delivery_ms: list[float] = field(default_factory=list)
    stream_ms: list[float] = field(default_factory=list)
    rss_before_mb: float = 0.0
    rss_open_mb: float = 0.0
    counts_p95_ms: float = 0.0
    counts_items: int = 0

    @property
    def per_stream_kb(self) -> float:
        return (self.rss_open_mb - self.rss_before_mb) * 1024 / self.streams

    def lines(self) -> list[str]:
        p50, p95 = percentile(self.latencies_ms, 0.5), percentile(self.latencies_ms, 0.95)
        return [
            "## In-app inbox: live streams (bench/inbox.py)",
            "",
            f"{self.streams:,} streams held by one ASGI process (gunicorn --workers 1, uvicorn worker); "
            f"{self.sent:,} notifications accepted over HTTP at {self.rate:g}/s for {self.seconds:g}s, spread over the "
            f"streams' users, delivered by rundramatiq (2 x 8).",
            "",
            "| figure | value |",
            "| --- | --- |",
            f"| item.created events received | {self.received:,} of {self.sent:,} |",
            f"| accept -> event at the client, p50 | {p50:.0f} ms |",
            f"| accept -> event at the client, p95 | {p95:.0f} ms |",
            f"| accept -> event at the client, max | {max(self.latencies_ms, default=float('nan')):.0f} ms |",
            f"| of which accept -> item in the inbox (worker), p50 / p95 | {percentile(self.delivery_ms, 0.5):.0f} / "
            f"{percentile(self.delivery_ms, 0.95):.0f} ms |",
            f"| of which item in the inbox -> event at the client (stream), p50 / p95 | {percentile(self.stream_ms, 0.5):.0f} / "
            f"{percentile(self.stream_ms, 0.95):.0f} ms |",
            f"| web process RSS before / with the streams open | {self.rss_before_mb:.0f} MB / {self.rss_open_mb:.0f} MB |",
            f"| memory per open stream | {self.per_stream_kb:.1f} KB |",
            f"| GET /inbox/counts p95, user with {self.counts_items:,} items | {self.counts_p95_ms:.1f} ms |",
        ]


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (gunicorn's master and its worker)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if int(fields.get("Pid", 0)) == pid or int(fields.get("PPid", 0)) == pid:
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total / 1024


class StreamClient:
    """STREAMS raw-socket SSE readers on one loop; item.created arrivals by notification id."""

    def __init__(self, host: str, port: int, tokens: list[str]) -> None:
        self.host, self.port, self.tokens = host, port, tokens
        # notification id -> (when the event was read, the item's created_at), wall clock seconds.
        self.arrivals: dict[str, tuple[float, float]] = {}
        self.open = 0
        self.failed = 0
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()

    async def _reader(self, token: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
                writer.write(
                    f"GET /api/v1/inbox/stream?token={token} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode()
                )
                status = await reader.readline()
                if b" 200 " not in status:
                    self.failed += 1
                    return
                while await reader.readline() not in (b"\r\n", b""):
                    pass
            except OSError:
                self.failed += 1
                return
        self.open += 1
        event = ""
        while not self.stop.is_set():
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"event: "):
                event = line[7:].strip().decode()
            elif line.startswith(b"data: ") and event == "item.created":
                data = json.loads(line[6:])
                created = datetime.fromisoformat(data["created_at"].replace("Z", "+00:00")).timestamp()
                self.arrivals.setdefault(data["notification_id"], (time.time(), created))
        writer.close()

    async def _main(self) -> None:
        gate = asyncio.Semaphore(OPEN_AT_ONCE)
        tasks = [asyncio.create_task(self._reader(token, gate)) for token in self.tokens]
        await self.stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def run(self) -> threading.Thread:
        thread = threading.Thread(target=lambda: self.loop.run_until_complete(self._main()), daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)


def _counts_p95(url: str, *, items: int) -> float:
    """p95 of GET /inbox/counts for a user with ``items`` items (written straight, as delivered)."""
    from notifications.models import ApiClient, InboxCounter, InboxItem
    from notifications.services.inbox import inbox_token_issue

    client = ApiClient.objects.get(name="bench-http")
    rows = [InboxItem(client=client, user_id="heavy", notification_id=uuid.uuid4(), title="t", body="b") for _ in range(items)]
    InboxItem.objects.bulk_create(rows, batch_size=5000)
    InboxCounter.objects.update_or_create(
        client=client, user_id="heavy", defaults={"unseen": items, "unread": items, "total": items}
    )
    token, _ = inbox_token_issue(client=client, user_id="heavy", ttl_seconds=3600)
    session, timings = requests.Session(), []
    for _ in range(220):
        started = time.monotonic()
        assert session.get(f"{url}/api/v1/inbox/counts", headers={"Authorization": f"Bearer {token}"}, timeout=10).ok
        timings.append((time.monotonic() - started) * 1000)
    return percentile(timings[20:], 0.95)


def inbox_streams(*, streams: int = 2000, rate: float = 100.0, seconds: float = 20.0) -> InboxRun:
    from notifications.models import ApiClient
    from notifications.services.inbox import inbox_token_issue

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * streams + 1024)), hard))
    run = InboxRun(streams=streams, rate=rate, seconds=seconds)
    token = api_token()
    client = ApiClient.objects.get(name="bench-http")
    users = [f"inbox-{n}" for n in range(streams)]
    tokens = [inbox_token_issue(client=client, user_id=user, ttl_seconds=3600)[0] for user in users]
    with web_server(workers=1) as (url, server), workers(name="inbox-workers"):
        time.sleep(2)  # the worker process settles after its first requests
        run.rss_before_mb = _rss_mb(server.pid)
        host, port = url.removeprefix("http://").split(":")
        reader = StreamClient(host, int(port), tokens)
        reader.run()
        wait_for(lambda: reader.open + reader.failed >= streams, timeout=120, what=f"{streams} streams to open")
        log(f"inbox: {reader.open} streams open ({reader.failed} failed)")
        run.rss_open_mb = _rss_mb(server.pid)
        session, sent_at = requests.Session(), {}
        started = time.monotonic()
        for n in range(int(rate * seconds)):
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
            body = {"user_id": users[(n * 7919) % streams], "channel": "in_app", "subject": f"n{n}", "message": "bench"}
            before = time.time()
            answer = session.post(
                f"{url}/api/v1/notifications", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
            )
            if answer.status_code == 202:
                sent_at[answer.json()["id"]] = before
        run.sent = len(sent_at)
        wait_for(lambda: len(reader.arrivals) >= run.sent, timeout=60, what="every item.created event", interval=0.2)
        reader.close()
        run.received = sum(1 for pk in sent_at if pk in reader.arrivals)
        arrived = {pk: (at, *reader.arrivals[pk]) for pk, at in sent_at.items() if pk in reader.arrivals}
        run.latencies_ms = [(read - at) * 1000 for at, read, _ in arrived.values()]
        run.delivery_ms = [(created - at) * 1000 for at, _, created in arrived.values()]
        run.stream_ms = [(read - created) * 1000 for _, read, created in arrived.values()]
        run.counts_items = 100_000
        run.counts_p95_ms = _counts_p95(url, items=run.counts_items)
    return run


def front_comparison(*, duration: float, threads: int = 2, connections: int = 16) -> list[str]:
    """The site's front as deployed now (gunicorn with a uvicorn worker, platform/asgi.py: the WSGI
    site in a thread pool) against gunicorn's gthread worker serving the WSGI application, as
    before: /healthz and the accept, wrk, one worker process each."""
    from bench.accept_http import wrk

    lines = [
        "### The web front: uvicorn worker (platform/asgi.py) against gthread (platform/wsgi.py)",
        "",
        "| front | /healthz req/s | accept req/s | accept p50 / p99 ms | accept CPU ms/req |",
        "| --- | --- | --- | --- | --- |",
    ]
    for gthread in (True, False):
        with web_server(workers=1, gthread=gthread) as (url, server):
            load = {"server": server, "threads": threads, "connections": connections}
            tag = "front-gthread" if gthread else "front-asgi"
            wrk(url, duration=3, accept=True, prefix=f"{tag}-warm", **load)
            healthz = wrk(url, duration=duration, accept=False, prefix=f"{tag}-healthz", **load)
            accept = wrk(url, duration=duration, accept=True, prefix=f"{tag}-accept", **load)
        name = "gthread, platform.wsgi (before)" if gthread else "uvicorn worker, platform.asgi (now)"
        lines.append(
            f"| {name} | {healthz.rate:.0f} | {accept.rate:.0f} | {accept.p50_ms:.1f} / {accept.p99_ms:.1f} | "
            f"{accept.cpu_ms_per_request:.2f} |"
        )
        log(lines[-1])
    return lines
