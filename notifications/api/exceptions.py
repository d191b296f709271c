"""One exception handler: domain and DRF errors become one JSON error shape.

An exception no one modelled is a 500 in the same shape with the request id (also logged with the
traceback), and the database being unreachable a 503 with Retry-After; never Django's HTML page.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler, set_rollback

from ..errors import (
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidTransition,
    LimitExceeded,
    NotFound,
    NotificationError,
    RateLimitExceeded,
    ValidationFailed,
)
from ..logging import current_request_id

logger = logging.getLogger("notifications.api")

# A restart or failover usually takes seconds; a client can act on this guess.
DATABASE_RETRY_AFTER_SECONDS = 5
# What SQLite (the embedded default) says, as an OperationalError, when it is busy or its file is
# unreachable. It says "no such column" with the same class, and that one is a bug.
_SQLITE_UNAVAILABLE_WORDS = ("locked", "busy", "unable to open", "disk I/O")


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the database cannot be reached or used just now (refused, dropped,
    timed out, locked): an outage worth a retry, not a query that is wrong."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if isinstance(exc.__cause__, sqlite3.Error):
        return any(words in str(exc.__cause__) for words in _SQLITE_UNAVAILABLE_WORDS)
    return True


_STATUS_BY_ERROR: list[tuple[type[NotificationError], int]] = [
    (ValidationFailed, status.HTTP_400_BAD_REQUEST),
    (RateLimitExceeded, status.HTTP_429_TOO_MANY_REQUESTS),
    (LimitExceeded, status.HTTP_400_BAD_REQUEST),
    (NotFound, status.HTTP_404_NOT_FOUND),
    (IdempotencyConflict, status.HTTP_422_UNPROCESSABLE_ENTITY),
    (IdempotencyInFlight, status.HTTP_409_CONFLICT),
    (InvalidTransition, status.HTTP_409_CONFLICT),
]


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error": {"code": ..., "message": ..., "field"?: ..., "details"?: ...}}``"""
    return {"error": _utf8_safe({"code": code, "message": message, **extra})}


def _utf8_safe(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate written as a ``\\udXXX`` escape.

    Error messages and field names echo request text; a raw surrogate cannot be encoded as UTF-8,
    so the renderer failed and the answer became a 500 (in a batch, after earlier items committed).
    Error details nest as deep as the serializers do, not as deep as the request body.
    """
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode()
    if isinstance(value, dict):
        return {_utf8_safe(key): _utf8_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_utf8_safe(item) for item in value]
    return value


def _first_field_error(detail: Any, prefix: str = "") -> tuple[str, str]:
    if isinstance(detail, dict):
        for name, value in detail.items():
            return _first_field_error(value, f"{prefix}.{name}" if prefix else str(name))
    if isinstance(detail, list) and detail:
        if all(not isinstance(item, (dict, list)) for item in detail):
            return prefix, str(detail[0])
        for index, item in enumerate(detail):
            if item:
                return _first_field_error(item, f"{prefix}[{index}]")
    return prefix, str(detail)


def unhandled_error(exc: BaseException | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and headers answering an exception nobody handled (None: unknown)."""
    request_id = current_request_id()
    if database_unavailable(exc):
        body = error_body("unavailable", "the database is unavailable; try again shortly", request_id=request_id)
        return status.HTTP_503_SERVICE_UNAVAILABLE, body, {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}
    message = "an unexpected error occurred; the request id identifies it in our logs"
    return status.HTTP_500_INTERNAL_SERVER_ERROR, error_body("internal_error", message, request_id=request_id), {}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, NotificationError):
        http_status = next((code for cls, code in _STATUS_BY_ERROR if isinstance(exc, cls)), status.HTTP_400_BAD_REQUEST)
        headers = {"Retry-After": str(math.ceil(exc.retry_after))} if isinstance(exc, RateLimitExceeded) else None
        return Response(error_body(exc.code, exc.message, **exc.extra), status=http_status, headers=headers)
    if isinstance(exc, RequestDataTooBig):
        # Raised while DRF reads the body; left to Django it became an HTML 400 page.
        return Response(error_body("request_too_large", str(exc)), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    response = exception_handler(exc, context)
    if response is None:
        return _unhandled_response(exc, context.get("request"))
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_error(exc.detail)
        field = "" if field == "non_field_errors" else field
        named = {"field": field} if field else {}
        response.data = error_body("invalid", f"{field}: {message}" if field else message, details=exc.detail, **named)
    elif isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        response.data = error_body(str(code), str(exc.detail))
    return response


def _unhandled_response(exc: Exception, request: Request | None) -> Response:
    # DRF would re-raise it for Django to answer with an HTML page (a debug page under DEBUG).
    http_status, body, headers = unhandled_error(exc)
    where = f"{request.method} {request.path}" if request is not None else "a request"
    if http_status == status.HTTP_503_SERVICE_UNAVAILABLE:
        logger.warning("database unavailable while answering %s: %s: %s", where, type(exc).__name__, exc)
    else:
        logger.error("unexpected error while answering %s", where, exc_info=exc)
    set_rollback()
    response = Response(body, status=http_status, headers=headers)
    # Logged just now, with the traceback; Django would add a second line for the same 5xx.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
