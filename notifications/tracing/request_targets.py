"""What a request's URL looks like where it is recorded (traces): the values of its secret query
parameters replaced, so a token that came in a URL is not kept in a tracing backend.

An inbox user token or stream ticket may come in ``?token=`` / ``?ticket=`` on the live stream
alone (EventSource cannot set headers); OpenTelemetry's own redaction list covers cloud storage
signatures, not these. Our request logs record the path without its query.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from django.http import HttpRequest, HttpResponseBase
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind

# Query parameters whose values are credentials.
SECRET_QUERY_PARAMETERS = frozenset({"token", "ticket"})
REDACTED = "REDACTED"

tracer = trace.get_tracer("notifications")

Send = Callable[[dict[str, Any]], Awaitable[None]]


def redacted_query(query: str) -> str:
    """``query`` with the value of each secret parameter replaced (the rest as sent)."""
    pairs = parse_qsl(query, keep_blank_values=True)  # decoded: ?%74oken= is a token too
    if not any(name in SECRET_QUERY_PARAMETERS for name, _ in pairs):
        return query
    return urlencode([(name, REDACTED if name in SECRET_QUERY_PARAMETERS else value) for name, value in pairs])


def redacted_target(target: str) -> str:
    """A request target (path and query) with its secret parameters' values replaced."""
    path, mark, query = target.partition("?")
    return path + mark + redacted_query(query) if mark else target


class RequestTargetMiddleware:
    """Gives OpenTelemetry's Django middleware the request target as sent, its secrets redacted.

    OpenTelemetry records RAW_URI or REQUEST_URI as the span's target, query included. Without
    either, it rebuilds the URL with ``wsgiref.util.request_uri``, which encodes PATH_INFO as
    Latin-1; Django has by then replaced PATH_INFO with the decoded UTF-8 path, so any path with a
    character above U+00FF (``/api/v1/notifications/%E2%9C%93`` on Django's own server, or the
    test client) raised UnicodeEncodeError and became a 500 (open-telemetry/
    opentelemetry-python-contrib#3237, open in 0.66b1). The percent-encoded path Django gives back
    is what the client sent.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request.META["REQUEST_URI"] = redacted_target(request.get_full_path())
        if "RAW_URI" in request.META:
            request.META["RAW_URI"] = redacted_target(request.META["RAW_URI"])
        return self.get_response(request)


def span_request_hook(span: Span, request: HttpRequest) -> None:
    """OpenTelemetry's Django request hook: the query recorded by the newer HTTP conventions
    (``url.query``, read from QUERY_STRING, which the view still needs as sent) redacted too."""
    query = request.META.get("QUERY_STRING", "")
    if span.is_recording() and redacted_query(query) != query:
        span.set_attribute("url.query", redacted_query(query))


def asgi_request_span(scope: dict[str, Any]) -> Span:
    """A started server span for an ASGI request that no Django middleware traces (the live
    stream), its target redacted; the caller ends it (``trace.use_span(span, end_on_exit=True)``).
    Nothing of the request is kept unless the span is recorded: a stream holds its span for hours,
    and 2,000 of them share one process (bench/inbox.py's memory per stream)."""
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}
    method = scope.get("method", "GET")
    span = tracer.start_span(f"{method} {scope['path']}", context=propagate.extract(headers), kind=SpanKind.SERVER)
    if span.is_recording():
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope["path"] + ("?" + redacted_query(query) if query else "")
        span.set_attributes({"http.method": method, "http.target": target, "http.scheme": scope.get("scheme", "http")})
    return span


def status_recorded(span: Span, send: Send) -> Send:
    """``send``, recording the answer's status on ``span`` when it is recorded."""
    if not span.is_recording():
        return send

    async def send_recording(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            span.set_attribute("http.status_code", message["status"])
        await send(message)

    return send_recording
