"""One exception handler: domain and DRF errors become one JSON error shape."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from ..errors import (
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidTransition,
    NotFound,
    NotificationError,
    ValidationFailed,
)

_STATUS_BY_ERROR: list[tuple[type[NotificationError], int]] = [
    (ValidationFailed, status.HTTP_400_BAD_REQUEST),
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


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, NotificationError):
        http_status = next((code for cls, code in _STATUS_BY_ERROR if isinstance(exc, cls)), status.HTTP_400_BAD_REQUEST)
        return Response(error_body(exc.code, exc.message, **exc.extra), status=http_status)
    if isinstance(exc, RequestDataTooBig):
        # Raised while DRF reads the body; left to Django it became an HTML 400 page.
        return Response(error_body("request_too_large", str(exc)), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_error(exc.detail)
        field = "" if field == "non_field_errors" else field
        named = {"field": field} if field else {}
        response.data = error_body("invalid", f"{field}: {message}" if field else message, details=exc.detail, **named)
    elif isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        response.data = error_body(str(code), str(exc.detail))
    return response
