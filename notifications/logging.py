"""JSON log lines that carry the current trace and span ids."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s")
        kwargs.setdefault("rename_fields", {"levelname": "level", "asctime": "time", "name": "logger"})
        super().__init__(*args, **kwargs)

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            log_record["otelTraceID"] = format(span_context.trace_id, "032x")
            log_record["otelSpanID"] = format(span_context.span_id, "016x")
