"""The RabbitMQ consumer of domain events: connection, topology, ack/nack, reconnect, stop.

It knows no event type: each message goes to :func:`event_process`, which finds the handler for
its routing key. How a message ends (each counted in ``notifications_processed_total{status}``):

- ``success``: a new notification, made by the same service the API uses; ack.
- ``duplicate``: the event's key was already claimed; ack, nothing new.
- ``failed``: malformed (bad JSON, a missing or wrongly typed field, an address that can never be
  valid); ``basic_nack(requeue=False)``, which RabbitMQ dead-letters into the DLQ. Also where a
  message ends that failed transiently more than ``EVENTS_MAX_REDELIVERIES`` times.
- ``failed_transient``: PostgreSQL or Redis unavailable; wait (keeping the connection's
  heartbeats going), then ``basic_nack(requeue=True)``. Classic queues only say ``redelivered``,
  so the consumer counts its own requeues per event key (:class:`RedeliveryCounter`); quorum
  queues give ``x-delivery-count``, which is used when present.

The same connection consumes the DLQ into DeadLetter rows (see ``events/dead_letters.py``). No
single message can stop the consumer: an error recording one dead letter is logged, counted in
``notifications_dead_letter_ingest_errors_total`` and the message acked with what could be kept.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
from django.db import connection

from ..conf import broker_connection_parameters, get_config
from ..connections import database_connections_refresh
from ..event_bus import declare_topology
from ..metrics import record_dead_letter_ingest_error, record_event_processed
from ..models import DeadLetterReason
from .dead_letters import dead_letter_ingest, dead_letter_ingest_unreadable
from .processing import TRANSIENT_ERRORS, event_key_of, event_process
from .redeliveries import RedeliveryCounter, message_identity, rejection_notes

logger = logging.getLogger("notifications.events")


def reconnect_delays(base: float, cap: float) -> Iterator[float]:
    """5 s, 10 s, 20 s ... capped at ``cap``, each with ±20 % jitter so consumers do not stampede."""
    attempt = 0
    while True:
        delay = min(cap, base * (2**attempt))
        yield min(cap, delay * random.uniform(0.8, 1.2))
        attempt += 1


class EventConsumer:
    """Consumes the events queue and the DLQ on one blocking connection until :meth:`stop`.

    ``stop`` may be called from a signal handler or another thread: the message in hand is
    finished and acked, prefetched ones go back to the queue when the channel closes.
    """

    def __init__(self, *, ingest_dead_letters: bool = True, on_connected: Callable[[], None] | None = None):
        self.config = get_config().events
        self.ingest_dead_letters = ingest_dead_letters
        self.on_connected = on_connected
        self._stop = threading.Event()
        self._connection: pika.BlockingConnection | None = None
        self.redeliveries = RedeliveryCounter(ttl_seconds=self.config.dedup_ttl_seconds)
        self.rejections = rejection_notes()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        delays = reconnect_delays(self.config.reconnect_base_seconds, self.config.reconnect_cap_seconds)
        while not self.stopping:
            try:
                self._connection = pika.BlockingConnection(broker_connection_parameters())
            except pika.exceptions.AMQPError as exc:
                delay = next(delays)
                logger.warning("cannot connect to the broker (%s); retrying in %.1fs", exc or type(exc).__name__, delay)
                self._stop.wait(delay)
                continue
            try:
                self._consume(self._connection)
                # A good connection: the next outage starts the backoff from the beginning again.
            except pika.exceptions.AMQPError as exc:
                delays = reconnect_delays(self.config.reconnect_base_seconds, self.config.reconnect_cap_seconds)
                delay = next(delays)
                logger.warning("lost the broker connection (%s); reconnecting in %.1fs", exc or type(exc).__name__, delay)
                self._stop.wait(delay)
            except Exception:
                # A bug outside any one message's handling (each callback records its own
                # failures): the unacked message goes back with the channel; start over.
                delay = next(delays)
                logger.exception("the event consumer failed; reconnecting in %.1fs", delay)
                self._stop.wait(delay)
            finally:
                with contextlib.suppress(Exception):
                    if self._connection.is_open:
                        self._connection.close()
                self._connection = None
        logger.info("event consumer stopped")

    def _consume(self, conn: pika.BlockingConnection) -> None:
        channel = conn.channel()
        declare_topology(channel, self.config)
        channel.basic_qos(prefetch_count=self.config.prefetch)
        tags = [channel.basic_consume(self.config.queue, self._on_event)]
        if self.ingest_dead_letters:
            tags.append(channel.basic_consume(self.config.dlq, self._on_dead_letter))
        logger.info(
            "event consumer connected: consuming %s (%s) from %s%s",
            self.config.queue,
            self.config.routing_key,
            self.config.exchange,
            f" and {self.config.dlq}" if self.ingest_dead_letters else "",
        )
        if self.on_connected:
            self.on_connected()
        while not self.stopping:
            conn.process_data_events(time_limit=0.5)
        for tag in tags:
            channel.basic_cancel(tag)
        channel.close()

    def _wait(self, conn: Any, seconds: float) -> None:
        """Sleep while keeping heartbeats flowing; cut short by stop."""
        deadline = time.monotonic() + seconds
        while not self.stopping and (remaining := deadline - time.monotonic()) > 0:
            conn.sleep(min(0.2, remaining))

    def _hand_back_if_stopping(self, channel: Any, method: Any) -> bool:
        # pika dispatches every prefetched delivery it has buffered in one go; once stopping,
        # only the message already in hand is finished and the rest go straight back.
        if self.stopping:
            channel.basic_nack(method.delivery_tag, requeue=True)
        return self.stopping

    def _on_event(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        if self._hand_back_if_stopping(channel, method):
            return
        started = time.monotonic()
        database_connections_refresh()
        headers = dict(properties.headers or {})
        result = event_process(body=body, routing_key=method.routing_key, headers=headers)
        tag = method.delivery_tag
        # Logged after the span has ended, so its trace id is given here (the name JSON lines use).
        extra = {"event_key": result.event_key, "outcome": result.status}
        if result.trace_id:
            extra["otelTraceID"] = result.trace_id
        if result.notification_id:
            extra["notification_id"] = result.notification_id
        if result.status in ("success", "duplicate"):
            channel.basic_ack(tag)
            self.redeliveries.forget(result.event_key, redelivered=bool(method.redelivered))
            record_event_processed(status=result.status, seconds=time.monotonic() - started)
            logger.info("event %s: %s %s", result.event_key, result.status, result.notification_id, extra=extra)
            return
        identity = message_identity(body=body, routing_key=method.routing_key, message_id=properties.message_id)
        if result.status == "failed":
            # Noted before the nack: the DLQ consumer may have the message before this returns.
            self.rejections.note(identity, reason=DeadLetterReason.POISON_MESSAGE, error=result.reason)
            channel.basic_nack(tag, requeue=False)
            record_event_processed(status="failed", seconds=time.monotonic() - started)
            logger.warning("event rejected to the DLQ: %s", result.reason, extra=extra)
            return
        # failed_transient: the database (or Redis) is away. Drop the broken connection so the
        # next try opens a fresh one, wait, and put the message back.
        with contextlib.suppress(Exception):
            connection.close()
        key = result.event_key or event_key_of(body, method.routing_key)
        count = self.redeliveries.increment(key)
        delivery_count = headers.get("x-delivery-count")
        if isinstance(delivery_count, int):
            count = max(count, delivery_count + 1)
        if count > self.config.max_redeliveries:
            self.redeliveries.forget(key)
            self.rejections.note(
                identity,
                reason=DeadLetterReason.REDELIVERY_LIMIT,
                error=f"failed transiently {count} times (redelivery limit); last: {result.reason}",
            )
            channel.basic_nack(tag, requeue=False)
            record_event_processed(status="failed_transient", seconds=time.monotonic() - started)
            logger.error("event %s failed transiently %d times (%s); sent to the DLQ", key, count, result.reason, extra=extra)
            return
        delay = min(self.config.transient_retry_seconds * count, 30.0)
        logger.warning("event %s: transient failure %d (%s); requeued in %.1fs", key, count, result.reason, delay, extra=extra)
        self._wait(channel.connection, delay)
        channel.basic_nack(tag, requeue=True)
        record_event_processed(status="failed_transient", seconds=time.monotonic() - started)

    def _on_dead_letter(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        if self._hand_back_if_stopping(channel, method):
            return
        database_connections_refresh()
        try:
            dead_letter = dead_letter_ingest(
                body=body, routing_key=method.routing_key, headers=properties.headers, message_id=properties.message_id
            )
        except TRANSIENT_ERRORS as exc:
            with contextlib.suppress(Exception):
                connection.close()
            logger.warning("cannot record a dead-lettered event yet (%s); will try again", exc)
            self._wait(channel.connection, self.config.transient_retry_seconds)
            channel.basic_nack(method.delivery_tag, requeue=True)
            return
        except Exception as exc:
            # The same message would fail the same way on every redelivery, and come back first
            # after every restart: keep what can be kept and ack it, never loop on it.
            record_dead_letter_ingest_error()
            logger.exception("could not record a dead-lettered event as it came; recording its body only")
            dead_letter = self._ingest_unreadable(body=body, routing_key=method.routing_key, error=exc)
            if dead_letter is None:
                channel.basic_ack(method.delivery_tag)
                return
        channel.basic_ack(method.delivery_tag)
        logger.warning(
            "dead-lettered event recorded as dead letter %s (%s): %s",
            dead_letter.pk,
            dead_letter.reason,
            dead_letter.last_error,
            extra={"dead_letter_id": dead_letter.pk},
        )

    @staticmethod
    def _ingest_unreadable(*, body: bytes, routing_key: Any, error: BaseException) -> Any:
        try:
            return dead_letter_ingest_unreadable(body=body, routing_key=routing_key, error=error)
        except Exception:
            logger.exception("could not record a dead-lettered event at all; it is dropped (its body was %d bytes)", len(body))
            return None
