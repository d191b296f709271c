"""End to end: accept -> delivered latency at a fixed request rate (half the sustainable accept rate
measured by bench/accept_http.py), with gunicorn and 2 worker processes (no-op provider) running.

The load is open-loop: request i is due at start + i / rate whatever the answers before it, and
its client latency is counted from when it was due, so a server falling behind shows as latency
(not as a lower rate, as with a closed loop like wrk). The delivery latency of each notification is
``delivered_at - created_at`` of its row (created at accept, delivered stamped after the provider
returned). The baseline is RabbitMQ's own: persistent messages published with a confirm each at
the same rate and consumed by 2 processes acking, publish to consume.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import raw_pika
from bench.accept_http import api_token, web_server
from bench.accept_sender import accepts_send
from bench.drain import consumer_count, notifications_reset, queue_purge
from bench.harness import percentile, wait_for, workers


@dataclass(frozen=True)
class Latencies:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    count: int

    @classmethod
    def of(cls, seconds: list[float]) -> Latencies:
        return cls(*(percentile(seconds, p) * 1000 for p in (0.50, 0.95, 0.99)), count=len(seconds))


@dataclass(frozen=True)
class EndToEnd:
    target_rate: float
    achieved_rate: float
    errors: int
    accept: Latencies  # client side, from when each request was due
    delivered: Latencies  # created_at -> delivered_at
    undelivered: int
    raw_pika: Latencies


def open_loop(url: str, *, rate: float, seconds: float, prefix: str, connections: int = 16) -> tuple[list[float], int, float]:
    """POST accepts at ``rate`` per second for ``seconds`` from ``connections`` keep-alive
    connections; returns each request's latency from when it was due, the error count, and the
    rate achieved (requests / time from the first due to the last answer)."""
    total = max(1, int(rate * seconds))
    sent = accepts_send(url, count=total, tokens=[api_token()], prefix=prefix, connections=connections, rate=rate)
    return sent.latencies, sent.errors, total / sent.seconds


def delivery_latencies(prefix: str) -> tuple[list[float], int]:
    """delivered_at - created_at (seconds) of every delivered notification whose key starts with
    ``prefix``, and how many of them are not delivered."""
    from django.db import connection

    from notifications.models import Notification

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXTRACT(EPOCH FROM delivered_at - created_at), delivered_at IS NULL FROM {Notification._meta.db_table} "
            "WHERE idempotency_key LIKE %s",
            [f"{prefix}-%"],
        )
        rows = cursor.fetchall()
    return [float(seconds) for seconds, missing in rows if not missing], sum(1 for _, missing in rows if missing)


def end_to_end(*, rate: float, seconds: float, warmup: float = 3.0) -> EndToEnd:
    raw = raw_pika.latencies(rate=rate, seconds=min(seconds, 10.0), consumers=2)
    notifications_reset()
    queue_purge()
    with workers(processes=2, threads=8, name="workers-e2e") as running, web_server(workers=1) as (url, _server):
        wait_for(lambda: consumer_count() >= 2, timeout=120, what="2 worker processes to attach", interval=0.2, watch=running)
        open_loop(url, rate=rate, seconds=warmup, prefix="e2e-warm")
        latencies, errors, achieved = open_loop(url, rate=rate, seconds=seconds, prefix="e2e-run")
        expected = len(latencies) - errors
        wait_for(
            lambda: len(delivery_latencies("e2e-run")[0]) >= expected, timeout=120, what="the end-to-end deliveries", interval=0.2
        )
        delivered, undelivered = delivery_latencies("e2e-run")
    return EndToEnd(
        target_rate=rate,
        achieved_rate=achieved,
        errors=errors,
        accept=Latencies.of(latencies),
        delivered=Latencies.of(delivered),
        undelivered=undelivered,
        raw_pika=Latencies.of(raw),
    )
