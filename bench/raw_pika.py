"""RabbitMQ's own figures, the baselines of the drain and of the end-to-end latency: persistent
messages on a durable queue of the bench's vhost, published with pika alone, a publisher confirm
each, and consumed by N processes acking each (prefetch 16)."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import time
from collections.abc import Iterator
from typing import Any

from bench.harness import BROKER_URL, wait_for

QUEUE = "bench.raw"


def _consumer(url: str, done: Any, stop: Any, results: Any) -> None:
    """Ack every message, count it in ``done`` and keep its age (the body is its publish time)."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=16)
    ages: list[float] = []

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        ages.append(time.time() - float(body))
        ch.basic_ack(delivery_tag=method.delivery_tag)
        with done.get_lock():
            done.value += 1

    channel.basic_consume(queue=QUEUE, on_message_callback=on_message)
    while not stop.is_set():
        connection.process_data_events(time_limit=0.1)
    connection.close()
    results.put(ages)


@contextlib.contextmanager
def _consumers(count: int) -> Iterator[tuple[Any, Any, list[float]]]:
    """A confirming channel to publish on, the shared count of messages consumed, and the list the
    messages' ages land in once the consumers have stopped (when the ``with`` ends)."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
    channel = connection.channel()
    channel.queue_declare(queue=QUEUE, durable=True)
    channel.confirm_delivery()
    # Forked before the bench starts any thread of its own, so the children start clean.
    fork = multiprocessing.get_context("fork")
    done, stop, results = fork.Value("i", 0), fork.Event(), fork.Queue()
    processes = [fork.Process(target=_consumer, args=(BROKER_URL, done, stop, results)) for _ in range(count)]
    for process in processes:
        process.start()
    ages: list[float] = []
    try:
        wait_for(
            lambda: channel.queue_declare(queue=QUEUE, passive=True).method.consumer_count >= count,
            timeout=30,
            what="the raw pika consumers to attach",
        )
        yield channel, done, ages
    finally:
        stop.set()
        for _ in processes:
            with contextlib.suppress(queue.Empty):  # a consumer that died has nothing to give
                ages.extend(results.get(timeout=30))
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        channel.queue_delete(queue=QUEUE)
        connection.close()


def _publish(channel: Any) -> None:
    import pika

    channel.basic_publish(
        exchange="", routing_key=QUEUE, body=f"{time.time():.6f}".encode(), properties=pika.BasicProperties(delivery_mode=2)
    )


def throughput(count: int, *, consumers: int) -> float:
    """Messages per second from the first publish to the last ack, ``count`` published back to back."""
    with _consumers(consumers) as (channel, done, _):
        started = time.monotonic()
        for _ in range(count):
            _publish(channel)
        wait_for(lambda: done.value >= count, timeout=300, what="the raw pika consumers")
        elapsed = time.monotonic() - started
    return count / elapsed


def latencies(*, rate: float, seconds: float, consumers: int) -> list[float]:
    """Publish-to-consume seconds of each message, published at ``rate`` per second (open loop)."""
    total = max(1, int(rate * seconds))
    with _consumers(consumers) as (channel, done, ages):
        started = time.monotonic()
        for index in range(total):
            delay = started + index / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            _publish(channel)
        wait_for(lambda: done.value >= total, timeout=60, what="the raw pika consumers")
    return ages
