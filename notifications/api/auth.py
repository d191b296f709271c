"""Bearer-token authentication of API clients, their permission and their throttle."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request

from ..models import ApiClient, hash_token


class ApiClientTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` (or ``Token <token>``); tokens are compared by hash."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[ApiClient, str] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Bearer <token>'")
        token = header[1]
        client = ApiClient.objects.filter(token_hash=hash_token(token)).first()
        if client is None or not client.is_active:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        return client, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiClientTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = ApiClientTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class IsApiClient(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, ApiClient)


class ApiClientRateThrottle(throttling.SimpleRateThrottle):
    """Requests per API client, counted in the shared cache so every web process agrees."""

    scope = "api_client"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.user, ApiClient):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
