"""JSON log lines that carry the current trace and span ids, and the id of the request in hand."""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

# Set by notifications.api.middleware for the length of one request; every line logged meanwhile,
# Django's own "Internal Server Error" included, carries it as ``request_id``.
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


def current_request_id() -> str:
    return request_id_var.get()


# What Django and its servers attach to their records: a socket, a WSGIRequest. Their repr is no
# log field (and a socket's names addresses); the request's line (api/middleware.py) says the rest.
_DROPPED_EXTRAS = ("request", "server_time")


class StartupBanner(logging.Filter):
    """Logs a library's start-up banner (django-axes' "AXES: BEGIN ...", printed by every
    ``manage.py`` command) at DEBUG: shown when LOG_LEVEL is DEBUG, not otherwise."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s")
        kwargs.setdefault("rename_fields", {"levelname": "level", "asctime": "time", "name": "logger"})
        super().__init__(*args, **kwargs)

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        for name in _DROPPED_EXTRAS:
            log_record.pop(name, None)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            log_record["otelTraceID"] = format(span_context.trace_id, "032x")
            log_record["otelSpanID"] = format(span_context.span_id, "016x")
        # Django logs a request's status after the middleware returned, with the request attached.
        request_id = (
            getattr(record, "request_id", "")
            or request_id_var.get()
            or getattr(getattr(record, "request", None), "request_id", "")
        )
        if request_id:
            log_record["request_id"] = request_id
