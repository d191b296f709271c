"""OpenTelemetry: trace context carried through Dramatiq messages, the delivery spans and the request spans."""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import dramatiq
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from dramatiq.middleware import CurrentMessage
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, Span, SpanKind, TraceState
from opentelemetry.util.types import Attributes

from . import request_targets

if TYPE_CHECKING:
    from ..models import Notification

logger = logging.getLogger(__name__)
tracer = trace.get_tracer("notifications")
TRACE_OPTION = "trace_context"  # a message option: the W3C trace context of its sender
# A message option of a message whose ids came from separate requests (a group commit): the W3C
# trace context of each id's request, {notification id: context}. Each notification's send and
# delivered line belong to its own request's trace; the message's consumer span links to them.
TRACES_OPTION = "trace_contexts"
# Probes and scrapes would be most of the spans and tell nothing.
EXCLUDED_URLS = "healthz,readyz,metrics"
_configured = False
_configure_lock = threading.Lock()


def configure() -> None:
    """Install the tracer provider and the library instrumentations, once per process.

    Spans are always made, so trace ids exist to store on notifications and to put in log lines;
    they are recorded and exported only when the standard OTEL_* variables ask for it (the OTLP
    exporter reads its endpoint, headers and protocol from them itself).
    """
    global _configured
    with _configure_lock:
        if _configured:
            return
        _configured = True
    exporter = _span_exporter()
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = tracer_provider()
        if exporter is not None:
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    _instrument_libraries(client_calls=exporter is not None)


def tracer_provider() -> TracerProvider:
    """The SDK's provider, recording spans once it has a processor (_RecordedWhenProcessed)."""
    processors = _SpanProcessors()
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME}), active_span_processor=processors
    )
    # Set before any tracer exists: each tracer takes the provider's sampler when made.
    provider.sampler = _RecordedWhenProcessed(processors, provider.sampler)
    return provider


class _SpanProcessors(SynchronousMultiSpanProcessor):
    """The provider's span processors, and whether it has any yet (the sampler asks)."""

    processed = False

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self.processed = True


class _RecordedWhenProcessed(Sampler):
    """Spans are recorded only once something processes them (an exporter, a test's collector).

    Until then a span is the SDK's non-recording span: it has its trace and span ids, which the
    notification and the log lines carry, but no attributes, events or timing are kept for
    nobody, which would be CPU spent on the accept path for nothing. With processors, the sampler the OTEL_TRACES_SAMPLER variables choose decides. A
    trace begun by a process that does not export arrives unsampled, so a process that exports
    continues it unrecorded, as with any sampled-out parent.
    """

    def __init__(self, processors: _SpanProcessors, configured: Sampler) -> None:
        self._processors, self._configured = processors, configured

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if self.processed:
            return self._configured.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        parent_state = trace.get_current_span(parent_context).get_span_context().trace_state
        return SamplingResult(Decision.DROP, trace_state=parent_state)

    @property
    def processed(self) -> bool:
        return self._processors.processed

    def get_description(self) -> str:
        return f"RecordedWhenProcessed{{{self._configured.get_description()}}}"


def _span_exporter() -> Any:
    choice = settings.OTEL_TRACES_EXPORTER.strip().lower()
    wants_otlp = choice == "otlp" or (
        not choice and (settings.OTEL_EXPORTER_OTLP_ENDPOINT or settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    )
    if wants_otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if choice == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if choice not in ("", "none"):
        logger.warning("OTEL_TRACES_EXPORTER=%r is not supported here (use otlp, console or none); not exporting", choice)
    return None


def _instrument_libraries(*, client_calls: bool) -> None:
    """Django always (its request span is where an API notification's trace starts). The database,
    Redis and HTTP client calls only when spans are exported: a span per query that nobody will
    see costs about a tenth of a delivery's CPU."""
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    before = list(settings.MIDDLEWARE)
    DjangoInstrumentor().instrument(
        excluded_urls=EXCLUDED_URLS,
        middleware_position=_django_middleware_position(),
        request_hook=request_targets.span_request_hook,
    )
    # The middleware it inserted (its documented way of working), put behind ours: called only
    # while spans are recorded (RequestSpanMiddleware). Found as the entry it added, not by name.
    added = [path for path in settings.MIDDLEWARE if path not in before]
    _otel_middleware[:] = added
    settings.MIDDLEWARE = [REQUEST_SPAN_MIDDLEWARE if path in added else path for path in settings.MIDDLEWARE]
    if not client_calls:
        return
    for module, name in (
        ("opentelemetry.instrumentation.psycopg", "PsycopgInstrumentor"),
        ("opentelemetry.instrumentation.redis", "RedisInstrumentor"),
        ("opentelemetry.instrumentation.requests", "RequestsInstrumentor"),
    ):
        try:
            instrumentor = getattr(importlib.import_module(module), name)()
        except ImportError:
            continue
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


REQUEST_TARGET_MIDDLEWARE = "notifications.tracing.request_targets.RequestTargetMiddleware"
REQUEST_SPAN_MIDDLEWARE = "notifications.tracing.RequestSpanMiddleware"
# The dotted path of the middleware DjangoInstrumentor inserted into MIDDLEWARE.
_otel_middleware: list[str] = []


def _django_middleware_position() -> int:
    """Right after RequestTargetMiddleware, which must run before OpenTelemetry's middleware."""
    middleware = list(settings.MIDDLEWARE)
    return middleware.index(REQUEST_TARGET_MIDDLEWARE) + 1 if REQUEST_TARGET_MIDDLEWARE in middleware else 0


def spans_recorded() -> bool:
    """Whether the process's spans are recorded: False only under our provider with nothing to
    process them (_RecordedWhenProcessed); another provider is trusted to want them."""
    sampler = getattr(trace.get_tracer_provider(), "sampler", None)
    return not isinstance(sampler, _RecordedWhenProcessed) or sampler.processed


class RequestSpanMiddleware:
    """The request's server span: OpenTelemetry's Django middleware while spans are recorded,
    else only the span itself, for its ids.

    Unrecorded, OpenTelemetry's middleware still resolves the URL a second time for the span's
    name, gathers a dozen request attributes and times the request for metrics nobody reads
    (docs/performance.md has what that costs an accept). The span it would make is
    the same non-recording one: the caller's traceparent continued, or a new trace, current while
    the view runs, so the notification and the log lines carry its ids, and the message its
    context. Switches to the full middleware as soon as something processes spans (a test's
    collector added at run time, say).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        from django.utils.module_loading import import_string
        from opentelemetry.instrumentation.wsgi import wsgi_getter
        from opentelemetry.util.http import parse_excluded_urls

        self.get_response = get_response
        self._instrumented = import_string(_otel_middleware[0])(get_response)
        self._headers = wsgi_getter  # reads a traceparent header from the WSGI environ (request.META)
        self._excluded = parse_excluded_urls(EXCLUDED_URLS)  # what the instrumentor was given

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if spans_recorded():
            return self._instrumented(request)  # type: ignore[no-any-return]
        if self._excluded.url_disabled(request.build_absolute_uri("?")):
            return self.get_response(request)
        # As OpenTelemetry's: the caller's trace, unless a span is current already (then its child).
        outermost = trace.get_current_span() is trace.INVALID_SPAN
        parent = propagate.extract(request.META, getter=self._headers) if outermost else None
        kind = SpanKind.SERVER if outermost else SpanKind.INTERNAL
        with tracer.start_as_current_span(request.method or "HTTP", context=parent, kind=kind):
            return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        self._instrumented.process_exception(request, exception)


@contextlib.contextmanager
def context_attached(context: otel_context.Context | None) -> Iterator[None]:
    """Run the block in ``context`` (another thread's, captured with otel_context.get_current()),
    so what it records and publishes belongs to that request's trace; None: the current one."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def message_carrier() -> dict[str, str]:
    """The current trace context as a message carries it (the TRACE_OPTION option)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def current_trace_id() -> str:
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else ""


def current_traceparent() -> str:
    """The current span as a W3C ``traceparent`` (stored on a notification at its accept), or ""."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return ""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def delivery_context(notification: Notification) -> otel_context.Context | None:
    """The trace a notification's send and delivered line belong to: its request's. None: the
    current one (the message's consumer span is in that trace already).

    A message of ids from separate requests (a group commit) carries each id's context
    (TRACES_OPTION). A notification claimed from the backlog, beside the ids of another request's
    message (services/backlog.py), is in another trace than the current one: its accept's
    ``traceparent``, stored on its row, continues its own."""
    message = CurrentMessage.get_current_message()
    carriers = message.options.get(TRACES_OPTION) if message is not None else None
    carrier = carriers.get(str(notification.pk)) if carriers else None
    if carrier:
        return propagate.extract(carrier)
    if not notification.traceparent or notification.trace_id == current_trace_id():
        return None
    return propagate.extract({"traceparent": notification.traceparent})


@contextlib.contextmanager
def provider_span(notification: Notification, attempt_number: int) -> Iterator[Span]:
    own = delivery_context(notification)
    current = trace.get_current_span().get_span_context()
    with tracer.start_as_current_span(
        f"notification.send_{notification.channel}",
        context=own,  # None: a child of the message's consumer span
        kind=SpanKind.CLIENT,
        attributes={
            "notification.id": str(notification.pk),
            "notification.channel": notification.channel,
            "notification.attempt": attempt_number,
        },
        # In its request's trace, the send still points at the message that carried it.
        links=[Link(current)] if own is not None and current.is_valid else None,
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
        if TRACE_OPTION not in message.options:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if carrier:
                message.options[TRACE_OPTION] = carrier

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        parent = propagate.extract(message.options.get(TRACE_OPTION) or {})
        # A message of ids from separate requests has no trace of its own: it links to theirs.
        links = [
            Link(trace.get_current_span(propagate.extract(carrier)).get_span_context())
            for carrier in (message.options.get(TRACES_OPTION) or {}).values()
        ]
        span = tracer.start_span(
            "notification.deliver",
            context=parent,
            links=links,
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
