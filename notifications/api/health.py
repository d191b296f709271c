"""The health probes: liveness (the process answers) and readiness (its dependencies do)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..health import readiness_checks
from .serializers import (
    LivenessSerializer,
    ReadinessSerializer,
)


class LivenessView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    @extend_schema(
        operation_id="healthz",
        summary="Liveness",
        description="200 while the web process answers; checks nothing else (see /readyz). No token.",
        tags=["health"],
        responses={200: OpenApiResponse(LivenessSerializer, description="The process answers.")},
    )
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadinessView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    @extend_schema(
        operation_id="readyz",
        summary="Readiness",
        description="200 when PostgreSQL, RabbitMQ and Redis all answer; 503 naming the ones that do not. No token.",
        tags=["health"],
        responses={
            200: OpenApiResponse(ReadinessSerializer, description="All dependencies reachable."),
            503: OpenApiResponse(ReadinessSerializer, description="Names what is down."),
        },
    )
    def get(self, request: Request) -> Response:
        checks = readiness_checks()
        down = [c.name for c in checks if not c.ok]
        body = {
            "status": "unavailable" if down else "ok",
            "down": down,
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in checks},
        }
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if down else status.HTTP_200_OK)
