"""A broadcast's fan-out and delivery (issue #14): how long a worker takes to make one notification
per subscriber for 100,000 subscribers (goal: under 30 s), the peak memory (VmHWM) of the worker
process doing it at 10,000 and at 100,000 subscribers (it streams the subscribers in keyset pages,
so it should be flat), and the rate at which a broadcast's notifications are delivered set against
the drain of as many single notifications (bench/drain.py) with the same workers.

The fan-out is timed by the broadcast row itself: ``started_at`` (the worker moved it to
fanning_out) to ``finished_at`` (no subscriber left). Each size gets a fresh worker process that
consumes only the broadcast queue, so its peak RSS is that one fan-out's (plus Django's own).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.drain import Drain, consumer_count, delivered_count, noop_drain, notifications_reset
from bench.harness import BenchProcess, log, manage, platform_env, wait_for, workers

CLIENT = "bench-broadcast"


@dataclass
class FanOut:
    subscribers: int
    seconds: float  # started_at -> finished_at, as the worker wrote them
    peak_rss_mb: float  # VmHWM of the worker process that fanned out
    idle_rss_mb: float  # its VmRSS once attached, before the fan-out
    created: int


@dataclass
class BroadcastResults:
    fan_outs: list[FanOut] = field(default_factory=list)
    delivery: Drain | None = None  # the broadcast's notifications, delivered by 2 worker processes
    baseline: Drain | None = None  # as many single notifications drained by the same workers


def _children(pid: int) -> list[int]:
    """``pid`` and every process under it (the dramatiq worker processes rundramatiq forks)."""
    found, queue = [pid], [pid]
    while queue:
        parent = queue.pop()
        try:
            kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for kid in map(int, kids):
            found.append(kid)
            queue.append(kid)
    return found


def _status_kb(pid: int, name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_max_kb(process: BenchProcess, name: str) -> int:
    return max((_status_kb(pid, name) for pid in _children(process.pid)), default=0)


def _recipients(count: int) -> Any:
    """The bench client with ``count`` recipients u0.. (email addresses), made in bulk."""
    from django.db import connection

    from notifications import services
    from notifications.models import Recipient

    client = services.api_client_get_or_create(name=CLIENT)
    have = Recipient.objects.filter(client=client).count()
    for start in range(have, count, 10_000):
        Recipient.objects.bulk_create(
            Recipient(client=client, user_id=f"u{n}", email=f"u{n}@example.com") for n in range(start, min(count, start + 10_000))
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + connection.ops.quote_name(Recipient._meta.db_table))
    return client


def _topic(client: Any, key: str, subscribers: int) -> None:
    """Topic ``key`` with the first ``subscribers`` recipients, in one INSERT ... SELECT."""
    from django.db import connection

    from notifications import services
    from notifications.models import Recipient, TopicSubscription

    services.topic_upsert(client=client, key=key, name=key)
    topic_id = services.fanout.topics.topic_for_client(client=client, key=key).pk
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(TopicSubscription._meta.db_table)} (topic_id, recipient_id, created_at) "
            f"SELECT %s, id, now() FROM {quote(Recipient._meta.db_table)} WHERE client_id = %s ORDER BY id LIMIT %s "
            "ON CONFLICT DO NOTHING",
            [topic_id, client.pk, subscribers],
        )
        cursor.execute("ANALYZE " + quote(TopicSubscription._meta.db_table))


def _broadcast(client: Any, key: str, tag: str) -> str:
    from notifications import services

    payload = {"topic": key, "channel": "email", "subject": "Launch", "message": f"We launched, {tag}."}
    result = services.broadcast_create(
        client=client,
        request=services.BroadcastRequest(topic=key, channel="email", subject="Launch", message=f"We launched, {tag}."),
        idempotency_key=f"bench-{tag}",
        fingerprint=services.request_fingerprint({"broadcast": payload}),
    )
    return str(result.body["id"])


def _fanned_out(broadcast_id: str) -> Any:
    from notifications.models import Broadcast, BroadcastStatus

    broadcast = Broadcast.objects.get(pk=broadcast_id)
    return broadcast if broadcast.status == BroadcastStatus.SENT else None


def fan_out(client: Any, subscribers: int) -> FanOut:
    """One broadcast to ``subscribers``, fanned out by a fresh worker on the broadcast queue only."""
    from notifications.conf import BROADCAST_QUEUE

    key = f"bench-{subscribers}"
    _topic(client, key, subscribers)
    # rundramatiq with only the broadcast queue: the deliveries it makes wait in RabbitMQ.
    argv = ("rundramatiq", "--processes", "1", "--threads", "1", "--queues", BROADCAST_QUEUE)
    with manage(f"fan-out-{subscribers}", *argv, env=platform_env()) as worker:
        wait_for(lambda: len(_children(worker.pid)) > 1, timeout=60, what="the fan-out worker to fork", watch=worker)
        time.sleep(3)  # let the worker process finish importing before its idle RSS is read
        idle_kb = _tree_max_kb(worker, "VmRSS")
        broadcast_id = _broadcast(client, key, tag=str(subscribers))
        broadcast = wait_for(lambda: _fanned_out(broadcast_id), timeout=1200, what="the fan-out", interval=0.2, watch=worker)
        peak_kb = _tree_max_kb(worker, "VmHWM")
    return FanOut(
        subscribers=subscribers,
        seconds=(broadcast.finished_at - broadcast.started_at).total_seconds(),
        peak_rss_mb=peak_kb / 1024,
        idle_rss_mb=idle_kb / 1024,
        created=broadcast.total,
    )


def broadcast_delivery(client: Any, count: int, *, processes: int = 2) -> Drain:
    """A broadcast to ``count`` subscribers with workers (all queues) already running: from its
    first send to its last delivery, no-op provider, as bench/drain.py times a backlog."""
    from bench.noop_provider import send_count, send_times, sends_clear

    key = f"bench-deliver-{count}"
    _topic(client, key, count)
    notifications_reset()
    sends_clear()
    import dramatiq

    from notifications.conf import delivery_route

    # Declared before the workers attach, so counting its consumers never meets a missing queue.
    dramatiq.get_broker().declare_queue(delivery_route("high").queue_name, ensure=True)
    with workers(processes=processes, threads=8, name="broadcast-delivery") as running:
        wait_for(lambda: consumer_count() >= processes, timeout=120, what="the workers to attach", interval=0.2, watch=running)
        _broadcast(client, key, tag=f"deliver-{count}")
        wait_for(lambda: send_count() >= count, timeout=600, what=f"{count} sends", interval=0.05, watch=running)
        wait_for(lambda: delivered_count() >= count, timeout=60, what=f"{count} deliveries", interval=0.05, watch=running)
        finished = time.time()
    return Drain(count=count, processes=processes, seconds=finished - send_times()[0])


def broadcast_bench(*, sizes: list[int], deliveries: int) -> BroadcastResults:
    results = BroadcastResults()
    client = _recipients(max([*sizes, deliveries]))
    for size in sizes:
        log(f"broadcast: fan-out to {size:,} subscribers")
        run = fan_out(client, size)
        log(f"broadcast: {run.created:,} notifications in {run.seconds:.1f} s, peak RSS {run.peak_rss_mb:.0f} MB")
        results.fan_outs.append(run)
    log(f"broadcast: delivery of a broadcast to {deliveries:,}, rundramatiq --processes 2")
    results.delivery = broadcast_delivery(client, deliveries)
    log(f"broadcast: delivered {results.delivery.rate:.0f}/s; now {deliveries:,} single notifications drained")
    results.baseline = noop_drain(deliveries, processes=2, tag="broadcast-baseline")
    log(f"broadcast: drained {results.baseline.rate:.0f}/s")
    return results


def section(results: BroadcastResults) -> list[str]:
    lines = [
        "## Broadcasts (issue #14)",
        "",
        "| Subscribers | Notifications made | Fan-out seconds | Notifications/s | Worker idle RSS | Worker peak RSS (VmHWM) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for run in results.fan_outs:
        lines.append(
            f"| {run.subscribers:,} | {run.created:,} | {run.seconds:.1f} | {run.created / run.seconds:.0f} | "
            f"{run.idle_rss_mb:.0f} MB | {run.peak_rss_mb:.0f} MB |"
        )
    biggest = max(results.fan_outs, key=lambda run: run.subscribers, default=None)
    if biggest is not None and biggest.subscribers >= 100_000:
        lines += [
            "",
            f"Goal: {biggest.subscribers:,} notifications made in under 30 s: {'**yes**' if biggest.seconds < 30 else '**no**'}.",
        ]
    if results.delivery and results.baseline:
        ratio = results.delivery.rate / results.baseline.rate
        lines += [
            "",
            "| Delivery, no-op provider, rundramatiq --processes 2 | Count | Rate | Baseline: single notifications drained | Ratio |",
            "|---|---:|---:|---:|---:|",
            f"| A broadcast's notifications, fanned out while delivered | {results.delivery.count:,} | "
            f"{results.delivery.rate:.0f}/s | {results.baseline.rate:.0f}/s | {ratio:.2f} |",
        ]
    return lines
