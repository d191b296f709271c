"""OpenTelemetry: trace context carried through Dramatiq messages, and the delivery spans."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dramatiq
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind

if TYPE_CHECKING:
    from .models import Notification

tracer = trace.get_tracer("notifications")
_TRACE_OPTION = "trace_context"


def current_trace_id() -> str:
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else ""


@contextlib.contextmanager
def provider_span(notification: Notification, attempt_number: int) -> Iterator[Span]:
    with tracer.start_as_current_span(
        f"notification.send_{notification.channel}",
        kind=SpanKind.CLIENT,
        attributes={
            "notification.id": str(notification.pk),
            "notification.channel": notification.channel,
            "notification.attempt": attempt_number,
        },
    ) as span:
        yield span


def record_outcome(span: Span, outcome: str) -> None:
    span.set_attribute("notification.outcome", outcome)


class TraceContextMiddleware(dramatiq.Middleware):
    """Writes the sender's W3C trace context into each message and continues it in the worker,
    so a notification's trace runs from the API request (or event) to the provider call."""

    def __init__(self) -> None:
        self._local = threading.local()

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int) -> None:  # type: ignore[type-arg]
        if _TRACE_OPTION not in message.options:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if carrier:
                message.options[_TRACE_OPTION] = carrier

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        parent = propagate.extract(message.options.get(_TRACE_OPTION) or {})
        span = tracer.start_span(
            "notification.deliver",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "rabbitmq",
                "messaging.destination.name": message.queue_name,
                "messaging.message.id": message.message_id,
                "notification.id": str(message.args[0]) if message.args else "",
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._local.active = (span, token)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        active = getattr(self._local, "active", None)
        if active is None:
            return
        span, token = active
        self._local.active = None
        if exception is not None and not isinstance(exception, dramatiq.Retry):
            span.record_exception(exception)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exception)))
        span.end()
        otel_context.detach(token)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self.after_process_message(broker, message)
