"""The outermost middleware: every request gets an id and one log line, and under /api/ every
answer is JSON.

DRF's exception handler shapes the errors of the API's views. This catches what happens outside
them: a 404 for a path no view serves, an exception in a middleware or the URLconf, Django's HTML
error pages (its debug pages under DEBUG). Each becomes ``error_body`` with the request id, which
is also the ``X-Request-ID`` response header and the ``request_id`` field of every log line written
while the request was handled.

The request's line (logger ``notifications.request``) is the only one per request: gunicorn's
access log is off and runserver's request lines and Django's 4xx warnings are silenced in
``LOGGING``, so a 4xx is not logged twice. It names the API client, never the query string (a
token may ride there).
"""

from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.core.signals import got_request_exception
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from ..connections import database_connections_vet
from ..logging import request_id_var
from ..models import ApiClient
from .exceptions import error_body, unhandled_error

API_PREFIX = "/api/"
REQUEST_ID_HEADER = "X-Request-ID"
# A proxy's or a client's id is kept when it looks like one (a UUID, a hex or base64 trace id, an
# "ELB-style" Root=1-...), so one id follows the request through every hop; anything else (too
# long, spaces, control characters that would forge log lines) is replaced by our own.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=+/-]{0,127}")
_UNHANDLED_ATTRIBUTE = "_notifications_unhandled_exception"
# Django's error statuses in our error vocabulary (DRF's codes where DRF has one).
_ERROR_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    429: "throttled",
}


def request_id_for(incoming: str | None) -> str:
    if incoming and _SANE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class ApiRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        # The database connections idle for a while checked, as Django's CONN_HEALTH_CHECKS would
        # check every one (connections.py).
        database_connections_vet()
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        token = request_id_var.set(request_id)
        # For the lines Django logs about the request after this returns (the formatter reads it).
        request.request_id = request_id  # type: ignore[attr-defined]
        try:
            response = self.get_response(request)
            if request.path_info.startswith(API_PREFIX) and response.status_code >= 400 and not _is_json(response):
                response = _json_error(request, response)
            _request_log(request, response.status_code, started)
        finally:
            request_id_var.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


request_logger = logging.getLogger("notifications.request")


def _request_log(request: HttpRequest, status: int, started: float) -> None:
    if not request_logger.isEnabledFor(logging.INFO):
        return
    duration_ms = round((time.perf_counter() - started) * 1000, 1)
    user = getattr(request, "user", None)  # DRF sets the API client here as well as on its Request
    # By type, not isinstance: a session user is a lazy object that isinstance would load.
    client = str(user) if issubclass(type(user), ApiClient) else ""  # "acme (test)" for a test token
    request_logger.info(
        "%s %s %d %.1fms",
        request.method,
        request.path,
        status,
        duration_ms,
        extra={"method": request.method, "path": request.path, "status": status, "duration_ms": duration_ms, "client": client},
    )


def _is_json(response: HttpResponseBase) -> bool:
    content_type = response.get("Content-Type", "").split(";")[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


def _json_error(request: HttpRequest, response: HttpResponseBase) -> JsonResponse:
    """``response`` (an HTML error page) as our JSON error, its status and headers kept."""
    headers = {name: value for name, value in response.items() if name.lower() not in ("content-type", "content-length")}
    if response.status_code >= 500:
        http_status, body, extra_headers = unhandled_error(getattr(request, _UNHANDLED_ATTRIBUTE, None))
        headers.update(extra_headers)
    else:
        http_status = response.status_code
        message = f"no API endpoint at {request.path}" if http_status == 404 else _phrase(http_status)
        body = error_body(_ERROR_CODES.get(http_status, "error"), message)
    replacement = JsonResponse(body, status=http_status, headers=headers)
    # Django logged the error already (with its traceback) and marked the page so; without the
    # mark it would log the replacement again.
    replacement._has_been_logged = getattr(response, "_has_been_logged", False)  # type: ignore[attr-defined]
    return replacement


def _phrase(http_status: int) -> str:
    try:
        return HTTPStatus(http_status).phrase
    except ValueError:
        return "error"


@receiver(got_request_exception)
def _remember_unhandled_exception(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django sends this while it turns an exception into its 500 page; the exception tells a
    database outage (503) from a bug (500) when the page is replaced."""
    if request is not None:
        setattr(request, _UNHANDLED_ATTRIBUTE, sys.exc_info()[1])
