"""Benchmarks of the delivery pipeline on the real PostgreSQL, RabbitMQ and Redis (``make bench``).

(a) End-to-end deliveries per second (accept -> broker -> 2 worker processes -> no-op provider ->
    delivered), set against a raw pika publish + consume of as many persistent messages with 2
    consumer processes, in the same run, as a ratio.
(b) Rate-limit accuracy: a backlog of 12x the email limit drained by 2 worker processes; the most
    sends seen in any 1 s sliding window against the limit, and the average rate as % of it.

The bench makes a database, vhost and Redis key prefix of its own, and removes them afterwards.
Results go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as `python bench/run.py`: put the repo root first so `platform` is the project package.
sys.path.insert(0, str(ROOT))

RUN_ID = f"{int(time.time())}{os.getpid()}"
DATABASE = f"notifications_bench_{RUN_ID}"
VHOST = f"notifications-bench-{RUN_ID}"
PREFIX = f"nt-bench-{RUN_ID}"
BROKER_URL = f"amqp://guest:guest@127.0.0.1:5672/{VHOST}"
RAW_QUEUE = "bench.raw"
NOOP_PROVIDER = "bench.noop_provider.NoopProvider"

BENCH_ENV = {
    "DEBUG": "true",
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
    "BROKER_URL": BROKER_URL,
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "CACHE_KEY_PREFIX": PREFIX,
    "EMAIL_PROVIDER": NOOP_PROVIDER,
    "LOG_LEVEL": "WARNING",
    "LOG_FORMAT": "text",
}


def log(text: str) -> None:
    print(f"[bench] {text}", flush=True)


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


# --- Resources of this run ---------------------------------------------------------------------


@contextmanager
def bench_resources() -> Iterator[None]:
    run(str(ROOT / "scripts" / "services.sh"))
    run("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc", f'CREATE DATABASE "{DATABASE}"')
    run("rabbitmqctl", "-q", "add_vhost", VHOST)
    run("rabbitmqctl", "-q", "set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
    try:
        yield
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", VHOST], capture_output=True)
        keys = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "--scan", "--pattern", f"{PREFIX}:*"], capture_output=True, text=True
        ).stdout.split()
        if keys:
            subprocess.run(["redis-cli", "-h", "127.0.0.1", "del", *keys], capture_output=True)
        from django.db import connections

        connections.close_all()
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
                f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)',
            ],
            capture_output=True,
        )


def setup_django() -> None:
    os.environ.update(BENCH_ENV)
    os.environ["DJANGO_SETTINGS_MODULE"] = "platform.settings"
    run(sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v0", cwd=ROOT, env=dict(os.environ))
    import django

    django.setup()


class Workers:
    """``manage.py rundramatiq`` with 2 worker processes, in its own process group."""

    def __init__(self, *, rate_limits: str, processes: int = 2, threads: int = 8) -> None:
        env = dict(os.environ, NOTIFICATIONS_RATE_LIMITS=rate_limits)
        self.log = open(f"/tmp/bench-workers-{RUN_ID}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "rundramatiq", "--processes", str(processes), "--threads", str(threads)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


# --- Helpers over the platform -----------------------------------------------------------------


def accept_many(count: int, *, threads: int = 4, tag: str) -> None:
    """Accept ``count`` email notifications through the real service, from a few threads."""
    from notifications import services

    client = services.api_client_get_or_create(name="bench")

    def accept(index: int) -> None:
        payload = {"user_id": f"u{index}", "message": "bench", "to": f"u{index}@example.com"}
        services.notification_accept(
            client=client,
            request=services.NotificationRequest(**payload),
            idempotency_key=f"{tag}-{index}",
            fingerprint=services.request_fingerprint(payload),
        )

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(accept, range(count)))


def delivered_count() -> int:
    from notifications.models import Notification, Status

    return Notification.objects.filter(status=Status.DELIVERED).count()


def send_times() -> list[float]:
    from django_redis import get_redis_connection

    from bench.noop_provider import sends_key

    return sorted(float(value) for value in get_redis_connection("default").lrange(sends_key(), 0, -1))


def clear_send_times() -> None:
    from django_redis import get_redis_connection

    from bench.noop_provider import sends_key

    get_redis_connection("default").delete(sends_key())


# --- (a) throughput ------------------------------------------------------------------------------


def _raw_consumer(url: str, count_done: Any, total: int) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=16)

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        ch.basic_ack(delivery_tag=method.delivery_tag)
        with count_done.get_lock():
            count_done.value += 1
            finished = count_done.value >= total
        if finished:
            ch.stop_consuming()

    channel.basic_consume(queue=RAW_QUEUE, on_message_callback=on_message)
    while count_done.value < total:
        connection.process_data_events(time_limit=0.2)
    connection.close()


def raw_pika_rate(count: int) -> float:
    """Publish ``count`` persistent messages with publisher confirms and consume them with 2
    processes acking each; messages per second from the first publish to the last ack."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    channel = connection.channel()
    channel.queue_declare(queue=RAW_QUEUE, durable=True)
    channel.confirm_delivery()
    # Forked before any thread exists in this process, so the children start clean.
    fork = multiprocessing.get_context("fork")
    done = fork.Value("i", 0)
    consumers = [fork.Process(target=_raw_consumer, args=(BROKER_URL, done, count)) for _ in range(2)]
    for consumer in consumers:
        consumer.start()
    wait_for(
        lambda: channel.queue_declare(queue=RAW_QUEUE, passive=True).method.consumer_count >= 2,
        timeout=30,
        what="both raw consumers to attach",
    )
    body = b'{"notification_id": "00000000-0000-0000-0000-000000000000"}'
    started = time.monotonic()
    for _ in range(count):
        channel.basic_publish(exchange="", routing_key=RAW_QUEUE, body=body, properties=pika.BasicProperties(delivery_mode=2))
    wait_for(lambda: done.value >= count, timeout=300, what="raw consumers")
    elapsed = time.monotonic() - started
    for consumer in consumers:
        consumer.join(timeout=10)
    channel.queue_delete(queue=RAW_QUEUE)
    connection.close()
    return count / elapsed


def pipeline_rate(count: int) -> dict[str, float]:
    """End to end: notifications accepted (16 threads) while 2 workers deliver them, from the first
    accept to the last delivery. Then the worker side alone: the same number queued while no
    worker runs, drained by 2 workers, from the first send to the last delivery."""
    from notifications.models import Notification

    workers = Workers(rate_limits="email=1000000/s")
    try:
        accept_many(1, tag="warm-up")
        wait_for(lambda: delivered_count() >= 1, timeout=120, what="the workers to start")
        started = time.monotonic()
        accept_many(count, threads=16, tag="throughput")
        accepted = time.monotonic()
        wait_for(lambda: delivered_count() >= count + 1, timeout=600, what=f"{count} deliveries")
        finished = time.monotonic()
    finally:
        workers.stop()
    Notification.objects.all().delete()
    accept_many(count, threads=16, tag="drain")
    clear_send_times()
    workers = Workers(rate_limits="email=1000000/s")
    try:
        wait_for(lambda: delivered_count() >= count, timeout=600, what=f"{count} deliveries from a backlog")
        drained = time.time()
    finally:
        workers.stop()
    first_send = send_times()[0]
    return {
        "rate": count / (finished - started),
        "accept_rate": count / (accepted - started),
        "drain_rate": count / (drained - first_send),
    }


# --- (b) rate-limit accuracy ----------------------------------------------------------------------


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most timestamps in any half-open window [t, t + window), t sliding over every send."""
    return max(bisect.bisect_left(times, start + window) - index for index, start in enumerate(times))


def rate_limit_accuracy(limit: int, backlog: int) -> dict[str, float]:
    from notifications.models import Notification, Status

    Notification.objects.all().delete()
    accept_many(backlog, tag="backlog")  # no workers yet: the whole backlog waits in the queue
    clear_send_times()
    workers = Workers(rate_limits=f"email={limit}/s")
    try:
        wait_for(
            lambda: Notification.objects.filter(status=Status.DELIVERED).count() >= backlog,
            timeout=backlog / limit * 3 + 60,
            what=f"the backlog of {backlog}",
        )
    finally:
        workers.stop()
    times = send_times()
    span = times[-1] - times[0]
    return {
        "sends": len(times),
        "max_window": max_in_window(times),
        "average_rate": (len(times) - 1) / span,
        "span": span,
    }


# --- Report --------------------------------------------------------------------------------------


def write_results(
    command: str, messages: int, raw: float, pipeline: dict[str, float], limit: int, accuracy: dict[str, float]
) -> str:
    ratio = pipeline["rate"] / raw
    drain_ratio = pipeline["drain_rate"] / raw
    text = f"""# Benchmark results

- Command: `{command}`
- Date: {datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}
- Machine: {os.cpu_count()} CPUs (a shared, noisy VM: compare the ratios, not the absolute rates), PostgreSQL, RabbitMQ and Redis on localhost; 2 worker processes x 8 threads.

## (a) End-to-end throughput with a no-op provider

| | messages | per second |
|---|---:|---:|
| Raw pika: publish (persistent, confirms) + consume/ack by 2 processes | {messages} | {raw:.0f} |
| Pipeline: accept -> RabbitMQ -> 2 workers -> no-op provider -> delivered | {messages} | {pipeline["rate"]:.0f} |
| Workers only: a queued backlog drained by 2 workers -> no-op provider -> delivered | {messages} | {pipeline["drain_rate"]:.0f} |

End to end / raw pika: **{ratio:.2f}** ({ratio * 100:.1f}%). Workers only / raw pika: **{drain_ratio:.2f}**.
The accept side ran at {pipeline["accept_rate"]:.0f}/s from 16 threads: each accept commits twice to
PostgreSQL (the idempotency key on its own, then the notification with its key's response) and
publishes with a confirm; each delivery commits its claim and its outcome. The gap to raw pika is
those commits and the per-message work of dramatiq, not the broker.

## (b) Rate-limit accuracy

Limit email={limit}/s; a backlog of {accuracy["sends"]:.0f} notifications ({accuracy["sends"] / limit:.0f}x the limit) queued
before 2 worker processes start.

| | value | vs limit |
|---|---:|---:|
| Most sends in any 1 s sliding window | {accuracy["max_window"]:.0f} | {accuracy["max_window"] / limit * 100:.0f}% (allowed: <= 110%) |
| Average rate, first send to last | {accuracy["average_rate"]:.1f}/s | {accuracy["average_rate"] / limit * 100:.1f}% (required: >= 90%) |
"""
    (ROOT / "bench" / "RESULTS.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000, help="Messages for the throughput comparison.")
    parser.add_argument("--limit", type=int, default=50, help="Email sends per second for the accuracy run.")
    parser.add_argument("--backlog", type=int, default=600, help="Notifications queued for the accuracy run.")
    args = parser.parse_args()
    with bench_resources():
        setup_django()
        log(f"raw pika: {args.messages} persistent messages")
        raw = raw_pika_rate(args.messages)
        log(f"raw pika: {raw:.0f}/s; pipeline: {args.messages} notifications")
        pipeline = pipeline_rate(args.messages)
        log(f"pipeline: {pipeline['rate']:.0f}/s; rate limit: {args.backlog} at email={args.limit}/s")
        accuracy = rate_limit_accuracy(args.limit, args.backlog)
        command = " ".join(["make bench"] if len(sys.argv) == 1 else ["python bench/run.py", *sys.argv[1:]])
        print(write_results(command, args.messages, raw, pipeline, args.limit, accuracy))


if __name__ == "__main__":
    main()
