"""One event through the pipeline: its span, decode by its handler, the dedup claim and accept,
and how it ended (success, duplicate, failed, failed_transient). Knows no event type."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from django.db import InterfaceError, OperationalError
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import services
from ..errors import NotificationError
from .registry import MalformedEvent, decode_event

try:  # Redis errors are transient too when the cache is Redis.
    from redis.exceptions import RedisError as _RedisError
except ImportError:  # pragma: no cover
    _RedisError = OSError  # type: ignore[assignment,misc]

logger = logging.getLogger("notifications.events")
tracer = trace.get_tracer("notifications.events")
_w3c = TraceContextTextMapPropagator()

# The database or Redis being away; anything else the database says is an answer, not an outage.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, _RedisError)


@dataclass(frozen=True)
class ProcessResult:
    status: str  # success | duplicate | failed | failed_transient
    event_key: str = ""
    notification_id: str = ""
    reason: str = ""
    trace_id: str = ""  # of the notification.process span, for the log line written after it


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
    event = decode_event(body, routing_key)
    try:
        intake = services.event_notification_accept(event_key=event.key, routing_key=routing_key, request=event.request)
    except NotificationError as exc:
        # e.g. no stored address for the user: the same event will fail the same way every time.
        raise MalformedEvent(f"{exc.code}: {exc.message}") from None
    if intake.duplicate:
        return ProcessResult("duplicate", event_key=event.key)
    return ProcessResult("success", event_key=event.key, notification_id=intake.notification_id)


def event_key_of(body: bytes, routing_key: str) -> str:
    """The event's dedup key, or a hash of the body when it cannot be decoded."""
    try:
        return decode_event(body, routing_key).key
    except MalformedEvent:
        return "sha256:" + hashlib.sha256(body).hexdigest()
