"""The RabbitMQ consumer of domain events: topology, decode, dedup, ack/nack, dead letters.

How a message ends (each counted in ``notifications_processed_total{status}``):

- ``success``: a new notification, made by :func:`services.notification_accept` exactly as the API
  makes one; ack.
- ``duplicate``: the event's key was already claimed in :class:`ProcessedEvent`; ack, nothing new.
  The claim is a unique insert in the same transaction as the notification, so a redelivery, a
  second consumer or a crash between commit and ack can never make a second notification.
- ``failed``: malformed (bad JSON, a missing or wrongly typed field, an address that can never be
  valid); ``basic_nack(requeue=False)``, which RabbitMQ dead-letters through ``orders.dlq`` into
  ``notifications.dlq``. Also where a message ends that failed transiently more than
  ``EVENTS_MAX_REDELIVERIES`` times.
- ``failed_transient``: PostgreSQL or Redis unavailable; wait (keeping the connection's
  heartbeats going), then ``basic_nack(requeue=True)``. Classic queues only say ``redelivered``,
  so the consumer counts its own requeues per event key (:class:`RedeliveryCounter`): in the
  cache (Redis ``INCR``, expiring with the dedup TTL), so the bound holds across consumer restarts
  and between consumers, and in memory, which is what still counts while Redis is the thing that
  is down. Quorum queues give ``x-delivery-count``, which is used when present.

Dead letters become :class:`DeadLetter` rows (``source=event``) by *consuming*
``notifications.dlq``, not by writing a row at nack time: the nack then never depends on the
database (which is down in exactly the redelivery-limit case), RabbitMQ's own dead-lettering
(a quorum queue's delivery limit, another consumer's reject) is recorded too, and a DLQ message is
acked only after its row is committed, so nothing is lost while PostgreSQL is away. The consumer
that nacks a message knows why, and notes the reason and error at nack time (:class:`RejectionNotes`:
in memory for the DLQ consumer of the same process, and in the cache for another process or after a
restart); the DLQ consumer takes the row's reason from that note. Without one it falls back on
``x-death`` and the body: RabbitMQ's own ``delivery_limit`` is the redelivery limit; a body that
does not validate is a poison message with the validation error; a valid body rejected for a reason
nobody noted is a poison message with an error that says only that (never a guessed redelivery
limit). A crash between that commit and the ack can record one message twice.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.template.loader import render_to_string
from django.utils import timezone
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import services
from .addresses import validate_address
from .conf import CHANNELS, EventsConfig, get_config
from .errors import NotificationError
from .metrics import record_event_processed
from .models import DeadLetter, DeadLetterReason, DeadLetterSource, ProcessedEvent, Resolution

try:  # Redis errors are transient too when the cache is Redis.
    from redis.exceptions import RedisError as _RedisError
except ImportError:  # pragma: no cover
    _RedisError = OSError  # type: ignore[assignment,misc]

logger = logging.getLogger("notifications.events")
tracer = trace.get_tracer("notifications.events")
_w3c = TraceContextTextMapPropagator()

# The database or Redis being away; anything else the database says is an answer, not an outage.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, _RedisError)


class MalformedEvent(Exception):
    """The message can never be processed as it is; the text says why."""


@dataclass(frozen=True)
class OrderCreated:
    order_id: int | str
    project_id: int | str
    description: str
    amount: float
    user_id: str
    email: str = ""
    channel: str = "email"

    @property
    def key(self) -> str:
        return f"order.created:{self.order_id}"


@dataclass(frozen=True)
class ProcessResult:
    status: str  # success | duplicate | failed | failed_transient
    event_key: str = ""
    notification_id: str = ""
    reason: str = ""
    trace_id: str = ""  # of the notification.process span, for the log line written after it


# --- Topology ------------------------------------------------------------------------------------


def connection_parameters() -> pika.URLParameters:
    parameters = pika.URLParameters(settings.BROKER_URL)
    parameters.heartbeat = 30
    parameters.blocked_connection_timeout = 30
    parameters.connection_attempts = 1
    return parameters


def declare_topology(channel: Any, config: EventsConfig | None = None) -> None:
    """Declare exchanges, queues and bindings; idempotent, so every consumer and publisher does it."""
    config = config or get_config().events
    channel.exchange_declare(exchange=config.exchange, exchange_type="topic", durable=True)
    channel.exchange_declare(exchange=config.dlx, exchange_type="fanout", durable=True)
    arguments: dict[str, Any] = {"x-dead-letter-exchange": config.dlx}
    dlq_arguments: dict[str, Any] = {}
    if config.quorum_queues:
        # RabbitMQ dead-letters by itself past the limit; our own count usually gets there first.
        arguments.update({"x-queue-type": "quorum", "x-delivery-limit": config.max_redeliveries + 1})
        dlq_arguments["x-queue-type"] = "quorum"
    channel.queue_declare(queue=config.queue, durable=True, arguments=arguments)
    channel.queue_bind(queue=config.queue, exchange=config.exchange, routing_key=config.routing_key)
    channel.queue_declare(queue=config.dlq, durable=True, arguments=dlq_arguments)
    channel.queue_bind(queue=config.dlq, exchange=config.dlx)


def event_publish(
    *,
    body: bytes,
    routing_key: str | None = None,
    headers: dict[str, Any] | None = None,
    message_id: str | None = None,
) -> None:
    """Publish one persistent event to the events exchange with publisher confirms."""
    config = get_config().events
    with contextlib.closing(pika.BlockingConnection(connection_parameters())) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        declare_topology(channel, config)
        channel.basic_publish(
            exchange=config.exchange,
            routing_key=routing_key or config.routing_key,
            body=body,
            properties=pika.BasicProperties(
                delivery_mode=pika.DeliveryMode.Persistent,
                content_type="application/json",
                message_id=message_id,
                headers=headers or None,
            ),
            mandatory=True,
        )


# --- Decoding ------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:  # an integer too big for a float overflows instead of being "not finite"
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _is_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and bool(value.strip()))


def decode_order_created(body: bytes) -> OrderCreated:
    """Parse and validate an ``order.created`` body; MalformedEvent says what is wrong."""
    try:
        # Strictly UTF-8 (RFC 8259): json.loads on bytes would also guess UTF-16 and UTF-32.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedEvent(f"body is not UTF-8: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedEvent(f"body is not JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:
        # Nesting too deep (or an integer literal too long): the same every time, so not transient.
        raise MalformedEvent(f"body is not usable JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise MalformedEvent("body is not a JSON object")
    problems = []
    for name in ("order_id", "project_id"):
        if name not in data:
            problems.append(f"{name} is missing")
        elif not _is_id(data[name]):
            problems.append(f"{name} must be an integer or a non-empty string")
    for name in ("description", "user_id"):
        if name not in data:
            problems.append(f"{name} is missing")
        elif not isinstance(data[name], str) or (name == "user_id" and not data[name].strip()):
            problems.append(f"{name} must be a {'non-empty ' if name == 'user_id' else ''}string")
    if "amount" not in data:
        problems.append("amount is missing")
    elif not _is_number(data["amount"]):
        problems.append("amount must be a number")
    email = data.get("email") or ""
    channel = data.get("channel") or "email"
    if not isinstance(email, str):
        problems.append("email must be a string")
    if not isinstance(channel, str) or channel not in CHANNELS:
        problems.append(f"channel must be one of {', '.join(CHANNELS)}")
    elif email and channel != "email":
        problems.append("email is given but channel is not email")
    elif isinstance(email, str) and email:
        try:
            validate_address("email", email, field="email")
        except NotificationError as exc:
            problems.append(exc.message)
    if problems:
        raise MalformedEvent("; ".join(problems))
    return OrderCreated(
        order_id=data["order_id"],
        project_id=data["project_id"],
        description=data["description"],
        amount=float(data["amount"]),
        user_id=data["user_id"].strip(),
        email=email.strip(),
        channel=channel,
    )


def render_order_created(event: OrderCreated) -> str:
    amount = decimal.Decimal(str(event.amount)).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
    return render_to_string(
        "notifications/order_created.txt",
        {"order_id": event.order_id, "project_id": event.project_id, "description": event.description, "amount": amount},
    ).strip()


def traceparent_link(headers: dict[str, Any] | None) -> Link | None:
    """A span link to the producer's span from W3C ``traceparent``/``tracestate`` (bytes or str)."""
    carrier: dict[str, str] = {}
    for name in ("traceparent", "tracestate"):
        value = (headers or {}).get(name)
        if isinstance(value, bytes):
            value = value.decode("ascii", errors="replace")
        if isinstance(value, str) and value:
            carrier[name] = value
    if "traceparent" not in carrier:
        return None
    span_context = trace.get_current_span(_w3c.extract(carrier)).get_span_context()
    return Link(span_context) if span_context.is_valid else None


# --- Processing ----------------------------------------------------------------------------------


def event_process(*, body: bytes, routing_key: str, headers: dict[str, Any] | None = None) -> ProcessResult:
    """Turn one event into (at most) one notification; never raises for a bad or failed event.

    Runs in a ``notification.process`` CONSUMER span of its own: the producer's span is a *link*,
    not a parent, as a queue decouples the two (a batch or a redelivery hours later).
    """
    link = traceparent_link(headers)
    with tracer.start_as_current_span(
        "notification.process",
        context=otel_context.Context(),
        kind=SpanKind.CONSUMER,
        links=[link] if link else None,
        attributes={"messaging.system": "rabbitmq", "messaging.rabbitmq.destination.routing_key": routing_key},
    ) as span:
        try:
            result = _process(body=body, routing_key=routing_key)
        except MalformedEvent as exc:
            result = ProcessResult("failed", reason=str(exc))
        except TRANSIENT_ERRORS as exc:
            result = ProcessResult("failed_transient", reason=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            # A bug rather than the event's fault: retried like an outage, so a fix deployed
            # before the redelivery limit still processes it; past the limit it is dead-lettered.
            logger.exception("event processing raised unexpectedly")
            result = ProcessResult("failed_transient", reason=f"{type(exc).__name__}: {exc}")
        span.set_attribute("notification.outcome", result.status)
        if result.event_key:
            span.set_attribute("notification.event_key", result.event_key)
        if result.notification_id:
            span.set_attribute("notification.id", result.notification_id)
    span_context = span.get_span_context()
    return dataclasses.replace(result, trace_id=format(span_context.trace_id, "032x") if span_context.is_valid else "")


def _process(*, body: bytes, routing_key: str) -> ProcessResult:
    config = get_config()
    event = decode_order_created(body)
    now = timezone.now()
    message = render_order_created(event)
    request = services.NotificationRequest(
        user_id=event.user_id,
        message=message,
        channel=event.channel,
        subject=f"Order #{event.order_id} created",
        to=event.email,
        metadata={"order_id": event.order_id, "project_id": event.project_id, "event": routing_key},
    )
    try:
        with transaction.atomic():
            claim = _event_claim(event.key, routing_key=routing_key, now=now, ttl_seconds=config.events.dedup_ttl_seconds)
            if claim is None:
                return ProcessResult("duplicate", event_key=event.key)
            client = services.api_client_get_or_create(name=config.events_api_client)
            accepted = services.notification_accept(
                client=client,
                request=request,
                idempotency_key=event.key,
                fingerprint=services.request_fingerprint({"event": event.key}),
            )
            ProcessedEvent.objects.filter(pk=claim.pk).update(notification_id=accepted.notification_id)
    except NotificationError as exc:
        # e.g. no stored address for the user: the same event will fail the same way every time.
        raise MalformedEvent(f"{exc.code}: {exc.message}") from None
    return ProcessResult("success", event_key=event.key, notification_id=accepted.notification_id)


def _event_claim(key: str, *, routing_key: str, now: dt.datetime, ttl_seconds: int) -> ProcessedEvent | None:
    """Claim the event by a unique insert; None when it is claimed already. A claim past its expiry
    is replaced here, on the conflict, so the usual case costs one INSERT (purge_notifications
    removes the expired ones nobody sends again)."""
    for _ in range(2):
        try:
            with transaction.atomic():
                return ProcessedEvent.objects.create(
                    event_key=key, routing_key=routing_key, created_at=now, expires_at=now + dt.timedelta(seconds=ttl_seconds)
                )
        except IntegrityError:
            if not ProcessedEvent.objects.filter(event_key=key, expires_at__lte=now).delete()[0]:
                return None
    return None


def _event_key_of(body: bytes) -> str:
    try:
        return decode_order_created(body).key
    except MalformedEvent:
        return "sha256:" + hashlib.sha256(body).hexdigest()


class RedeliveryCounter:
    """Transient failures per event key, in the cache and in memory (the larger count wins)."""

    def __init__(self, *, ttl_seconds: int) -> None:
        self.ttl_seconds = ttl_seconds
        self._local: dict[str, int] = {}

    @staticmethod
    def _cache_key(event_key: str) -> str:
        # Hashed: event keys come from message bodies, cache keys must be short and plain.
        return "events:transient:" + hashlib.sha256(event_key.encode()).hexdigest()

    def increment(self, event_key: str) -> int:
        count = self._local.get(event_key, 0) + 1
        cache_key = self._cache_key(event_key)
        try:
            cache.add(cache_key, 0, timeout=self.ttl_seconds)
            count = max(count, int(cache.incr(cache_key)))
        except Exception as exc:  # Redis down (or the key expired between add and incr)
            logger.warning("cannot count redeliveries in the cache (%s); counting in memory", type(exc).__name__)
        self._local[event_key] = count
        return count

    def forget(self, event_key: str, *, redelivered: bool = True) -> None:
        counted = self._local.pop(event_key, None) is not None
        # A first delivery counted nowhere; skipping it spares Redis a DELETE per event.
        if counted or redelivered:
            with contextlib.suppress(Exception):
                cache.delete(self._cache_key(event_key))


def message_identity(*, body: bytes, routing_key: str, message_id: str | None = None) -> str:
    """What names one message both when it is nacked and when it comes back off the DLQ.

    Dead-lettering keeps the body, the ``message_id`` and (in ``x-death``) the routing key; the
    message id is hashed in rather than used alone, so a publisher reusing ids cannot mix up two
    messages, and identical bodies published with different ids stay apart.
    """
    digest = hashlib.sha256()
    for part in ((message_id or "").encode(), routing_key.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class RejectionNotes:
    """Why the consumer nacked a message to the DLQ, kept until the DLQ consumer records it.

    In memory (bounded, oldest dropped first) for the DLQ consumer of the same process, and in the
    cache with a TTL, best effort, for one in another process or after a restart. A note is
    overwritten by the next rejection of the same message rather than taken on read, so identical
    messages rejected alike are all recorded right; an out-of-date note can only be read for a
    message RabbitMQ dead-lettered itself, and ``x-death`` says so then.
    """

    max_local = 10_000

    def __init__(self, *, ttl_seconds: int) -> None:
        self.ttl_seconds = ttl_seconds
        self._local: collections.OrderedDict[str, tuple[str, str]] = collections.OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _cache_key(identity: str) -> str:
        return "events:rejected:" + identity

    def note(self, identity: str, *, reason: str, error: str) -> None:
        error = error[:4000]
        with self._lock:
            self._local.pop(identity, None)
            self._local[identity] = (str(reason), error)
            while len(self._local) > self.max_local:
                self._local.popitem(last=False)
        try:
            cache.set(self._cache_key(identity), [str(reason), error], timeout=self.ttl_seconds)
        except Exception as exc:  # Redis down: the in-memory note still serves this process
            logger.warning("cannot note a rejection in the cache (%s); noted in memory only", type(exc).__name__)

    def get(self, identity: str) -> tuple[str, str] | None:
        with self._lock:
            found = self._local.get(identity)
        if found is not None:
            return found
        try:
            cached = cache.get(self._cache_key(identity))
        except Exception as exc:
            logger.warning("cannot read rejection notes from the cache (%s)", type(exc).__name__)
            return None
        if isinstance(cached, list | tuple) and len(cached) == 2 and cached[0] in DeadLetterReason.values:
            return str(cached[0]), str(cached[1])
        return None


_rejection_notes: RejectionNotes | None = None


def rejection_notes() -> RejectionNotes:
    """The process's notes, shared by its event consumer and the DLQ consumer (and direct callers)."""
    global _rejection_notes
    if _rejection_notes is None:
        _rejection_notes = RejectionNotes(ttl_seconds=get_config().events.dedup_ttl_seconds)
    return _rejection_notes


# --- Dead letters --------------------------------------------------------------------------------


def _text_safe(text: str) -> str:
    # PostgreSQL text and jsonb cannot hold NUL, which a UTF-16 body is full of.
    return text.replace("\x00", "\ufffd")


def json_safe(value: Any) -> Any:
    """AMQP header values (bytes, timestamps, decimals, nested tables) as JSON."""
    if isinstance(value, dict):
        return {_text_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return _text_safe(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _dead_letter_reason(*, body: bytes, death: dict[str, Any], noted: tuple[str, str] | None) -> tuple[str, str]:
    death_reason = death.get("reason")
    if isinstance(death_reason, bytes):
        death_reason = death_reason.decode(errors="replace")
    if death_reason == "delivery_limit":  # RabbitMQ's own count (quorum queues) says so
        return DeadLetterReason.REDELIVERY_LIMIT, (noted[1] if noted else "") or "redelivered too many times (delivery limit)"
    if noted is not None and death_reason in (None, "rejected"):
        return noted
    try:
        decode_order_created(body)
    except MalformedEvent as exc:
        return DeadLetterReason.POISON_MESSAGE, str(exc)
    if death_reason in (None, "rejected"):
        # Valid, yet rejected, and the why was not noted (say the cache was down across a
        # restart): the consumer's log has it. Guessing the redelivery limit would mislead.
        return DeadLetterReason.POISON_MESSAGE, "rejected by the consumer; see its log"
    return DeadLetterReason.POISON_MESSAGE, f"dead-lettered by RabbitMQ ({death_reason}) before it was processed"


def dead_letter_ingest(
    *, body: bytes, routing_key: str, headers: dict[str, Any] | None, message_id: str | None = None
) -> DeadLetter:
    """Record a message found in the DLQ as a DeadLetter row (what the admin's DLQ shows).

    The reason and error are the ones the rejecting consumer noted (:class:`RejectionNotes`) when
    there is a note; see the module docstring for the fallback.
    """
    headers = headers or {}
    deaths = headers.get("x-death") or []
    death = deaths[0] if deaths and isinstance(deaths[0], dict) else {}
    original_keys = death.get("routing-keys") or []
    original_key = original_keys[0] if original_keys else routing_key
    if isinstance(original_key, bytes):
        original_key = original_key.decode(errors="replace")
    identity = message_identity(body=body, routing_key=str(original_key), message_id=message_id)
    reason, error = _dead_letter_reason(body=body, death=death, noted=rejection_notes().get(identity))
    return DeadLetter.objects.create(
        source=DeadLetterSource.EVENT,
        reason=reason,
        last_error=_text_safe(error[:4000]),
        attempts=int(headers.get("x-delivery-count") or death.get("count") or 1),
        raw_body=_text_safe(body.decode("utf-8", errors="replace")),
        routing_key=str(original_key)[:255],
        headers=json_safe(headers),
    )


def dead_letter_republish(*, dead_letter: DeadLetter, by: Any) -> services.RedriveResult:
    """Publish an event dead letter's original body again (the admin's Retry for source=event).

    The resolution is claimed first and given back if the publish fails, so two clicks publish once.
    """
    now = timezone.now()
    claimed = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
        resolution=Resolution.RETRIED, resolved_by=by, resolved_at=now
    )
    if not claimed:
        dead_letter.refresh_from_db()
        return services.RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
    headers = {k: v for k, v in (dead_letter.headers or {}).items() if not str(k).startswith("x-")}
    try:
        event_publish(body=dead_letter.raw_body.encode(), routing_key=dead_letter.routing_key or None, headers=headers or None)
    except (pika.exceptions.AMQPError, OSError) as exc:
        DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.RETRIED, resolved_at=now).update(
            resolution=Resolution.UNRESOLVED, resolved_by=None, resolved_at=None
        )
        dead_letter.refresh_from_db()
        return services.RedriveResult(False, f"could not publish: {exc}")
    dead_letter.refresh_from_db()
    return services.RedriveResult(True, "republished")


# --- The consumer --------------------------------------------------------------------------------


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
                self._connection = pika.BlockingConnection(connection_parameters())
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
        close_old_connections()
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
        key = result.event_key or _event_key_of(body)
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
        close_old_connections()
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
        channel.basic_ack(method.delivery_tag)
        logger.warning(
            "dead-lettered event recorded as dead letter %s (%s): %s",
            dead_letter.pk,
            dead_letter.reason,
            dead_letter.last_error,
            extra={"dead_letter_id": dead_letter.pk},
        )
