"""Traces: one API request's trace runs through the queue to the provider call, its id is stored
on the notification and carried by the JSON log lines; probes make no spans; export is opt-in."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
import requests
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from rest_framework.test import APIClient

from notifications import tracing
from notifications.logging import JsonFormatter
from notifications.models import ApiClient, Notification, Status

from .helpers import ROOT, PlatformProcess, platform_env, wait_until
from .live_servers import gunicorn_server
from .test_delivery_pipeline import SmtpServer, pipeline_env

pytestmark = pytest.mark.django_db(transaction=True)

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Finished spans of the tracer provider that start-up (tracing.configure) installed."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "tracing.configure() did not install the SDK tracer provider"
    if not getattr(provider, "_test_exporter_added", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._test_exporter_added = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("notifications")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_one_api_post_is_one_trace_from_request_through_deliver_to_the_provider(
    api: APIClient, worker: dramatiq.Worker, spans: InMemorySpanExporter, json_log: io.StringIO
) -> None:
    response = api.post("/api/v1/notifications", {"user_id": "u1", "to": "ann@example.com", "message": "hi"}, format="json")
    assert response.status_code == 202
    notification_id = response.json()["id"]
    wait_until(lambda: named(spans, "notification.send_email") and named(spans, "notification.deliver"), timeout=15)

    (request,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER and "notifications" in s.name]
    (deliver,) = named(spans, "notification.deliver")
    (send,) = named(spans, "notification.send_email")
    assert request.context is not None and deliver.context is not None and send.context is not None
    trace_id = request.context.trace_id
    assert deliver.context.trace_id == trace_id and send.context.trace_id == trace_id
    assert deliver.parent is not None and deliver.parent.span_id == request.context.span_id
    assert send.parent is not None and send.parent.span_id == deliver.context.span_id
    assert deliver.kind == SpanKind.CONSUMER
    assert deliver.attributes is not None and deliver.attributes["notification.id"] == notification_id
    assert send.attributes is not None
    assert send.attributes["notification.channel"] == "email"
    assert send.attributes["notification.attempt"] == 1
    assert send.attributes["notification.outcome"] == "delivered"

    notification = Notification.objects.get(pk=notification_id)
    assert notification.status == Status.DELIVERED
    assert notification.trace_id == format(trace_id, "032x")

    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    (delivered,) = [line for line in lines if line["message"].startswith("delivered notification")]
    assert delivered["otelTraceID"] == format(trace_id, "032x")
    assert delivered["otelSpanID"] == format(deliver.context.span_id, "016x")
    assert delivered["notification_id"] == notification_id
    assert delivered["level"] == "INFO" and delivered["logger"] == "notifications.services"
    assert "hi" not in delivered["message"]


def test_probes_and_scrapes_make_no_spans_but_the_api_does(api: APIClient, spans: InMemorySpanExporter) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        api.get(path)
    assert [s.name for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER] == []
    api.get("/api/v1/notifications")
    assert [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]


def test_log_lines_outside_a_span_are_json_without_trace_ids(json_log: io.StringIO) -> None:
    logging.getLogger("notifications.test").warning("no span here")
    (line,) = [json.loads(text) for text in json_log.getvalue().splitlines()]
    assert line["message"] == "no span here" and line["level"] == "WARNING"
    assert "otelTraceID" not in line and "otelSpanID" not in line


NO_EXPORT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_TRACES_EXPORTER": ""}


def test_a_web_process_that_exports_nothing_still_continues_the_callers_trace(
    client_and_token: tuple[ApiClient, str],
) -> None:
    # Unrecorded, the request's span is ours (tracing.RequestSpanMiddleware), not OpenTelemetry's
    # middleware: it must still continue a traceparent, and start a new trace without one.
    caller_trace = "0af7651916cd43dd8448eb211c80319c"
    with gunicorn_server(**NO_EXPORT) as server:

        def accepted(**headers: str) -> Notification:
            response = requests.post(
                server.url("/api/v1/notifications"),
                json={"user_id": "u1", "to": "ann@example.com", "message": "hi"},
                headers={"Authorization": f"Bearer {client_and_token[1]}", **headers},
                timeout=30,
            )
            assert response.status_code == 202, response.text
            return Notification.objects.get(pk=response.json()["id"])

        continued = accepted(traceparent=f"00-{caller_trace}-b7ad6b7169203331-01")
        first, second = accepted(), accepted()
    assert continued.trace_id == caller_trace
    assert len({first.trace_id, second.trace_id, caller_trace}) == 3
    assert all(len(n.trace_id) == 32 and int(n.trace_id, 16) for n in (first, second))


def test_spans_are_exported_only_when_the_otel_variables_ask_for_it() -> None:
    with override_settings(OTEL_EXPORTER_OTLP_ENDPOINT="", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="", OTEL_TRACES_EXPORTER=""):
        assert tracing._span_exporter() is None
    with override_settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_TRACES_EXPORTER=""):
        assert type(tracing._span_exporter()).__name__ == "OTLPSpanExporter"
    with override_settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_TRACES_EXPORTER="none"):
        assert tracing._span_exporter() is None


def test_spans_have_ids_always_and_are_recorded_once_something_processes_them() -> None:
    provider = tracing.tracer_provider()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("unprocessed") as span:
        # Nothing would receive it: ids for the notification and the log lines, nothing kept.
        assert not span.is_recording() and span.get_span_context().is_valid
        assert tracing.current_trace_id() == format(span.get_span_context().trace_id, "032x")
        with tracer.start_as_current_span("child") as child:
            assert child.get_span_context().trace_id == span.get_span_context().trace_id
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tracer.start_as_current_span("processed", attributes={"notification.id": "n1"}) as span:
        assert span.is_recording()
    assert [(s.name, dict(s.attributes or {})) for s in exporter.get_finished_spans()] == [
        ("processed", {"notification.id": "n1"})
    ]


INSTRUMENTED = (
    "from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor as P;"
    "from opentelemetry.instrumentation.redis import RedisInstrumentor as R;"
    "from opentelemetry.instrumentation.requests import RequestsInstrumentor as Q;"
    "from opentelemetry.instrumentation.django import DjangoInstrumentor as D;"
    "print([i().is_instrumented_by_opentelemetry for i in (D, P, R, Q)])"
)


@pytest.mark.parametrize(
    ("exporter", "expected"),
    [("", "[True, False, False, False]"), ("console", "[True, True, True, True]")],
    ids=["not exporting", "exporting"],
)
def test_database_redis_and_http_calls_are_traced_only_when_spans_are_exported(exporter: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", INSTRUMENTED],
        cwd=ROOT,
        env=platform_env(OTEL_TRACES_EXPORTER=exporter, OTEL_EXPORTER_OTLP_ENDPOINT=""),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == expected


def json_lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_real_worker_process_logs_json_lines_with_the_trace_and_notification_ids(
    api: APIClient, broker: dramatiq.Broker
) -> None:
    # rundramatiq passes --skip-logging, so each dramatiq worker process must log through the
    # settings' LOGGING (JSON) on its own; an in-process worker would not show that.
    smtp = SmtpServer()
    # And with no OTEL_* exporter variables: spans are made but nothing is exported or complained about.
    worker = PlatformProcess(
        "rundramatiq", "--processes", "1", "--threads", "1", env=pipeline_env(smtp, LOG_FORMAT="json", **NO_EXPORT)
    )
    try:
        body = "a private message body"
        response = api.post("/api/v1/notifications", {"user_id": "u1", "to": "ann@example.com", "message": body}, format="json")
        assert response.status_code == 202
        notification_id = response.json()["id"]

        def delivered_line() -> dict[str, object] | None:
            lines = [line for line in json_lines(worker.output()) if str(line["message"]).startswith("delivered notification")]
            return lines[0] if lines else None

        line = wait_until(delivered_line, timeout=30, message=f"a JSON delivered line; log:\n{worker.output()[-3000:]}")
    finally:
        worker.kill()
        smtp.close()
    notification = Notification.objects.get(pk=notification_id)
    assert notification.trace_id and line["otelTraceID"] == notification.trace_id
    assert isinstance(line["otelSpanID"], str) and len(line["otelSpanID"]) == 16
    assert line["notification_id"] == notification_id
    assert line["level"] == "INFO" and line["logger"] == "notifications.services"
    # Every line the worker processes wrote is JSON (the command's own "starting workers" aside),
    # and the message body is in none of them.
    other = [text for text in worker.output().splitlines() if text and not text.startswith(("{", "starting workers:"))]
    assert other == [], other
    assert body not in worker.output()
    complaints = [line for line in json_lines(worker.output()) if line["level"] in ("WARNING", "ERROR", "CRITICAL")]
    assert complaints == [], complaints


def test_the_gunicorn_web_process_writes_every_line_as_json(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        web = subprocess.Popen(
            # gunicorn.conf.py (what the image runs) gives the rest: uvicorn workers, no access log, JSON logging.
            [sys.executable, "-m", "gunicorn", "platform.asgi:application", "--bind", f"127.0.0.1:{port}",
             "--control-socket", str(tmp_path / "ctl")],
            cwd=ROOT,
            env=platform_env(LOG_FORMAT="json"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def healthz() -> bool:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_until(healthz, timeout=30, message=f"gunicorn up; log:\n{log.read_text()[-2000:]}")

        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/no-such-thing", timeout=5)
        assert missing.value.code == 404

        def request_lines(path: str) -> list[dict[str, object]]:
            return [line for line in json_lines(log.read_text()) if path in str(line.get("message"))]

        line = wait_until(
            lambda: request_lines("GET /healthz"), timeout=10, message=f"a request line; log:\n{log.read_text()[-2000:]}"
        )[0]
        # One line for the 404 too: no gunicorn access line, no Django "Not Found" warning beside it.
        (missing_line,) = wait_until(lambda: request_lines("/api/v1/no-such-thing"), timeout=10, message="the 404's line")
    finally:
        web.terminate()
        web.wait(timeout=30)
    assert line["level"] == "INFO" and line["logger"] == "notifications.request" and line["status"] == 200
    assert (missing_line["status"], missing_line["method"], missing_line["path"]) == (404, "GET", "/api/v1/no-such-thing")
    assert isinstance(missing_line["duration_ms"], float) and missing_line["request_id"]
    # The master's start-up lines too ("Starting gunicorn", "Booting worker"), before Django loads.
    text = log.read_text()
    assert "Starting gunicorn" in text
    not_json = [raw for raw in text.splitlines() if raw.strip() and not raw.lstrip().startswith("{")]
    assert not_json == [], not_json


def test_an_events_notification_continues_the_process_span_through_deliver_to_the_provider(
    worker: dramatiq.Worker, spans: InMemorySpanExporter
) -> None:
    from notifications import events

    producer_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = json.dumps(
        {"order_id": 61, "project_id": 7, "description": "d", "amount": 1, "user_id": "u1", "email": "t@example.com"}
    ).encode()
    result = events.event_process(
        body=body, routing_key="order.created", headers={"traceparent": f"00-{producer_trace}-00f067aa0ba902b7-01"}
    )
    assert result.status == "success", result
    # The consumer span (deliver) ends after the send span, once the delivery is recorded.
    wait_until(lambda: named(spans, "notification.send_email") and named(spans, "notification.deliver"), timeout=15)
    (process,) = named(spans, "notification.process")
    (deliver,) = named(spans, "notification.deliver")
    (send,) = named(spans, "notification.send_email")
    assert process.context is not None and deliver.context is not None and send.context is not None
    trace_id = process.context.trace_id
    assert format(trace_id, "032x") != producer_trace  # the producer is a link, not the parent
    assert [format(link.context.trace_id, "032x") for link in process.links] == [producer_trace]
    assert deliver.context.trace_id == trace_id and send.context.trace_id == trace_id
    assert deliver.parent is not None and deliver.parent.span_id == process.context.span_id
    assert send.parent is not None and send.parent.span_id == deliver.context.span_id
    assert Notification.objects.get(pk=result.notification_id).trace_id == format(trace_id, "032x")
