"""Drain of a queued backlog by ``rundramatiq`` workers (its baseline, raw pika with the same number
of messages, is bench/raw_pika.py).

The backlog is accepted through the batch service while no worker runs, so its rows are exactly
what the API writes; its messages are then purged and published again, all in one AMQP
transaction, only once every worker process has attached to the queue. So the workers' start-up
(imports, Django set-up) is outside what is timed and counted, and the backlog is all there at
once, as it is for post_office's ``send_queued_mail`` (bench/post_office_drain.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.cpu import CpuMeter
from bench.harness import BenchProcess, wait_for, workers

BATCH = 100


def api_client() -> Any:
    from notifications import services

    return services.api_client_get_or_create(name="bench")


def backlog_accept(count: int, *, tag: str) -> list[str]:
    """Accept ``count`` email notifications through the batch service, 100 a call (run it with no
    worker attached); returns their ids."""
    from notifications import services

    client = api_client()
    ids: list[str] = []
    for start in range(0, count, BATCH):
        items = []
        for index in range(start, min(count, start + BATCH)):
            payload = {
                "user_id": f"u{index}",
                "subject": f"Bench {index}",
                "message": f"Hello u{index}, bench.",
                "to": f"u{index}@example.com",
            }
            items.append(
                services.BatchItem(
                    request=services.NotificationRequest(**payload),
                    idempotency_key=f"{tag}-{index}",
                    fingerprint=services.request_fingerprint(payload),
                )
            )
        for result in services.notification_accept_batch(client=client, items=items):
            if not isinstance(result, services.AcceptResult):
                raise SystemExit(f"bench: the backlog's accept was refused: {result!r}")
            ids.append(result.notification_id)
    return ids


def _queue() -> str:
    from notifications.conf import delivery_route

    return delivery_route("high").queue_name


def broker() -> Any:
    """Dramatiq's broker, its connection in this thread made again when RabbitMQ dropped it: pika's
    blocking connection answers no heartbeat between calls, so one idle past a minute is closed."""
    import dramatiq
    import pika.exceptions

    current = dramatiq.get_broker()
    try:
        if current.connection.is_open:
            current.connection.process_data_events(time_limit=0)
            return current
    except pika.exceptions.AMQPError:
        pass
    del current.connection
    return current


def queue_purge() -> None:
    def emptied() -> bool:
        # Flushed again until it stays empty: a web server may still publish what it was answering.
        broker().flush(_queue())
        return bool(broker().get_queue_message_counts(_queue())[0] == 0)

    wait_for(emptied, timeout=10, what="the delivery queue to empty", interval=0.2)


def consumer_count() -> int:
    return int(broker().channel.queue_declare(queue=_queue(), durable=True, passive=True).method.consumer_count)


def backlog_publish(ids: list[str]) -> None:
    """The backlog's delivery messages as the batch service makes them (DELIVERY_BATCH_SIZE ids a
    message), all published in one AMQP transaction (broker_batch)."""
    from notifications.broker_batch import messages_publish
    from notifications.conf import get_config
    from notifications.services.records.outbox import delivery_message

    size = get_config().delivery_batch_size
    messages = [
        delivery_message(notification_ids=ids[start : start + size], priority="high") for start in range(0, len(ids), size)
    ]
    messages_publish(broker(), messages)


def notifications_reset() -> None:
    """Empty the notifications and idempotency keys (and what references them) of the bench's database."""
    from django.db import connection

    from notifications.models import IdempotencyKey, Notification

    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in (Notification, IdempotencyKey))
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def delivered_count() -> int:
    from notifications.models import Notification, Status

    return Notification.objects.filter(status=Status.DELIVERED).count()


@dataclass
class Drain:
    count: int
    processes: int
    seconds: float  # first send to last delivered
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per tree, from the publish to the end

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    def cpu_ms_per_message(self, name: str) -> float:
        return self.cpu.get(name, float("nan")) * 1000 / self.count


def backlog_drain(
    ids: list[str],
    *,
    processes: int,
    first_send: Callable[[], float | None],
    sent: Callable[[], int],
    threads: int = 8,
    on_start: Callable[[BenchProcess], None] | None = None,
    publish: Callable[[], None] | None = None,
    **env: str,
) -> Drain:
    """Start workers on an empty queue, publish the backlog ``ids`` once every process has
    attached (backlog_publish, or ``publish``), and time it from the first send (``first_send``: a
    wall-clock time) to the last notification delivered; CPU is counted from the publish to the end."""
    queue_purge()
    with workers(processes=processes, threads=threads, **env) as running:
        wait_for(
            lambda: consumer_count() >= processes,
            timeout=120,
            what=f"{processes} worker processes to attach",
            interval=0.2,
            watch=running,
        )
        meter = CpuMeter(workers=running.pid)
        meter.start()
        if publish is None:
            backlog_publish(ids)
        else:
            publish()
        if on_start is not None:
            on_start(running)
        wait_for(lambda: sent() >= len(ids), timeout=600, what=f"{len(ids)} sends", interval=0.02, watch=running)
        wait_for(lambda: delivered_count() >= len(ids), timeout=60, what=f"{len(ids)} deliveries", interval=0.02, watch=running)
        finished = time.time()
        cpu = meter.read()
    started = first_send()
    if started is None:
        raise SystemExit("bench: no send was recorded")
    return Drain(count=len(ids), processes=processes, seconds=finished - started, cpu=cpu)


def noop_drain(count: int, *, processes: int, tag: str, on_start: Callable[[BenchProcess], None] | None = None) -> Drain:
    """``count`` notifications through the no-op provider (bench/noop_provider.py)."""
    from bench.noop_provider import send_count, send_times, sends_clear

    notifications_reset()
    ids = backlog_accept(count, tag=tag)
    sends_clear()

    def first() -> float | None:
        times = send_times()
        return times[0] if times else None

    return backlog_drain(ids, processes=processes, first_send=first, sent=send_count, on_start=on_start)
