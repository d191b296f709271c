"""Inbox user tokens on requests (``Authorization: Bearer`` only: a token in a URL is recorded by
proxies and traces; the stream, which EventSource opens without headers, takes a one-use ticket or
``?token=`` itself, stream.py), and CORS for the origins each client allows (``inbox_allowed_origins``).

A client token is refused here (401): the inbox endpoints act for one user, and a client token
would act for all of them. A preflight carries no token, so it is answered for an origin that any
active client allows; the answer itself carries Access-Control-Allow-Origin only for an origin
the token's own client allows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request

from ...errors import TokenRefused
from ...models import ApiClient
from ...services.inbox import InboxUser, inbox_token_verify

INBOX_PREFIX = "/api/v1/inbox/"
# POST/DELETE /inbox/tokens is called by the client's server with its client token: no CORS.
TOKENS_PATH = "/api/v1/inbox/tokens"
# Longer than any token or ticket this platform makes.
MAX_TOKEN_LENGTH = 2048
# How long a process trusts its list of every client's allowed origins (for preflights only).
ORIGINS_CACHE_SECONDS = 5.0
PREFLIGHT_MAX_AGE = "600"


def request_token(request: HttpRequest) -> str:
    """The token of an inbox request's Authorization header; "" for none (``?token=`` is not read)."""
    header = request.headers.get("Authorization", "").split()
    if len(header) == 2 and header[0].lower() in ("bearer", "token"):
        return header[1][:MAX_TOKEN_LENGTH]
    return ""


class InboxUserAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[InboxUser, str] | None:
        token = request_token(request._request)
        if not token:
            raise exceptions.NotAuthenticated("an inbox user token is required in Authorization: Bearer")
        try:
            user = inbox_token_verify(token)
        except TokenRefused as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.extra.get("reason", "invalid")) from None
        request._request.inbox_client = user.client  # type: ignore[attr-defined]
        return user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="inbox"'


class InboxUserScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = InboxUserAuthentication
    name = "inboxUserToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An inbox user token from POST /api/v1/inbox/tokens, in Authorization: Bearer.",
        }


class IsInboxUser(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, InboxUser)


class InboxUserRateThrottle(throttling.SimpleRateThrottle):
    """Requests per inbox user (INBOX_USER_THROTTLE_RATE), counted in the shared cache: a page in
    a loop slows itself down, not its client's server-side calls (those are the client's own rate)."""

    scope = "inbox_user"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        user = getattr(request, "user", None)
        if not isinstance(user, InboxUser):
            return None
        return self.cache_format % {"scope": self.scope, "ident": f"{user.client.pk}:{user.user_id}"}

    def allow_user(self, user: InboxUser) -> bool:
        """The throttle outside DRF (the stream's async view): True when the user may go on."""
        return bool(self.allow_request(_UserRequest(user), None))  # type: ignore[arg-type]


@dataclass(frozen=True)
class _UserRequest:
    user: InboxUser


class _AllowedOrigins:
    """Every active client's allowed origins, read at most every ORIGINS_CACHE_SECONDS per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._origins: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def __contains__(self, origin: str) -> bool:
        with self._lock:
            if time.monotonic() - self._read_at > ORIGINS_CACHE_SECONDS:
                lists = ApiClient.objects.filter(is_active=True).values_list("inbox_allowed_origins", flat=True)
                self._origins = frozenset(origin for origins in lists for origin in (origins or []))
                self._read_at = time.monotonic()
            return origin in self._origins


any_client_allows = _AllowedOrigins()


def cors_headers(origin: str, client: ApiClient | None) -> dict[str, str]:
    """The CORS headers of an inbox answer to ``origin``: none unless ``client`` (the token's; or,
    before a token is known, any client) allows it."""
    if not origin:
        return {}
    allowed = (
        origin.lower() in (client.inbox_allowed_origins or []) if client is not None else origin.lower() in any_client_allows
    )
    if not allowed:
        return {"Vary": "Origin"}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin", "Access-Control-Expose-Headers": "Retry-After"}


class InboxCorsMiddleware:
    """Preflights of the inbox API, and CORS headers on its answers (the stream sets its own)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(INBOX_PREFIX) or request.path.startswith(TOKENS_PATH):
            return self.get_response(request)
        origin = request.headers.get("Origin", "")
        if request.method == "OPTIONS" and origin and "Access-Control-Request-Method" in request.headers:
            response = HttpResponse(status=204)
            headers = cors_headers(origin, None)
            if "Access-Control-Allow-Origin" in headers:
                headers.update(
                    {
                        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                        "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
                        "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
                    }
                )
            for name, value in headers.items():
                response[name] = value
            return response
        response = self.get_response(request)
        for name, value in cors_headers(origin, getattr(request, "inbox_client", None)).items():
            response[name] = value
        return response
