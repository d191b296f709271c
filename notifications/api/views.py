"""Thin API views: parse the request, call one service, shape the answer."""

from __future__ import annotations

import logging
from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import selectors, services
from ..errors import NotificationError, ValidationFailed
from ..health import readiness_checks
from ..models import ApiClient
from .exceptions import api_exception_handler, error_body
from .serializers import (
    AcceptedSerializer,
    BatchCreateSerializer,
    NotificationCreateSerializer,
    NotificationDetailSerializer,
    NotificationFilterSerializer,
    NotificationSerializer,
    RecipientSerializer,
)

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Makes the request safe to repeat: the same key and body replay the first answer.",
)
ERROR = OpenApiResponse(description='An error: {"error": {"code", "message", "field"?}}')
MAX_BATCH = 100
MAX_KEY_LENGTH = 255  # IdempotencyKey.key and Recipient.user_id are varchar(255)

logger = logging.getLogger("notifications.api")


class NewestFirstPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


def _accept(request: Request, payload: Any, header_key: str | None) -> services.AcceptResult:
    if header_key and (len(header_key) > MAX_KEY_LENGTH or not header_key.isprintable()):
        raise ValidationFailed(
            f"an Idempotency-Key is 1 to {MAX_KEY_LENGTH} printable characters", extra={"field": "Idempotency-Key"}
        )
    serializer = NotificationCreateSerializer(data=payload)
    serializer.is_valid(raise_exception=True)
    body_key = serializer.validated_data.get("idempotency_key")
    fingerprint_source = {k: v for k, v in payload.items() if k != "idempotency_key"}
    return services.notification_accept(
        client=_client(request),
        request=serializer.to_request(),
        idempotency_key=header_key or body_key,
        fingerprint=services.request_fingerprint(fingerprint_source),
    )


def _client(request: Request) -> ApiClient:
    """The authenticated API client (IsApiClient has already refused anyone else)."""
    return cast(ApiClient, request.user)


def _path_user_id(user_id: str) -> str:
    if len(user_id) > MAX_KEY_LENGTH or "\x00" in user_id:
        raise ValidationFailed(f"a user_id is 1 to {MAX_KEY_LENGTH} characters without NUL", extra={"field": "user_id"})
    return user_id


def _require_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise serializers.ValidationError({"non_field_errors": ["the request body must be a JSON object"]})
    return data


class NotificationCollectionView(APIView):
    @extend_schema(
        operation_id="notifications_create",
        request=NotificationCreateSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={202: AcceptedSerializer, 400: ERROR, 401: ERROR, 409: ERROR, 413: ERROR, 422: ERROR, 429: ERROR},
    )
    def post(self, request: Request) -> Response:
        payload = _require_object(request.data)
        result = _accept(request, payload, request.headers.get("Idempotency-Key"))
        headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
        return Response(result.body, status=result.status_code, headers=headers)

    @extend_schema(
        operation_id="notifications_list",
        parameters=[NotificationFilterSerializer],
        responses={200: NotificationSerializer(many=True), 400: ERROR, 401: ERROR},
    )
    def get(self, request: Request) -> Response:
        filters = NotificationFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        queryset = selectors.notification_list(client=_client(request), filters=filters.validated_data)
        paginator = NewestFirstPagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(NotificationSerializer(page, many=True).data)


class NotificationBatchView(APIView):
    @extend_schema(
        operation_id="notifications_create_batch",
        request=BatchCreateSerializer,
        responses={
            202: OpenApiResponse(
                description="One result per item, in order: {status, body | error}; an item that fails, even "
                "with a 500, fails only its own slot"
            ),
            400: ERROR,
        },
    )
    def post(self, request: Request) -> Response:
        items = _require_object(request.data).get("notifications")
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            raise serializers.ValidationError({"notifications": [f"a list of 1 to {MAX_BATCH} notifications"]})
        return Response(
            {"results": [self._item_result(request, index, item) for index, item in enumerate(items)]},
            status=status.HTTP_202_ACCEPTED,
        )

    def _item_result(self, request: Request, index: int, item: Any) -> dict[str, Any]:
        """One item's slot. Items before it are already committed, so no error of one item may
        fail the batch: the client would send them all again."""
        try:
            result = _accept(request, _require_object(item), None)
        except (NotificationError, APIException) as exc:
            response = api_exception_handler(exc, {"request": request, "view": self})
            assert response is not None
            return {"status": response.status_code, **response.data}
        except Exception:
            logger.exception("batch item %d failed unexpectedly; the other items went on", index)
            return {
                "status": status.HTTP_500_INTERNAL_SERVER_ERROR,
                **error_body("internal_error", "an unexpected error occurred while accepting this notification"),
            }
        return {"status": result.status_code, "body": result.body}


class NotificationDetailView(APIView):
    @extend_schema(operation_id="notifications_retrieve", responses={200: NotificationDetailSerializer, 404: ERROR})
    def get(self, request: Request, notification_id: str) -> Response:
        notification = selectors.notification_get(client=_client(request), notification_id=notification_id)
        return Response(NotificationDetailSerializer(notification).data)


class NotificationCancelView(APIView):
    @extend_schema(
        operation_id="notifications_cancel", request=None, responses={200: NotificationSerializer, 404: ERROR, 409: ERROR}
    )
    def post(self, request: Request, notification_id: str) -> Response:
        notification = services.notification_cancel(client=_client(request), notification_id=notification_id)
        return Response(NotificationSerializer(notification).data)


class RecipientView(APIView):
    @extend_schema(operation_id="recipients_retrieve", responses={200: RecipientSerializer, 404: ERROR})
    def get(self, request: Request, user_id: str) -> Response:
        recipient = selectors.recipient_get(client=_client(request), user_id=_path_user_id(user_id))
        if recipient is None:
            return Response(error_body("not_found", f"no recipient {user_id!r}"), status=status.HTTP_404_NOT_FOUND)
        return Response(RecipientSerializer(recipient).data)

    @extend_schema(
        operation_id="recipients_upsert",
        request=RecipientSerializer,
        responses={200: RecipientSerializer, 201: RecipientSerializer, 400: ERROR},
    )
    def put(self, request: Request, user_id: str) -> Response:
        serializer = RecipientSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        recipient, created = services.recipient_upsert(
            client=_client(request), user_id=_path_user_id(user_id), data=serializer.validated_data
        )
        return Response(RecipientSerializer(recipient).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(operation_id="recipients_delete", responses={204: None, 404: ERROR})
    def delete(self, request: Request, user_id: str) -> Response:
        services.recipient_delete(client=_client(request), user_id=_path_user_id(user_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class LivenessView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    @extend_schema(operation_id="healthz", responses={200: OpenApiResponse(description="The process answers.")})
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadinessView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    @extend_schema(
        operation_id="readyz",
        responses={
            200: OpenApiResponse(description="All dependencies reachable."),
            503: OpenApiResponse(description="Names what is down."),
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
